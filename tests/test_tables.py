"""The one table printer (``profdsl._cli.common.table``): the commands' tables and the demo's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from profdsl._cli import common
from profdsl._cli.common import table
from profdsl._demo.ledger_table import ledger_lines
from profdsl._demo.metrics_table import HEADERS, MetricsLog
from profdsl._demo.report import slow_step_table
from profdsl.metrics import StageTiming, StepTimings

ROWS = [["actor", "update", "12.50", "3"], ["critic", "values", "0.25", "10"]]
HEAD = ["role", "stage", "total ms", "n"]


def test_every_column_left_aligned_by_default() -> None:
    assert table(HEAD, ROWS).splitlines() == [
        "role    stage   total ms  n",
        "------  ------  --------  --",
        "actor   update  12.50     3",
        "critic  values  0.25      10",
    ]


def test_names_left_figures_right() -> None:
    """``left``: the first columns (names) left-aligned, the figures right-aligned, headers too."""
    assert table(HEAD, ROWS, left=2).splitlines() == [
        "role    stage   total ms   n",
        "------  ------  --------  --",
        "actor   update     12.50   3",
        "critic  values      0.25  10",
    ]


def test_on_a_terminal_a_name_is_cut_and_a_figure_never(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a narrow terminal a left-aligned last column (a name) is cut to fit; a right-aligned
    one (a figure) is printed whole: a cut figure would be a wrong one."""
    monkeypatch.setattr(common.sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(common.shutil, "get_terminal_size", lambda fallback: os.terminal_size((15, 24)))
    long = [["a", "1234567890123456.25"]]
    assert table(["x", "ms"], long, left=1).splitlines()[-1] == "a  1234567890123456.25"
    assert table(["x", "name"], [["a", "n" * 30]]).splitlines()[-1] == "a  " + "n" * 12


def _timings(role: str, step: int) -> StepTimings:
    ledger = {"update": 0.004, "overhead": 0.001, "outside": 0.005}
    stages = {"update_actor": StageTiming(total_s=0.004, self_s=0.004, count=1)}
    return StepTimings(role=role, rank=0, step=step, wall_s=0.010, stages=stages, ledger=ledger)


def test_the_demo_prints_its_tables_with_it() -> None:
    """The demo's always-on table and step ledger are that table (names left, figures right),
    its control characters escaped: a role is the user's string."""
    log = MetricsLog()
    log.add([_timings("actor", 1), _timings("cri\x1btic", 1)])
    assert log.lines([]) == table(HEADERS, log.rows([]), left=2).splitlines()
    assert all("\x1b" not in line for line in log.lines([]) + ledger_lines(log.timings))
    assert any("cri\\x1btic" in line for line in log.lines([]))
    rule, row = ledger_lines(log.timings)[1:3]
    assert row.split() == ["1", "actor", "1", "10.00", "4.00", "1.00", "5.00"]
    assert len(row) == len(rule)  # the last figure right-aligned under its rule


def test_the_slow_step_table_right_aligns_its_figures(tmp_path: Path) -> None:
    """The demo's "where the slow step's time went": names left, figures right (the demo's other
    tables' look; a figure is never cut on a terminal)."""
    lines = [
        {"schema": 2, "role": "actor", "rank": 0, "step": step, "wall_s": seconds, "host": "vm", "pid": 1}
        | {"stages": {"update_actor": {"count": 1, "total_s": seconds, "self_s": seconds}}}
        for step, seconds in ((0, 0.002), (1, 0.003), (2, 1.5))
    ]
    (tmp_path / "profdsl-metrics-rank0-vm-1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    head, rule, row = slow_step_table(str(tmp_path), 2, 0)
    assert row.split() == ["actor", "update_actor", "1500.0", "2.5", "+1497.5", "600.0x", "2"]
    assert head.endswith("  n") and rule.endswith("  -") and row.endswith("  2") and len(head) == len(row)
    assert row.index("1500.0") + len("1500.0") == head.index("step 2 ms") + len("step 2 ms")
