"""Device time bookkeeping, with a fake CUDA event source (no GPU here).

The fake follows ``torch.cuda.Event``'s documented API: ``Event(enable_timing=True)``,
``record()`` queues a timestamp on the current stream, ``elapsed_time(end)`` returns
milliseconds and fails unless both events have completed (here: after ``synchronize()``). The
real source (``torch.cuda.Event``, ``torch.cuda.synchronize``) runs only where
``torch.cuda.is_available()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from profdsl import Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage
from profdsl.metrics import _device as device
from profdsl.metrics._device import CudaEvents, DeviceTimes
from profdsl.metrics._tree import Node, Paths, Root

from .metrics_support import FakeClock, fake_clock

pytest.importorskip("torch")  # the meter looks for device time only in a process that uses torch


class FakeDevice:
    """A stream's timeline: kernels advance it; events read it when they complete."""

    def __init__(self) -> None:
        self.now = 0.0  # seconds of device work queued so far
        self.syncs = 0
        self.created = 0
        self.pending: list[FakeEvent] = []

    def run(self, seconds: float) -> None:
        self.now += seconds

    def synchronize(self) -> None:
        self.syncs += 1
        for event in self.pending:
            event.done = True
        self.pending.clear()

    def event_type(self, **kwargs: Any) -> FakeEvent:
        assert kwargs == {"enable_timing": True}
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, device: FakeDevice) -> None:
        self.device, self.at, self.done = device, None, False

    def record(self) -> None:
        self.at, self.done = self.device.now, False
        self.device.pending.append(self)

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.done and end.done) or self.at is None or end.at is None:
            raise RuntimeError("CUDA error: device not ready")
        return (end.at - self.at) * 1000.0


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDevice]:
    fake = FakeDevice()
    monkeypatch.setattr(device, "cuda_source", lambda: CudaEvents(fake.event_type, fake.synchronize))
    yield fake


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    with fake_clock(monkeypatch) as fake:
        yield fake


def test_device_time_per_stage(gpu: FakeDevice, clock: FakeClock) -> None:
    """Each stage's device time is the queued work between its entry and exit events; read with
    one synchronize per step, at its end, never inside it."""
    config = ProfilerConfig(metrics=Metrics(enabled=True))
    syncs_inside: list[int] = []
    with Profiler(config, role="actor", rank=0, world_size=1) as profiler:
        for step in range(2):
            with profiler.step(step):
                with profile_stage("update_actor"):
                    gpu.run(1.0)
                    for _ in mini_batch_window(range(2)):
                        gpu.run(0.5)
                        clock.advance(0.25)
                    syncs_inside.append(gpu.syncs)
                with profile_stage("idle"):
                    clock.advance(1.0)  # host work only
            flat = profiler.metrics
            assert flat["timing_device_s/update_actor"] == 2.0
            assert flat["timing_device_s/update_actor/mini_batch"] == 1.0
            assert flat["timing_device_s/idle"] == 0.0
            assert flat["timing_s/update_actor/mini_batch"] == 0.5  # host time is apart
    assert syncs_inside == [0, 1] and gpu.syncs == 2
    assert gpu.created == 8  # 4 entries x 2 events, reused in the second step


def test_decorated_and_generator_forms(gpu: FakeDevice) -> None:
    @profile_stage("call")
    def call() -> None:
        gpu.run(2.0)

    @profile_stage("gen")
    def gen() -> Iterator[int]:
        gpu.run(1.0)
        yield 1
        gpu.run(1.0)

    with (
        Profiler(ProfilerConfig(metrics=Metrics(enabled=True)), role="actor", rank=0, world_size=1) as profiler,
        profiler.step(1),
    ):
        call()
        for _ in gen():
            gpu.run(8.0)  # the consumer's: not the generator's
    assert profiler.metrics["timing_device_s/call"] == 2.0
    assert profiler.metrics["timing_device_s/gen"] == 2.0


def test_off_without_device_time(gpu: FakeDevice) -> None:
    config = ProfilerConfig(metrics=Metrics(enabled=True, device_time=False))
    with Profiler(config, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        with profile_stage("s"):
            pass
    assert gpu.created == 0 and not any(k.startswith("timing_device_s") for k in profiler.metrics)


def test_a_step_clock_times_no_device(gpu: FakeDevice) -> None:
    """A driver's clock (capture=False) creates no CUDA context: no device time."""
    config = ProfilerConfig(metrics=Metrics(enabled=True))
    with Profiler(config, role="driver", rank=0, world_size=1, capture=False) as profiler, profiler.step(1):
        with profile_stage("rollout"):
            pass
    assert gpu.created == 0 and "timing_s/rollout" in profiler.metrics


def test_a_failing_read_is_logged(
    gpu: FakeDevice, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("CUDA error: an illegal memory access")

    monkeypatch.setattr(gpu, "synchronize", broken)
    with (
        caplog.at_level(logging.ERROR, logger="profdsl"),
        Profiler(ProfilerConfig(metrics=Metrics(enabled=True)), role="actor", rank=0, world_size=1) as profiler,
    ):
        for step in range(2):
            with profiler.step(step), profile_stage("s"):
                pass
    assert caplog.text.count("illegal memory access") == 1
    assert "timing_s/s" in profiler.metrics and "timing_device_s/s" not in profiler.metrics


def test_bookkeeping_bounds(gpu: FakeDevice, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """At most MAX_PAIRS pairs a step; the rest are counted and said once."""
    monkeypatch.setattr(device, "MAX_PAIRS", 3)
    times = DeviceTimes(CudaEvents(gpu.event_type, gpu.synchronize))
    root = Root("actor", 1, Paths(10))
    node = Node("s", "s", root)
    for _ in range(5):
        start = times.mark()
        gpu.run(1.0)
        times.add(node, start, times.mark())
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        assert times.read_step(root).seconds == {node: 3.0}
    assert "device time of 2 of them is missing" in caplog.text
    assert times.read_step(root).seconds == {} and gpu.syncs == 1  # nothing to read: no synchronize


def test_no_torch_no_device_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    assert device.cuda_source() is None


def test_cpu_torch_has_no_cuda() -> None:
    """Here (CPU torch) the real source is not made: no CUDA."""
    assert device.cuda_source() is None
