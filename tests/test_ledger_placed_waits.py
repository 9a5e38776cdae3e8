"""Profiling's own waits inside a stage are the step's ``overhead``, not the stage's kind of work:
a scheduled stage's schedule steps (``Session.advance``, between its mini-batches, inside the
stage) are slowed by a real delay in profdsl's own call path, through a real CPU torch profiler;
the every-step ledger from the metrics, its metrics log line and the traced step's ledger from
its folder each hold at least those delays in ``overhead``, and the metrics' ``update`` bucket
holds none of them (bounds from the delays and the stage's own timing: no wall-clock upper
bound)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from profdsl import Metrics, Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage, rollout_window
from profdsl._runtime.slot.session import Session
from profdsl.analysis import _cost as cost
from profdsl.analysis._catalog import catalog
from profdsl.analysis._fleet import BEYOND
from profdsl.analysis._ledger import load_ledger
from profdsl.collect.metrics_log import read_log
from profdsl.metrics._ledger import step_ledger
from profdsl.metrics._tree import Paths, Root, child, close

from .profiling import config, work

pytest.importorskip("torch")

SLEEP_S = 0.03  # each schedule step's delay
MINI_BATCHES = 4


def test_a_scheduled_stages_schedule_steps_are_overhead_not_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    advanced: list[int] = []
    original = Session.advance

    def slow_advance(self: Session, index: int) -> None:
        time.sleep(SLEEP_S)  # inside profdsl's own schedule step, not the user's mini-batch
        advanced.append(index)
        original(self, index)

    monkeypatch.setattr(Session, "advance", slow_advance)
    cfg = config(
        tmp_path,
        discrete=True,
        torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=1, active=2)),
        metrics=Metrics(enabled=True, log=True),
    )
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            with profile_stage("update_actor", scheduled=True):
                for _ in mini_batch_window(range(MINI_BATCHES)):
                    work()
        timings = profiler.meter.timings
    assert advanced == list(range(MINI_BATCHES))
    held = MINI_BATCHES * SLEEP_S
    assert timings is not None and timings.ledger is not None
    stage_s = timings.stages["update_actor"].total_s  # its stretch: the delays ran inside it
    assert stage_s >= held
    assert timings.ledger["overhead"] >= held  # profiling's own time ...
    assert timings.ledger["update"] <= stage_s - held + 1e-6  # ... not the update's
    assert sum(round(v * 1e9) for v in timings.ledger.values()) == round(timings.wall_s * 1e9)

    [line] = [line for line in read_log(tmp_path)[0] if line.step == 1]
    assert line.ledger is not None and line.ledger["overhead"] >= held
    assert (line.ledger_waits_s or 0.0) >= held

    bad: list[str] = []
    found = load_ledger(str(tmp_path), catalog(tmp_path).artifacts, bad)
    assert bad == []
    [traced] = [r for r in found.ranks if r.role == "actor" and r.step == 1]
    assert traced.ledger is None  # its traces hold the recorded windows only: the metrics log's ledger
    [logged] = [r for r in found.metrics if r.role == "actor" and r.step == 1]
    assert logged.ledger is not None and logged.ledger.buckets["overhead"] >= round(held * 1e9)


def _discrete_step(tmp_path: Path) -> None:
    """One discrete profiled step with one stage capture, its metrics logged."""
    cfg = config(tmp_path, discrete=True, metrics=Metrics(enabled=True, log=True))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1), profile_stage("update_actor"):
            work()


def _rewrite_log(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    for path in tmp_path.glob("profdsl-metrics-*.jsonl"):
        lines = [json.loads(text) for text in path.read_text().splitlines()]
        for line in lines:
            change(line)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_log_without_the_timed_waits_keeps_the_traces_blocked_ms(tmp_path: Path) -> None:
    """A metrics log written before ``ledger_waits_s``: the traced step's overhead is its stage
    traces' blocked ms (and its engine waits: none here), as before."""
    _discrete_step(tmp_path)
    _rewrite_log(tmp_path, lambda line: line.pop("ledger_waits_s"))
    found = catalog(tmp_path).artifacts
    [step_cost] = [c for c in cost.step_costs(found) if c.role == "actor" and c.step == 1]
    [traced] = [r for r in load_ledger(str(tmp_path), found, []).ranks if r.step == 1]
    assert traced.ledger is not None and step_cost.blocked_ms is not None
    overhead = traced.ledger.buckets["overhead"] + traced.ledger.overhead_unplaced
    assert overhead == round(step_cost.blocked_ms * 1e6)


def test_timed_waits_beyond_any_clock_leave_the_step_without_a_ledger(tmp_path: Path) -> None:
    """``ledger_waits_s`` is read as untrusted input: a negative one is a bad line, one beyond
    any clock leaves the traced step without a ledger, saying why."""
    _discrete_step(tmp_path)
    _rewrite_log(tmp_path, lambda line: line.update(ledger_waits_s=1e13))
    found = catalog(tmp_path).artifacts
    [traced] = [r for r in load_ledger(str(tmp_path), found, []).ranks if r.step == 1]
    assert traced.ledger is None and traced.why == BEYOND
    _rewrite_log(tmp_path, lambda line: line.update(ledger_waits_s=-1.0))
    lines, problems = read_log(tmp_path)
    assert not [line for line in lines if line.step == 1] and any("ledger_waits_s" in p for p in problems)


def test_waits_beyond_the_room_are_kept_as_durations_and_none_once_the_step_ended() -> None:
    root = Root("actor", 1, Paths(8))
    root.wait_room = 4  # two placed waits
    for start in (1.0, 2.0, 3.0):
        root.wait_at(start, start + 0.25, engines=start == 3.0)
    assert root.placed == [1.0, 1.25, 2.0, 2.25]
    assert (root.waits_dropped, root.waited, root.engines) == (1, 0.25, 0.25)
    close(root)
    root.wait_at(4.0, 5.0)
    assert root.placed == [1.0, 1.25, 2.0, 2.25] and root.waited == 0.25
    ledger = step_ledger(root, began=0.0, wall_s=4.0)
    assert ledger.buckets_s is not None and ledger.buckets_s["overhead"] == 0.75 and ledger.waits_s == 0.75


class _SleepyEngine:
    """A rollout engine whose profiler takes ``SLEEP_S`` to start and as long to stop."""

    def start_profile(self) -> None:
        time.sleep(SLEEP_S)

    def stop_profile(self) -> None:
        time.sleep(SLEEP_S)


def test_engine_waits_inside_an_enclosing_stage_are_overhead_not_its_work(tmp_path: Path) -> None:
    """A ``rollout_window`` nested in a step-wide stage (``train_step``, kind update): its engines'
    profiler start and stop run inside that stage's time. They are overhead, not update (they
    were capped into the time outside every stage, none here, and left in update)."""
    cfg = config(tmp_path, metrics=Metrics(enabled=True))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1), profile_stage("train_step"):
            with rollout_window([_SleepyEngine()], name="gen"):
                work()
        timings = profiler.meter.timings
    assert timings is not None and timings.ledger is not None
    stage_s = timings.stages["train_step"].total_s
    assert timings.ledger["overhead"] >= 2 * SLEEP_S and (timings.ledger_engines_s or 0.0) >= 2 * SLEEP_S
    assert timings.ledger["update"] <= stage_s - 2 * SLEEP_S + 1e-6


def test_a_wait_known_only_by_its_length_keeps_the_old_rule() -> None:
    """A wait beyond the step's room for placed ones (kept by its length only): charged to the
    time no stage covers, capped there, the excess left in the stage's time
    (``overhead_unplaced_s``); a placed wait of the same length inside the stage is overhead whole."""
    root = Root("actor", 1, Paths(8))
    update = child(root, "update_actor")
    root.stretches += [0.0, 0.75, update]
    root.wait_room = 0  # no room: kept as a duration
    root.wait_at(0.125, 0.625)
    close(root)
    ledger = step_ledger(root, began=0.0, wall_s=1.0)
    assert ledger.buckets_s is not None and ledger.buckets_s["overhead"] == 0.25
    assert (ledger.overhead_unplaced_s, ledger.buckets_s["update"], ledger.waits_s) == (0.25, 0.75, 0.5)
    placed = Root("actor", 1, Paths(8))
    placed.stretches += [0.0, 0.75, child(placed, "update_actor")]
    placed.wait_at(0.125, 0.625)
    close(placed)
    ledger = step_ledger(placed, began=0.0, wall_s=1.0)
    assert ledger.buckets_s is not None and ledger.overhead_unplaced_s == 0.0
    assert (ledger.buckets_s["overhead"], ledger.buckets_s["update"], ledger.buckets_s["outside"]) == (0.5, 0.25, 0.25)


def test_a_scheduled_stage_recorded_in_windows_has_its_ledger_from_the_metrics(tmp_path: Path) -> None:
    """A scheduled stage's traces hold only its recorded windows (here mini-batches 2 and 5 of 6,
    through a real CPU torch profiler): split from them, the step's other mini-batches would read
    as ``outside``. The traced step gets no ledger from its traces and says why; its ledger is the
    metrics log line's, whole, in the view from the metrics log, and it is not placed in the
    groups' idle times by its partial traces."""
    cfg = config(
        tmp_path,
        discrete=True,
        torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=2, active=1)),
        metrics=Metrics(enabled=True, log=True),
    )
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1), profile_stage("update_actor", scheduled=True):
            for _ in mini_batch_window(range(6)):
                work()
    found = catalog(tmp_path).artifacts
    assert sorted(a.window for a in found if a.kind == "trace") == [(2, 2), (5, 5)]
    ledger = load_ledger(str(tmp_path), found, [])
    [traced] = [r for r in ledger.ranks if (r.role, r.step, r.rank) == ("actor", 1, 0)]
    assert traced.ledger is None and traced.why is not None
    assert "update_actor" in traced.why and "2, 5" in traced.why and "metrics log" in traced.why
    assert not traced.busy and not traced.work and not traced.placed
    [line] = [line for line in read_log(tmp_path)[0] if line.step == 1]
    [logged] = [r for r in ledger.metrics if (r.role, r.step, r.rank) == ("actor", 1, 0)]
    assert line.ledger is not None and logged.ledger is not None
    assert logged.ledger.buckets == {k: round(v * 1e9) for k, v in line.ledger.items()}
