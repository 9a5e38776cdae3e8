"""The step ledger's device time (``Metrics(device_time=True)`` on CUDA), with a fake device that
follows torch's CUDA event API (``tests/cuda_fake.py``; no GPU here): each bucket's device time,
the device time no stage's work covers, against a tick oracle for generated schedules of
concurrent streams, nested and still-open stages; its flat keys, the metrics log, ``summary
--ledger``; a step whose entries' events were not all kept, and places that cannot be read."""

from __future__ import annotations

import contextvars
import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl import Metrics, Profiler, ProfilerConfig, profile_stage
from profdsl._cli.ledger_view import ledger_text
from profdsl.analysis._catalog import catalog
from profdsl.analysis._ledger import load_ledger
from profdsl.collect.metrics_log import read_log
from profdsl.core._kinds import STAGE_KINDS, kind_of
from profdsl.metrics import NAMES
from profdsl.metrics import _device as device
from profdsl.metrics import _tree as tree
from profdsl.metrics._device import CudaEvents, DeviceTimes
from profdsl.metrics._tree import Node, Paths, Root

from .cuda_fake import FakeCuda
from .metrics_support import FakeClock, fake_clock, totals

pytest.importorskip("torch")  # the meter looks for device time only in a process that uses torch


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    with fake_clock(monkeypatch) as fake:
        yield fake


@pytest.fixture
def gpu(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda(clock)
    monkeypatch.setattr(device, "cuda_source", lambda: CudaEvents(fake.event, fake.synchronize))
    return fake


def test_the_fake_follows_torchs_event_api(clock: FakeClock) -> None:
    """What the metrics rely on, as torch 2.13's ``c10/cuda/CUDAEvent.h`` does it: timing off by
    default, an event takes its time when its stream reaches it, ``elapsed_time`` refuses
    untimed, unrecorded and uncompleted events, reads float milliseconds (negative when the end
    came first) across streams, and ``synchronize`` blocks the host until the device is done."""
    gpu = FakeCuda(clock)
    untimed, start, end, other = gpu.event(), gpu.event(enable_timing=True), gpu.event(enable_timing=True), None
    assert start.query()  # never recorded: nothing to wait for
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(end)
    untimed.record()
    start.record()  # at host time 100, the stream idle
    gpu.launch(2.0)  # runs 100-102
    end.record()  # reached at 102
    with pytest.raises(ValueError, match="enable_timing"):
        untimed.elapsed_time(end)
    with pytest.raises(RuntimeError, match="completed"):
        start.elapsed_time(end)
    assert start.query() and not end.query()
    gpu.synchronize()
    assert clock.now == 102.0 and end.query()
    assert start.elapsed_time(end) == 2000.0 and end.elapsed_time(start) == -2000.0
    with gpu.stream("side"):
        other = gpu.event(enable_timing=True)
        other.record()  # the side stream is idle: reached now
    assert start.elapsed_time(other) == 2000.0
    clock.advance(1 / 3)
    third = gpu.event(enable_timing=True)
    third.record()
    third.synchronize()
    read = start.elapsed_time(third)
    assert read == pytest.approx(2333.333, abs=1e-3) and read != (102 + 1 / 3 - 100) * 1000  # a float32


def test_each_bucket_carries_its_device_time(gpu: FakeCuda, clock: FakeClock, tmp_path: Path) -> None:
    """Generation's kernels leave the device idle half its time, the update queues 3 s of work
    in 0.5 s of wall time, the data stage waits on the host while the device still runs the
    update's work: per kind, wall and device time differ, the device buckets add up to the
    stages' span on the device; the flat keys, the metrics log and ``summary --ledger`` say so."""
    cfg = ProfilerConfig(save_path=str(tmp_path), metrics=Metrics(enabled=True, log=True))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            clock.advance(0.5)  # the loop's own code
            with profile_stage("generate"):  # device: 100.5 .. 101.5, kernels half of it
                gpu.launch(0.5)
                clock.advance(1.0)
            with profile_stage("update_actor"):  # device: 101.5 .. 104.5
                gpu.launch(3.0)
                clock.advance(0.5)
            with profile_stage("load_batch", kind="data"):  # device: reached at 104.5 both ends
                clock.advance(1.0)
            clock.advance(2.0)
            with profile_stage("generate"):  # device: 105 .. 106 (the device idle 104.5 .. 105)
                gpu.launch(1.0)
    timings = profiler.meter.timings
    assert timings is not None and timings.ledger is not None and timings.ledger_device is not None
    wall = {k: v for k, v in timings.ledger.items() if v}
    assert wall == {"generation": 1.0, "update": 0.5, "data": 1.0, "outside": 2.5}
    on_device = {k: v for k, v in timings.ledger_device.items() if v}
    assert on_device == {"generation": 2.0, "update": 3.0, "outside": 0.5}
    assert set(timings.ledger_device) == {*STAGE_KINDS, "outside"}
    assert sum(timings.ledger_device.values()) == 5.5  # 100.5 .. 106
    assert totals(timings.flat(), NAMES.ledger_device) == dict(timings.ledger_device)
    assert timings.stages["update_actor"].device_s == 3.0  # the stage's own figure is as before

    [line], problems = read_log(tmp_path)
    assert not problems and line.ledger_device == timings.ledger_device
    found = load_ledger(str(tmp_path), [], [])  # a folder of metrics logs only
    [rank] = found.metrics
    assert rank.device == {k: round(v * 1e9) for k, v in timings.ledger_device.items()}
    text = ledger_text(found)
    assert "on the device (Metrics(device_time=True)" in text
    row = next(r for r in text.splitlines() if r.startswith("actor ") and "%" in r)
    assert row.split() == ["actor", "0", "5500.000", "2000.000", "3000.000", "500.000", "9.1%"]
    (data,) = found.as_dict()["metrics"]["ranks"]
    assert data["device_span_ms"] == 5500.0 and data["device_ms"]["update"] == 3000.0


def test_without_device_time_there_is_no_device_split(clock: FakeClock) -> None:
    """No CUDA here (CPU torch): no device split, no flat keys of it, no device table."""
    with Profiler(ProfilerConfig(metrics=Metrics(enabled=True)), role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1), profile_stage("update_actor"):
            clock.advance(1.0)
    timings = profiler.meter.timings
    assert timings is not None and timings.ledger is not None and timings.ledger_device is None
    assert not totals(timings.flat(), NAMES.ledger_device)


def test_entries_not_kept_or_places_not_read_leave_no_device_split(
    gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the bound on pairs the step's device split would miss stages: it has none. Places
    that cannot be read (events of another device) are logged once; the stages' own device
    times stay."""
    monkeypatch.setattr(device, "MAX_PAIRS", 1)
    times = DeviceTimes(CudaEvents(gpu.event, gpu.synchronize))
    root = Root("actor", 1, Paths(10))
    node = tree.child(root, "update_actor")
    for _ in range(2):
        start = times.mark()
        gpu.launch(1.0)
        times.add(node, start, times.mark())
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        step = times.read_step(root)
    assert step.seconds == {node: 1.0} and step.placed is None

    monkeypatch.setattr(device, "MAX_PAIRS", 100)
    start = times.mark()
    gpu.launch(1.0)
    end = times.mark()
    times.add(node, start, end)

    def elsewhere(other: Any) -> float:
        raise RuntimeError("CUDA error: invalid resource handle")

    monkeypatch.setattr(start, "elapsed_time", lambda other: elsewhere(other) if other is not end else 1000.0)
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        step = times.read_step(root)
    assert step.seconds == {node: 1.0} and step.placed is None
    assert caplog.text.count("cannot be placed on one timeline") == 1


def test_a_nested_stage_is_placed_in_its_outermost_one(gpu: FakeCuda, clock: FakeClock) -> None:
    """Only top-level entries are placed; a nested stage's kernels are its parent's work."""
    times = DeviceTimes(CudaEvents(gpu.event, gpu.synchronize))
    root = Root("actor", 1, Paths(10))
    outer = tree.child(root, "update_actor")
    inner = tree.child(outer, "mini_batch")
    a = times.mark()
    b = times.mark()
    gpu.launch(2.0)
    times.add(inner, b, times.mark())
    times.add(outer, a, times.mark())
    stray = Node("old", "old", Root("actor", 0, Paths(10)))  # an entry of an earlier step's tree
    stray.spans = []
    times.add(stray, times.mark(), times.mark())
    step = times.read_step(root)
    assert step.placed == [(outer, 0.0, 2.0)]
    assert step.seconds[inner] == step.seconds[outer] == 2.0


# Generated schedules against a tick oracle.

STEP_END = 40  # ticks (seconds of the fake clock) from the step's start
BASES = ("generate", "update", "reward", "misc")

Scheduled = tuple[int, int, int, str, "str | None", int, "tuple[int, int, int] | None"]


@st.composite
def schedules(draw: Any) -> list[Scheduled]:
    """Up to three contexts (threads: each on a CUDA stream of its own), each with disjoint
    outermost stages on integer ticks (some still open when the step ends), each stage queuing
    a kernel of a few ticks on entry, some with a nested stage queuing one of its own:
    ``(context, start, end, name, declared kind, kernel ticks, nested (start, end, kernel) or None)``."""
    out: list[Scheduled] = []
    for ctx in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, 10))
        for _ in range(draw(st.integers(0, 3))):
            start = at + draw(st.integers(0, 8))
            end = start + draw(st.integers(1, 15))
            if start >= STEP_END + 5:
                break
            nested = None
            if end - start >= 3 and draw(st.booleans()):
                a = draw(st.integers(start + 1, end - 2))
                nested = (a, draw(st.integers(a + 1, end - 1)), draw(st.integers(0, 6)))
            base = draw(st.sampled_from(BASES))
            declared = draw(st.none() | st.sampled_from(STAGE_KINDS))
            out.append((ctx, start, end, f"{base}_{len(out)}", declared, draw(st.integers(0, 8)), nested))
            at = end
    return out


def _events(schedule: list[Scheduled]) -> list[tuple[int, int, int, int, str, int]]:
    """``(tick, 0: exit / 1: enter, order, schedule index, what, kernel ticks)``, in the order
    they happen: exits before entries at one tick, inner before outer on the way out."""
    events = []
    for index, (_, start, end, _, _, kernel, nested) in enumerate(schedule):
        events += [(start, 1, index * 4, index, "enter", kernel), (end, 0, index * 4 + 3, index, "exit", 0)]
        if nested is not None:
            events += [
                (nested[0], 1, index * 4 + 1, index, "enter inner", nested[2]),
                (nested[1], 0, index * 4 + 2, index, "exit inner", 0),
            ]
    events.sort(key=lambda e: (e[0], e[1], -e[2] if e[1] == 0 else e[2]))
    return events


def oracle(schedule: list[Scheduled]) -> dict[str, int] | None:
    """The device split worked out tick by tick, on its own: each context's stream runs its
    kernels one after another, each from when it was queued or the stream freed up; an entry's
    or exit's event is reached when the stream has run what was queued before it. The outermost
    stages that ended inside the step span the device from their entry's event to their exit's;
    over the span of them all, each tick goes to the stage that began last on the device (then
    ends first, then ended first on the host), the ticks none covers are ``outside``."""
    busy: dict[int, int] = {}
    entered: dict[int, int] = {}
    spans: list[tuple[int, int, str]] = []  # in the order the stages ended
    for tick, _, _, index, what, kernel in _events(schedule):
        ctx, _, end, name, declared, _, _ = schedule[index]
        reached = max(tick, busy.get(ctx, 0))
        if what == "enter":
            entered[index] = reached
        if what.startswith("enter"):
            busy[ctx] = reached + kernel
        if what == "exit" and end <= STEP_END:
            spans.append((entered[index], reached, kind_of(name, declared)))
    if not spans:
        return None
    buckets: Counter[str] = Counter(dict.fromkeys([*STAGE_KINDS, "outside"], 0))
    for tick in range(min(a for a, _, _ in spans), max(b for _, b, _ in spans)):
        running = [i for i, (a, b, _) in enumerate(spans) if a <= tick < b]
        if running:
            buckets[spans[min(running, key=lambda i: (-spans[i][0], spans[i][1], i))][2]] += 1
        else:
            buckets["outside"] += 1
    return dict(buckets)


def run_schedule(clock: FakeClock, gpu: FakeCuda, schedule: list[Scheduled]) -> Any:
    """Run ``schedule`` as one timed step through the real profiler and DSL, each context a
    ``contextvars`` context of its own on its own stream, the clock moved tick by tick."""
    contexts = {ctx: contextvars.copy_context() for ctx, *_ in schedule}
    inner = profile_stage("inner", kind="reward")
    stages = {i: (profile_stage(s[3], kind=s[4]), inner) for i, s in enumerate(schedule)}
    profiler = Profiler(ProfilerConfig(metrics=Metrics(enabled=True)), role="actor", rank=0, world_size=1)
    began = clock.now
    profiler.start(1)
    timings = None
    for tick, _, _, index, what, kernel in _events(schedule):
        if tick > STEP_END and timings is None:
            clock.now = began + STEP_END
            timings = profiler.stop()
        clock.now = began + tick
        stage = stages[index][1 if what.endswith("inner") else 0]
        with gpu.stream(f"s{schedule[index][0]}"):
            if what.startswith("enter"):
                contexts[schedule[index][0]].run(stage.__enter__)
                gpu.launch(kernel)
            else:
                contexts[schedule[index][0]].run(stage.__exit__, None, None, None)
    if timings is None:
        clock.now = began + STEP_END
        timings = profiler.stop()
    profiler.close()
    return timings


@settings(deadline=None, max_examples=150)
@given(schedules())
def test_the_device_split_equals_the_tick_oracle(schedule: list[Scheduled]) -> None:
    """Concurrent streams, nested stages (their kernels are their outermost stage's work),
    declared and default kinds, stages still open at the step's end (not counted): each device
    bucket is the oracle's, and they add up to the span of the stages' work on the device."""
    with pytest.MonkeyPatch.context() as patch:
        clock = FakeClock()
        patch.setattr(tree, "clock", clock)
        gpu = FakeCuda(clock)
        patch.setattr(device, "cuda_source", lambda: CudaEvents(gpu.event, gpu.synchronize))
        timings = run_schedule(clock, gpu, schedule)
    expected = oracle(schedule)
    assert timings is not None and timings.ledger is not None
    if expected is None:
        assert timings.ledger_device is None
        return
    assert timings.ledger_device == {k: float(v) for k, v in expected.items()}
    assert gpu.syncs == 1  # one synchronize, at the step's end


def test_a_traced_step_takes_its_device_split_and_engine_waits_from_the_metrics_log(tmp_path: Path) -> None:
    """A traced step's ledger comes from its trace; its device split and the seconds it waited
    on rollout engines' profilers come from its metrics log line (the waits go to overhead)."""
    from profdsl.collect._manifest import append_record, make_record
    from profdsl.collect.metrics_log import log_name
    from profdsl.records import MetricsLine, to_json

    from .test_ledger_folder import _meta, _trace

    _trace(
        tmp_path,
        "a0.pt.trace.json.gz",
        [("update_actor", 1, 200, 400)],
        _meta(0, 1, None, ["update_actor"]),
        role="actor", step=1, rank=0, world_size=2,
    )  # fmt: skip
    device_s = {"update": 0.0005, "outside": 0.0001}
    line = MetricsLine(
        role="actor", rank=0, world_size=2, step=1, wall_s=0.001, stages={},
        ledger={"update": 0.0004, "outside": 0.0006}, ledger_engines_s=0.00025, ledger_device=device_s,
    )  # fmt: skip
    (tmp_path / log_name(0, "h", 10)).write_text(json.dumps(to_json(line)) + "\n")
    assert append_record(tmp_path, make_record("trace", None, role="actor", step=2, rank=0, status="failed"))
    found = load_ledger(str(tmp_path), catalog(tmp_path).artifacts, [])
    [rank] = found.ranks
    assert rank.ledger is not None and rank.ledger.buckets["overhead"] == 250_000
    assert rank.ledger.buckets["outside"] == 350_000 and rank.ledger.buckets["update"] == 400_000
    assert rank.device == {"update": 500_000, "outside": 100_000}
    assert found.as_dict()["ranks"][0]["device_ms"] == {"update": 0.5, "outside": 0.1}
