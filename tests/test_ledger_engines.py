"""A rollout engine's profiler start and stop are the step's profiling overhead, not ``outside``:
engines whose ``start_profile`` and ``stop_profile`` each sleep a known time, plain and async,
through the real profiler; the every-step ledger from the metrics, the metrics log and the
traced step's ledger from its folder each hold at least those sleeps in ``overhead`` (a lower
bound: no wall-clock upper bound)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from profdsl import Metrics, Profiler, profile_stage, rollout_window
from profdsl._cli.ledger_view import ledger_text
from profdsl.analysis import _cost as cost
from profdsl.analysis._catalog import catalog
from profdsl.analysis._ledger import load_ledger
from profdsl.collect.metrics_log import read_log

from .profiling import config, work

pytest.importorskip("torch")

SLEEP_S = 0.05  # each start and each stop


class Sleepy:
    """An engine whose profiler takes ``SLEEP_S`` to start and as long to stop."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start_profile(self) -> None:
        time.sleep(SLEEP_S)
        self.calls.append("start")

    def stop_profile(self) -> None:
        time.sleep(SLEEP_S)
        self.calls.append("stop")


class AsyncSleepy:
    """The same with ``async`` methods (an engine such as vLLM's ``AsyncLLM``)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def start_profile(self) -> None:
        await asyncio.sleep(SLEEP_S)
        self.calls.append("start")

    async def stop_profile(self) -> None:
        await asyncio.sleep(SLEEP_S)
        self.calls.append("stop")


def test_engine_start_and_stop_are_overhead(tmp_path: Path) -> None:
    """Step 1 is profiled: two engines start and stop concurrently, so the step waits at least
    one sleep for each; step 2 is not: no engine is touched and no overhead is charged."""
    cfg = config(tmp_path, steps=[1], ranks=[0, 1], metrics=Metrics(enabled=True, log=True))  # replicas 0, 1
    engines = [Sleepy(), Sleepy()]
    ledgers = []
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        for step in (1, 2):
            with profiler.step(step), rollout_window(engines, name="gen"):
                pass
            ledgers.append(profiler.meter.timings)
    first, second = ledgers
    assert [e.calls for e in engines] == [["start", "stop"]] * 2
    assert first.ledger is not None and first.ledger_engines_s is not None
    assert first.ledger_engines_s >= 2 * SLEEP_S
    assert first.ledger["overhead"] >= 2 * SLEEP_S  # not in outside, nor in generation
    assert sum(round(v * 1e9) for v in first.ledger.values()) == round(first.wall_s * 1e9)
    assert second.ledger is not None and second.ledger["overhead"] == 0.0 and second.ledger_engines_s == 0.0

    lines, problems = read_log(tmp_path)
    assert not problems
    logged = {line.step: line for line in lines}
    assert (logged[1].ledger_engines_s or 0.0) >= 2 * SLEEP_S and logged[2].ledger_engines_s is None

    # The traced step's ledger from its trace: the engines' waits from its metrics log line.
    bad: list[str] = []
    found = load_ledger(str(tmp_path), catalog(tmp_path).artifacts, bad)
    assert bad == []
    [traced] = [r for r in found.ranks if r.role == "actor" and r.step == 1]
    assert traced.ledger is not None and traced.ledger.buckets["overhead"] >= round(2 * SLEEP_S * 1e9)


def test_async_engines_are_overhead_too(tmp_path: Path) -> None:
    cfg = config(tmp_path, steps=[1], metrics=Metrics(enabled=True))
    engines = [AsyncSleepy()]

    async def loop(profiler: Profiler) -> None:
        with profiler.step(1):
            async with rollout_window(engines, name="gen"):
                await asyncio.sleep(0)

    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        asyncio.run(loop(profiler))
        timings = profiler.meter.timings
    assert engines[0].calls == ["start", "stop"]
    assert timings is not None and timings.ledger is not None
    assert timings.ledger["overhead"] >= 2 * SLEEP_S and (timings.ledger_engines_s or 0.0) >= 2 * SLEEP_S


def test_traced_overhead_is_the_waits_its_metrics_timed(tmp_path: Path) -> None:
    """A discrete step with a stage capture and an engine: the traced step's ledger overhead is
    the step's profiling waits as its metrics log line timed them (``ledger_waits_s``: its stage
    capture's start and stop calls and its waits on the engine's profiler), to the nanosecond; at
    least the start and stop parts of the cost table's blocked ms plus its engine waits
    (``ledger_engines_s``): the cost table counts torch's calls of profdsl's own captures only
    (and, at the last profiled step, the wait for its traces after the step ended: not inside
    it). Both tables say so: a reader of the two (``profdsl summary --ledger`` and ``--cost``,
    the demo's report) is told why they differ."""
    cfg = config(tmp_path, steps=[1], ranks=[0], discrete=True, metrics=Metrics(enabled=True, log=True))
    engines = [Sleepy()]
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            with rollout_window(engines, name="gen"):
                pass
            with profile_stage("update_actor"):
                work()
    found = catalog(tmp_path).artifacts
    [step_cost] = [c for c in cost.step_costs(found) if c.role == "actor" and c.step == 1]
    assert step_cost.blocked_ms is not None and step_cost.blocked_ms > 0
    [line] = [line for line in read_log(tmp_path)[0] if line.step == 1]
    engines_s = line.ledger_engines_s or 0.0
    assert engines_s >= 2 * SLEEP_S
    assert line.ledger_waits_s is not None and line.ledger is not None
    ledger = load_ledger(str(tmp_path), found, [])
    [traced] = [r for r in ledger.ranks if r.role == "actor" and r.step == 1]
    assert traced.ledger is not None
    # The recorded overhead is placed in the step's time no stage covers and capped there; on a
    # loaded machine part of a wait can overlap a stage's time in the trace (the excess is
    # `overhead_unplaced`, which the ledger view names), so the sum of the two is what is pinned.
    overhead = traced.ledger.buckets["overhead"] + traced.ledger.overhead_unplaced
    assert overhead == round(line.ledger_waits_s * 1e9)  # the waits the metrics timed ...
    assert round(line.ledger["overhead"] * 1e9) == overhead  # ... the metrics' own overhead
    [rank_cost] = step_cost.ranks
    held_ms = (rank_cost.init_ms or 0.0) + (rank_cost.start_ms or 0.0) + (rank_cost.stop_ms or 0.0)
    assert held_ms > 0
    # the larger figure (the parts are rounded to the microsecond: at most 0.5 us each)
    assert overhead >= round(held_ms * 1e6) + round(engines_s * 1e9) - 1500 * rank_cost.traces
    # what each counts, where each is printed
    assert "not on rollout engines' profilers, which the step ledger's overhead adds" in cost.TITLE
    assert "as its metrics log line timed them" in ledger_text(ledger)
    assert "summary --cost's blocked ms counts torch's calls of profdsl's own captures only" in ledger_text(ledger)
