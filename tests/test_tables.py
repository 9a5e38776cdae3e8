"""The one table printer (``profdsl._cli.common.table``): the commands' tables and the demo's."""

from __future__ import annotations

import os

import pytest

from profdsl._cli import common
from profdsl._cli.common import table
from profdsl._demo.ledger_table import ledger_lines
from profdsl._demo.metrics_table import HEADERS, MetricsLog
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
