"""The step ledger of a folder (``profdsl.analysis._ledger``, ``profdsl summary --ledger``): a
hand-made folder whose buckets and idle times are worked out by hand, and the demo's output,
whose roles run one after another."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl.analysis._catalog import catalog
from profdsl.analysis._ledger import NO_WALL, load_ledger
from profdsl.collect._manifest import append_record, make_record
from profdsl.collect.metrics_log import log_name
from profdsl.core._ledger import OUTSIDE, OVERHEAD
from profdsl.records import MetricsLine, to_json

#: Every trace of the fixture shares this clock origin; event times are whole microseconds.
BASE_NS = 1_790_000_000_000_000_000


def _trace(
    folder: Path,
    name: str,
    events: list[tuple[str, int, int, int]],
    meta: dict[str, Any] | None,
    **record: Any,
) -> None:
    """A trace file of ``(name, tid, ts, dur)`` complete events (µs) and its manifest record;
    ``meta``: its ``profdsl`` metadata (None: an engine's own trace, without it)."""
    trace: dict[str, Any] = {"baseTimeNanoseconds": BASE_NS}
    if meta is not None:  # the header comes before the events
        trace["profdsl"] = meta
        trace["distributedInfo"] = {"rank": record["rank"], "world_size": 2}
    trace["traceEvents"] = [
        {"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
        for n, tid, ts, dur in events
    ]
    with gzip.open(folder / name, "wt") as file:
        json.dump(trace, file)
    assert append_record(
        folder, make_record(record.pop("kind", "trace"), name, bytes=(folder / name).stat().st_size, **record)
    )


def _walls(folder: Path, rank: int, walls: dict[int, float]) -> None:
    """The metrics log of ``rank``: the actor's wall time (s) at each step."""
    with open(folder / log_name(rank, "h", 10 + rank), "w") as file:
        for step, wall in walls.items():
            line = MetricsLine(role="actor", rank=rank, world_size=2, step=step, wall_s=wall, stages={})
            file.write(json.dumps(to_json(line)) + "\n")


def _meta(rank: int, step: int, stage: str | None, stages: list[str], **regions: Any) -> dict[str, Any]:
    return {
        "role": "actor",
        "stage": stage,
        "step": step,
        "rank": rank,
        "world_size": 2,
        "regions": {"stages": stages, "mini_batches": ["mini_batch"], **regions},
    }


@pytest.fixture
def known(tmp_path: Path) -> Path:
    """Step 1, in µs from the common origin:

    - actor rank 0 (wall 1000): a discrete trace of ``update_actor`` (blocked 100 µs) holding
      update_actor [200, 600) with mini_batch0 [210, 300) in it, and ``reward_fn`` on another
      thread [500, 700), declared of kind ``data``;
    - actor rank 1 (wall 900): a continuous trace (blocked 300 µs) holding update_actor [250, 650);
    - the engine of replica 0, rank 0: a trace of its own spanning [0, 180).

    Step 2: only in the metrics log. Step 3: rank 0's stage spans 200 µs of a 100 µs wall; rank 1
    has no metrics line.
    """
    folder = tmp_path / "profiles"
    folder.mkdir()
    _trace(
        folder,
        "a0.pt.trace.json.gz",
        [("update_actor", 1, 200, 400), ("mini_batch0", 1, 210, 90), ("reward_fn", 2, 500, 200)],
        _meta(0, 1, "update_actor", ["update_actor", "reward_fn"], kinds={"reward_fn": "data"}),
        role="actor", stage="update_actor", step=1, rank=0, world_size=2, blocked_ms=0.1,
    )  # fmt: skip
    _trace(
        folder,
        "a1.pt.trace.json.gz",
        [("update_actor", 1, 250, 400)],
        _meta(1, 1, None, ["update_actor"]),
        role="actor", step=1, rank=1, world_size=2, blocked_ms=0.3,
    )  # fmt: skip
    _trace(
        folder,
        "engine.pt.trace.json.gz",
        [("engine_step", 7, 0, 100), ("decode", 7, 100, 80)],
        None,
        kind="rollout", role="rollout", step=1, rank=0, world_size=2, replica=0,
    )  # fmt: skip
    for rank in (0, 1):
        _trace(
            folder,
            f"s3r{rank}.pt.trace.json.gz",
            [("update_actor", 1, 5000, 200)],
            _meta(rank, 3, "update_actor", ["update_actor"]),
            role="actor", stage="update_actor", step=3, rank=rank, world_size=2,
        )  # fmt: skip
    _walls(folder, 0, {1: 0.001, 2: 0.002, 3: 0.0001})
    _walls(folder, 1, {1: 0.0009, 2: 0.002})
    return folder


def _us(ns: float) -> float:
    return ns / 1000


def test_the_known_folder_splits_as_worked_out_by_hand(known: Path) -> None:
    bad: list[str] = []
    found = load_ledger(str(known), catalog(known).artifacts, bad)
    assert bad == []
    ranks = {(r.role, r.step, r.rank): r for r in found.ranks}
    zero = {"generation": 0.0, "inference": 0.0, "weight_sync": 0.0, "reward": 0.0, "other": 0.0}

    first = ranks[("actor", 1, 0)].ledger
    assert first is not None and _us(first.wall) == 1000
    # update 200-500 (reward_fn begins at 500 and takes 500-700), reward_fn declared data;
    # outside the stages: 500, of which the discrete trace's 100 µs of blocking.
    assert {k: _us(v) for k, v in first.buckets.items()} == {
        **zero, "update": 300, "data": 200, OVERHEAD: 100, OUTSIDE: 400
    }  # fmt: skip
    assert {k: _us(v) for k, v in first.beside.items()} == {"update": 100}
    assert ranks[("actor", 1, 0)].overhead_outside == 0

    second = ranks[("actor", 1, 1)]
    assert second.ledger is not None and _us(second.ledger.wall) == 900
    assert {k: _us(v) for k, v in second.ledger.buckets.items()} == {
        **zero, "update": 400, "data": 0, OVERHEAD: 0, OUTSIDE: 500
    }  # fmt: skip
    assert _us(second.overhead_outside) == 300  # a continuous capture's waits lie outside wall_s

    engine = ranks[("rollout", 1, 0)]
    assert engine.ledger is None and engine.group == ("rollout", 0) and engine.busy == [(0, 180_000)]

    assert ranks[("actor", 3, 1)].why == NO_WALL
    assert "spread over 0.200 ms, more than its wall time (0.100 ms)" in str(ranks[("actor", 3, 0)].why)
    assert found.untraced == [2]

    # The fleet at step 1: traced span [0, 700); actor busy 500 (rank 0) and 400 (rank 1).
    assert found.origin_us == BASE_NS // 1000 and found.spans[1] == (0, 700_000)
    groups = {g.group: g for g in found.groups if g.step == 1}
    actor, rollout = groups[("actor", None)], groups[("rollout", 0)]
    assert (actor.ranks, actor.ledgers, _us(actor.busy), _us(actor.idle)) == (2, 2, 450, 250)
    assert {g: _us(v) for g, v in actor.idle_while.items()} == {("rollout", 0): 180}
    assert _us(actor.buckets["update"]) == 350 and _us(actor.buckets[OVERHEAD]) == 50
    assert (rollout.ranks, rollout.ledgers, rollout.buckets, _us(rollout.busy), _us(rollout.idle)) == (
        1,
        0,
        {},
        180,
        520,
    )
    assert {g: _us(v) for g, v in rollout.idle_while.items()} == {("actor", None): 500}


def _summary(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), *args], capture_output=True, text=True, timeout=300
    )


def test_summary_ledger_prints_the_known_answer(known: Path) -> None:
    done = _summary(known, "--ledger")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    step1 = text.split("\nstep 1\n", 1)[1].split("\nstep 3\n", 1)[0]
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in step1.splitlines() if line.startswith("actor ")}
    # wall, update, data, overhead, outside, concurrent (only the kinds with time are columns)
    assert rows[("actor", "0")] == ["1.000", "0.300", "0.200", "0.100", "0.400", "0.100"]
    assert rows[("actor", "1")] == ["0.900", "0.400", "0.000", "0.000", "0.500", "0.000"]
    assert "actor ranks idle 25.7% of step 1 while rollout replica 0 ran (0.180 of 0.700 ms)" in step1
    assert "rollout replica 0 ranks idle 71.4% of step 1 while actor ran (0.500 of 0.700 ms)" in step1
    assert "actor rank 1 step 1: profiling held the step up 0.300 ms more" in step1
    assert "an engine replica has no steps of its own" in step1
    assert "actor rank 1: " + NO_WALL in text
    assert "not traced: 2." in text

    data = json.loads(_summary(known, "--ledger", "--json").stdout)
    (rank0,) = [r for r in data["ranks"] if (r["step"], r["rank"], r["role"]) == (1, 0, "actor")]
    assert rank0["wall_ms"] == 1.0 and sum(rank0["buckets_ms"].values()) == pytest.approx(1.0)
    assert rank0["buckets_ms"]["data"] == 0.2 and rank0["concurrent_ms"] == 0.1
    (step1_json,) = [s for s in data["steps"] if s["step"] == 1]
    assert step1_json["span_ms"] == 0.7
    actor = next(g for g in step1_json["groups"] if g["group"] == "actor")
    assert actor["idle_while_ms"] == {"rollout replica 0": 0.18}
    assert data["untraced_steps"] == [2]


@pytest.mark.parametrize("extra", [["--by", "role"], ["--cost"], ["--csv"]])
def test_ledger_refuses_the_other_views(known: Path, extra: list[str]) -> None:
    done = _summary(known, "--ledger", *extra)
    assert done.returncode == 2 and "--ledger" in done.stderr


def test_a_folder_without_traces_says_so(tmp_path: Path) -> None:
    _walls(tmp_path, 0, {0: 0.5, 1: 0.5})
    assert append_record(tmp_path, make_record("trace", None, role="actor", step=0, rank=0, status="failed"))
    done = _summary(tmp_path, "--ledger")
    assert "no traced step to split" in done.stdout and "not traced: 0, 1." in done.stdout


@pytest.mark.slow
def test_the_demo_roles_run_one_after_another(tmp_path: Path) -> None:
    """In the demo every role's stages run in turn on one thread, the engine's before them: each
    group is idle exactly while any other works, so its idle time while another ran is that
    group's busy time, and the groups' busy times never overlap. The actor's scheduled update is
    traced in windows of its mini-batches: its traced steps have their ledger from the metrics log,
    not from those partial traces, and are not placed among the others by them."""
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "demo", "--out", str(out), "--slow-step", "-1", "--num-steps", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(_summary(out, "--ledger", "--json").stdout)
    assert [s["step"] for s in data["steps"]] == [2, 3] and data["untraced_steps"] == [0, 1]
    for step in data["steps"]:
        groups = {g["group"]: g for g in step["groups"]}
        assert set(groups) == {"critic", "ref", "rollout replica 0"}
        assert sum(g["busy_ms"] for g in groups.values()) <= step["span_ms"] + 1e-3  # never at once
        for name, group in groups.items():
            for other, idle in group["idle_while_ms"].items():
                assert idle == pytest.approx(groups[other]["busy_ms"], abs=2e-3), (name, other)
            assert group["busy_ms"] + group["idle_ms"] == pytest.approx(step["span_ms"], abs=2e-3)
    for rank in data["ranks"]:
        if rank["role"] == "rollout":
            assert rank["wall_ms"] is None and "engine" in rank["why"]
            continue
        if rank["role"] == "actor":
            assert rank["buckets_ms"] is None and "recorded windows of its scheduled stage" in rank["why"]
            [logged] = [r for r in data["metrics"]["ranks"] if (r["role"], r["step"]) == ("actor", rank["step"])]
            assert logged["buckets_ms"]["update"] > 0
            continue
        buckets = rank["buckets_ms"]
        assert sum(buckets.values()) == pytest.approx(rank["wall_ms"], abs=2e-3)
        assert buckets["overhead"] > 0  # the demo's stages are discrete: their captures block inside the step
        kinds = {k for k, v in buckets.items() if v and k not in ("overhead", "outside")}
        assert kinds == {"actor": {"update"}, "ref": {"inference"}, "critic": {"inference", "update"}}[rank["role"]]
