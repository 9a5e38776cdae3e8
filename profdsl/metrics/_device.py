"""A stage's device time on CUDA: an event recorded at entry and one at exit, read once at the
end of the step.

Recording a CUDA event is asynchronous: it queues a timestamp on the current stream and returns.
Nothing here synchronizes inside a step; :meth:`DeviceTimes.read_step`, called when the step ends,
synchronizes once and reads every pair, and places the pairs of the step's top-level entries on
the device's timeline (each event's time after a common one: the step ledger's device time,
``docs/ledger.md``). The event source is injected (:class:`CudaEvents` takes the event class and
the synchronize function), so the bookkeeping is tested with a fake clock on machines without
CUDA; the real one runs only where ``torch.cuda.is_available()``.

What this relies on, as torch 2.13 implements it (lines of the wheel's ``torch/cuda/streams.py``
and ``torch/include/c10/cuda/CUDAEvent.h``): ``Event(enable_timing=False, ...)`` (streams.py
183-193: timing only when asked for); ``Event.record()`` records on
``torch.cuda.current_stream()`` (streams.py 199-209; CUDAEvent.h 131-165,
``cudaEventRecordWithFlags`` on that stream); ``query()`` says whether the event completed, true
for one never recorded (streams.py 225-232; CUDAEvent.h 103-119); ``elapsed_time(end)`` returns
milliseconds as a C ``float``, refuses events created without ``enable_timing`` or never
recorded (``ValueError``) and events not yet completed (``RuntimeError``) (streams.py 234-243;
CUDAEvent.h 195-215, ``cudaEventElapsedTime``), and compares any two events of one device,
whatever their streams (the top-level entries of several threads);
``torch.cuda.synchronize()`` (``torch/cuda/__init__.py`` 1209) waits for every stream of the
device, so every event recorded before it has completed. ``tests/cuda_fake.py`` follows these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from profdsl.core._log import once

__all__ = ["MAX_PAIRS", "CudaEvents", "DeviceTimes", "StepDevice", "Timed", "cuda_source"]


class Timed(Protocol):
    """What device time reads of a node of a step's tree (:class:`profdsl.metrics._tree.Node`,
    whose tree holds a :class:`DeviceTimes`: declared here, so that this module imports nothing
    of the tree): the step's root, and whether its step's stretches are kept (``spans``)."""

    @property
    def root(self) -> object: ...
    @property
    def spans(self) -> object: ...


N = TypeVar("N", bound=Timed)

#: The most entry/exit pairs one step keeps (each holds two events until the step ends).
MAX_PAIRS = 100_000


class CudaEvents:
    """Timing events on the current CUDA stream, reused across steps.

    Args:
        event: the event class, called as ``event(enable_timing=True)`` (``torch.cuda.Event``).
        synchronize: waits for the device (``torch.cuda.synchronize``).
    """

    def __init__(self, event: Callable[..., Any], synchronize: Callable[[], object]) -> None:
        self._event, self._synchronize = event, synchronize
        self._free: list[Any] = []

    def mark(self) -> Any:
        """An event recorded now on the current stream (asynchronous)."""
        event = self._free.pop() if self._free else self._event(enable_timing=True)
        event.record()
        return event

    def read(self, pairs: list[tuple[Any, Any]], placed: Sequence[Any]) -> tuple[list[float], list[float] | None]:
        """Seconds between each (start, end) pair, and of each event of ``placed`` (events of
        ``pairs``) after the first of them, after one synchronize; the events are reused. The
        places are None when they cannot be read (events of different devices: logged once)."""
        self._synchronize()
        seconds = [start.elapsed_time(end) / 1000.0 for start, end in pairs]  # elapsed_time: ms
        at: list[float] | None = None
        if placed:
            origin = placed[0]
            try:
                at = [origin.elapsed_time(event) / 1000.0 for event in placed]
            except Exception as exc:  # e.g. stages on another device: no device ledger this step
                once(
                    "device-places",
                    logging.WARNING,
                    "profdsl: the device times of a step's stages cannot be placed on one timeline (%s): "
                    "steps like it have no device ledger",
                    exc,
                )
        for start, end in pairs:
            self._free.extend((start, end))
        return seconds, at


@attrs.frozen
class StepDevice(Generic[N]):
    """One step's device time: seconds per node (all its entries), and where the step's
    top-level entries ran on the device, ``(node, start, end)`` in seconds after a common event
    (None: not known, or some entries' events were not kept)."""

    seconds: dict[N, float]
    placed: list[tuple[N, float, float]] | None


class DeviceTimes(Generic[N]):
    """One role's device marks of one step: ``(node, start event, end event)``."""

    __slots__ = ("dropped", "pairs", "source")

    def __init__(self, source: CudaEvents) -> None:
        self.source = source
        self.pairs: list[tuple[N, Any, Any]] = []
        self.dropped = 0

    def mark(self) -> Any:
        """An event for an entry or exit (None once the step holds :data:`MAX_PAIRS`)."""
        if len(self.pairs) >= MAX_PAIRS:
            return None
        return self.source.mark()

    def add(self, node: N, start: Any, end: Any) -> None:
        """An entry of ``node`` ended (list appends are atomic: any thread may call this)."""
        if start is None or end is None:
            self.dropped += 1
            return
        self.pairs.append((node, start, end))

    def read_step(self, root: object) -> StepDevice[N]:
        """The step's device time, read with one synchronize: seconds per node, and the places
        of ``root``'s top-level entries (a top-level node's: its ``spans`` are kept)."""
        pairs, self.pairs = self.pairs, []
        complete = not self.dropped
        if self.dropped:
            once(
                "device-time-dropped",
                logging.WARNING,
                "profdsl: a step had more than %d timed stage entries; the device time of %d of them is missing",
                MAX_PAIRS,
                self.dropped,
            )
            self.dropped = 0
        top = [(n, s, e) for n, s, e in pairs if n.root is root and n.spans is not None]
        if not pairs:
            return StepDevice({}, [] if complete else None)
        events = [event for _, start, end in top for event in (start, end)]
        seconds, at = self.source.read([(start, end) for _, start, end in pairs], events)
        totals: dict[N, float] = {}
        for (node, _, _), value in zip(pairs, seconds):
            totals[node] = totals.get(node, 0.0) + value
        placed = None
        if complete and (at is not None or not top):
            places = at or []
            placed = [(node, places[2 * i], places[2 * i + 1]) for i, (node, _, _) in enumerate(top)]
        return StepDevice(totals, placed)


def cuda_source() -> CudaEvents | None:
    """CUDA events when torch is installed and CUDA is available, else None. It imports torch:
    call it once per profiler, not per step."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except Exception:  # no torch, or a broken driver install: no device time, training goes on
        return None
    return CudaEvents(torch.cuda.Event, torch.cuda.synchronize)
