"""A fake CUDA device for the GPU-only paths of the metrics (no GPU here), following torch's
CUDA event API as torch 2.13 implements it:

- ``torch.cuda.Event(enable_timing=False, ...)`` (``torch/cuda/streams.py``, ``Event.__new__``):
  timing is off unless asked for;
- ``Event.record(stream=None)`` records on ``torch.cuda.current_stream()`` when no stream is
  given (``streams.py``, ``Event.record``); on the device (``c10/cuda/CUDAEvent.h``,
  ``CUDAEvent::record``: ``cudaEventRecordWithFlags``) the event completes, and takes its time,
  when the stream reaches it: after the work queued on that stream before it;
- ``Event.query()`` is true for an event never recorded, else once it completed
  (``CUDAEvent::query``);
- ``Event.elapsed_time(end)`` (``CUDAEvent::elapsed_time``): ``ValueError`` unless both events
  were created with ``enable_timing=True`` and both were recorded, ``RuntimeError`` unless both
  completed; else ``cudaEventElapsedTime``'s milliseconds, a C ``float`` (rounded to float32
  here), negative when ``end`` completed first; events of different streams may be compared;
- ``Event.synchronize()`` and ``torch.cuda.synchronize()`` block the host until the event, or
  all the device's work, completed: here the host clock moves on to that time.

Time is the test's: ``clock`` is the host's (the metrics' fake clock, in seconds), moved by the
test; kernels (``launch``) run on a stream one after another, each starting when both the host
launched it and the stream finished what came before.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

from .metrics_support import FakeClock

__all__ = ["FakeCuda", "FakeEvent"]


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


class FakeCuda:
    """One device: its streams' queues, the current stream, the events made."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.busy: dict[str, float] = {}  # per stream: when its queued work ends
        self.current = "default"
        self.events: list[FakeEvent] = []
        self.syncs = 0

    def event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ) -> FakeEvent:
        """``torch.cuda.Event``."""
        made = FakeEvent(self, enable_timing)
        self.events.append(made)
        return made

    def launch(self, seconds: float, stream: str | None = None) -> tuple[float, float]:
        """A kernel of ``seconds`` queued now on ``stream`` (the current one): where it runs."""
        name = self.current if stream is None else stream
        start = max(self.clock.now, self.busy.get(name, 0.0))
        self.busy[name] = start + seconds
        return start, start + seconds

    def reached(self, stream: str | None = None) -> float:
        """When ``stream`` (the current one) reaches what is queued on it now."""
        return max(self.clock.now, self.busy.get(self.current if stream is None else stream, 0.0))

    @contextmanager
    def stream(self, name: str) -> Iterator[None]:
        """``torch.cuda.stream(...)``: ``name`` is the current stream inside."""
        before, self.current = self.current, name
        try:
            yield
        finally:
            self.current = before

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``: the host waits for every stream."""
        self.syncs += 1
        self.clock.now = max([self.clock.now, *self.busy.values()])


class FakeEvent:
    """``torch.cuda.Event`` on a :class:`FakeCuda`."""

    def __init__(self, device: FakeCuda, timing: bool) -> None:
        self.device, self.timing = device, timing
        self.at: float | None = None  # when the stream reaches it (None: never recorded)
        self.records = 0

    def record(self, stream: str | None = None) -> None:
        self.at = self.device.reached(stream)
        self.records += 1

    def query(self) -> bool:
        return self.at is None or self.device.clock.now >= self.at

    def synchronize(self) -> None:
        if self.at is not None:
            self.device.clock.now = max(self.device.clock.now, self.at)

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.timing and end.timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self.at is None or end.at is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return _float32((end.at - self.at) * 1000.0)
