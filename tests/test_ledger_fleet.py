"""The step ledger across groups (``profdsl.analysis._fleet``) and from the metrics log
(``profdsl summary --ledger`` for steps no trace splits): the idle-time arithmetic against a
tick oracle, and a metrics log with a known answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl.analysis._fleet import RankLedger, fleet, from_metrics
from profdsl.analysis._ledger import load_ledger
from profdsl.collect.metrics_log import log_name
from profdsl.records import MetricsLine, to_json

KINDS = ("generation", "update", "inference")


@st.composite
def steps(draw: Any) -> list[tuple[str, int, list[tuple[int, int, str]]]]:
    """Two or three groups of one or two ranks, each rank with up to three stages on ticks
    0..40 (overlapping, of any kind): ``(group, rank, [(start, end, kind)])``."""
    out = []
    for group in ("a", "b", "c")[: draw(st.integers(2, 3))]:
        for rank in range(draw(st.integers(1, 2))):
            stages = []
            for _ in range(draw(st.integers(0, 3))):
                start = draw(st.integers(0, 35))
                stages.append((start, draw(st.integers(start + 1, 40)), draw(st.sampled_from(KINDS))))
            out.append((group, rank, stages))
    return out


def oracle(case: list[tuple[str, int, list[tuple[int, int, str]]]]) -> dict[str, dict[str, Any]]:
    """Tick by tick over the span (first stage begun to last ended): per group, the mean over
    its ranks of idle ticks, of idle ticks while each other group had a rank busy, and of idle
    ticks while any other group's rank worked at each kind."""
    ticks = [t for _, _, stages in case for a, b, _ in stages for t in range(a, b)]
    span = range(min(ticks), max(ticks) + 1) if ticks else range(0)
    groups = sorted({g for g, _, _ in case})

    def busy(stages: list[tuple[int, int, str]], tick: int, kind: str | None = None) -> bool:
        return any(a <= tick < b and kind in (None, k) for a, b, k in stages)

    out: dict[str, dict[str, Any]] = {}
    for group in groups:
        mine = [stages for g, _, stages in case if g == group]
        others = {g: [s for h, _, s in case if h == g] for g in groups if g != group}
        idle = [[t for t in span if not busy(stages, t)] for stages in mine]
        out[group] = {
            "idle": sum(map(len, idle)) / len(mine),
            "while": {
                g: sum(sum(1 for t in ticks_ if any(busy(s, t) for s in ranks)) for ticks_ in idle) / len(mine)
                for g, ranks in others.items()
            },
            "kind": {
                k: sum(
                    sum(1 for t in ticks_ if any(busy(s, t, k) for r in others.values() for s in r)) for ticks_ in idle
                )
                / len(mine)
                for k in KINDS
                if any(k == kk for r in others.values() for s in r for _, _, kk in s)
            },
        }
    return out


@settings(deadline=None, max_examples=200)
@given(steps())
def test_idle_times_equal_the_tick_oracle(case: list[tuple[str, int, list[tuple[int, int, str]]]]) -> None:
    ranks = []
    for group, rank, stages in case:
        work: dict[str, list[tuple[int, int]]] = {}
        for a, b, kind in stages:
            work.setdefault(kind, []).append((a, b))
        busy = sorted({(a, b) for a, b, _ in stages})
        from profdsl.core import _intervals as intervals

        ranks.append(RankLedger(group, 1, rank, (group, None), None, None, intervals.union(busy), work=work))
    groups, spans = fleet(ranks)
    expected = oracle(case)
    if not any(stages for _, _, stages in case):
        assert groups == [] and spans == {}
        return
    for found in groups:
        want = expected[found.group[0]]
        assert found.idle == pytest.approx(want["idle"])
        assert {g[0]: v for g, v in found.idle_while.items()} == pytest.approx(want["while"])
        assert dict(found.idle_while_kind) == pytest.approx(want["kind"])


def _line(folder: Path, **fields: Any) -> None:
    """One line of the metrics log of ``fields["rank"]``."""
    rank = fields["rank"]
    with open(folder / log_name(rank, "h", 100 + rank), "a") as file:
        file.write(json.dumps(to_json(MetricsLine(world_size=2, stages={}, **fields))) + "\n")


@pytest.fixture
def logged(tmp_path: Path) -> Path:
    """Step 7 from the metrics log only, in seconds from 1000.0 (the same host's clock):

    - driver rank 0 (wall 0.130): generation [0.001, 0.119), outside the rest;
    - actor ranks 0 and 1 (wall 0.130): update [0.119, 0.129), outside the rest;
    - critic rank 0 (wall 0.130): a ledger without its spans (it cannot be placed).

    Step 8: actor rank 0 has no ledger (more stretches than a step keeps).
    """
    folder = tmp_path / "profiles"
    folder.mkdir()
    gen = {"generation": 0.118, "outside": 0.012}
    upd = {"update": 0.010, "outside": 0.120}
    _line(folder, role="driver", rank=0, step=7, wall_s=0.130, ledger=gen,
          ledger_spans={"generation": ((0.001, 0.119),)}, began_s=1000.0)  # fmt: skip
    for rank in (0, 1):
        _line(folder, role="actor", rank=rank, step=7, wall_s=0.130, ledger=upd,
              ledger_spans={"update": ((0.119, 0.129),)}, began_s=1000.0)  # fmt: skip
    _line(folder, role="critic", rank=0, step=7, wall_s=0.130, ledger=upd, began_s=1000.0)
    _line(folder, role="actor", rank=0, step=8, wall_s=0.5, ledger_why="4097 stretches of ...")
    return folder


def test_a_metrics_log_splits_every_step_it_logged(logged: Path) -> None:
    found = load_ledger(str(logged), [], [])  # a folder of metrics logs only: no catalog
    assert found.ranks == [] and found.untraced == [7, 8]
    rows = {(r.role, r.step, r.rank): r for r in found.metrics}
    assert set(rows) == {("driver", 7, 0), ("actor", 7, 0), ("actor", 7, 1), ("critic", 7, 0), ("actor", 8, 0)}
    assert all(r.source == "metrics" for r in found.metrics)
    actor = rows[("actor", 7, 1)]
    assert actor.ledger is not None and actor.ledger.wall == 130_000_000
    assert sum(actor.ledger.buckets.values()) == actor.ledger.wall and actor.ledger.buckets["update"] == 10_000_000
    assert rows[("critic", 7, 0)].placed is False and rows[("actor", 8, 0)].ledger is None
    groups = {g.group[0]: g for g in found.metric_groups if g.step == 7}
    assert found.metric_spans[7][1] - found.metric_spans[7][0] == 128_000_000
    assert (groups["actor"].ranks, groups["actor"].ledgers) == (2, 2)
    assert groups["actor"].idle == pytest.approx(118_000_000)
    assert groups["actor"].idle_while_kind == pytest.approx({"generation": 118_000_000})
    assert (groups["critic"].ranks, groups["critic"].ledgers, groups["critic"].idle) == (0, 1, 0.0)


def test_summary_ledger_says_where_each_step_came_from(logged: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(logged), "--ledger"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "not traced: 7, 8. The traces split traced steps only" in text
    metrics = text.split("from the metrics log (Metrics(log=True)", 1)[1]
    assert "actor ranks idle 92.2% of step 7 while generation ran (118.000 of 128.000 ms)" in metrics
    assert "actor ranks idle 92.2% of step 7 while driver ran (118.000 of 128.000 ms)" in metrics
    assert "critic rank 0: not in the groups' idle times" in metrics
    assert "actor rank 0: 4097 stretches of ..." in metrics
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "profdsl", "summary", str(logged), "--ledger", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )
    assert data["ranks"] == [] and data["steps"] == []
    (step7,) = [s for s in data["metrics"]["steps"] if s["step"] == 7]
    actor = next(g for g in step7["groups"] if g["group"] == "actor")
    assert step7["span_ms"] == 128.0 and actor["idle_while_kind_ms"] == {"generation": 118.0}
    assert {r["source"] for r in data["metrics"]["ranks"]} == {"metrics"}


def test_from_metrics_places_a_step_by_its_beginning() -> None:
    """Two hosts' steps begun 5 ms apart: their spans are placed from ``origin_s``."""
    a = from_metrics(
        "actor", 1, 0, 0.01, {"update": 0.01}, spans_s={"update": [(0.0, 0.01)]}, began_s=10.0, origin_s=10.0
    )
    b = from_metrics(
        "actor", 1, 1, 0.01, {"update": 0.01}, spans_s={"update": [(0.0, 0.01)]}, began_s=10.005, origin_s=10.0
    )
    assert a.busy == [(0, 10_000_000)] and b.busy == [(5_000_000, 15_000_000)]
    groups, spans = fleet([a, b])
    assert spans[1] == (0, 15_000_000) and groups[0].idle == pytest.approx(5_000_000)


def test_profilers_with_a_metrics_log_only_give_every_steps_ledger(tmp_path: Path) -> None:
    """Two roles with Metrics(log=True) and nothing traced: the folder (metrics logs only) has a
    ledger per step, role and rank from the log, and the actor sat idle while the driver's
    rollout ran (they run one after the other)."""
    from profdsl import Metrics, Profiler, ProfilerConfig, profile_stage, rollout_window

    cfg = ProfilerConfig(save_path=str(tmp_path), metrics=Metrics(enabled=True, log=True))
    with (
        Profiler(cfg, role="driver", rank=0, world_size=1) as driver,
        Profiler(cfg, role="actor", rank=0, world_size=1) as actor,
    ):
        for step in range(3):
            driver.start(step)
            actor.start(step)
            with rollout_window([], profiler=driver):
                sum(range(20_000))
            with profile_stage("update_actor", profiler=actor):
                sum(range(20_000))
            actor.stop()
            driver.stop()
    found = load_ledger(str(tmp_path), [], [])
    assert sorted((r.role, r.step) for r in found.metrics) == sorted(
        (role, s) for role in ("actor", "driver") for s in range(3)
    )
    for rank in found.metrics:
        assert rank.ledger is not None and sum(rank.ledger.buckets.values()) == rank.ledger.wall
    for group in found.metric_groups:
        if group.group == ("actor", None):
            assert group.idle_while_kind["generation"] > 0 and "update" not in group.idle_while_kind


def test_plot_ledger_draws_every_step_of_a_metrics_log(logged: Path, tmp_path: Path) -> None:
    """``plot --ledger`` on a folder of metrics logs only: a PNG; its bars are the ranks' mean
    buckets per role and step, each from its source; ``--timeline`` is refused beside it."""
    pytest.importorskip("matplotlib")
    from profdsl._cli.ledger_plot import ledger_bars

    bars = {
        (role, step): (source, means) for role, step, source, means in ledger_bars(load_ledger(str(logged), [], []))
    }
    assert set(bars) == {("actor", 7), ("critic", 7), ("driver", 7)}  # step 8 has no ledger
    source, means = bars[("actor", 7)]
    assert source == "metrics" and means["update"] == pytest.approx(10.0) and means["outside"] == pytest.approx(120.0)
    assert sum(means.values()) == pytest.approx(130.0)
    out = tmp_path / "ledger.png"
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(logged), "-o", str(out), "--ledger"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    refused = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(logged), "-o", str(tmp_path / "t.png"), "--ledger", "--timeline"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2 and "--timeline" in refused.stderr
