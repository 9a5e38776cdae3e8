"""A stage's device time on CUDA: an event recorded at entry and one at exit, read once at the
end of the step.

Recording a CUDA event is asynchronous: it queues a timestamp on the current stream and returns.
Nothing here synchronizes inside a step; :meth:`DeviceTimes.settle`, called when the step ends,
synchronizes once and reads every pair. The event source is injected (:class:`CudaEvents` takes
the event class and the synchronize function), so the bookkeeping is tested with a fake clock on
machines without CUDA; the real one runs only where ``torch.cuda.is_available()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from profdsl.core.log import once

if TYPE_CHECKING:
    from profdsl.metrics.tree import Node

__all__ = ["MAX_PAIRS", "CudaEvents", "DeviceTimes", "cuda_source"]

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

    def read(self, pairs: list[tuple[Any, Any]]) -> list[float]:
        """Seconds between each (start, end) pair, after one synchronize; the events are reused."""
        self._synchronize()
        seconds = [start.elapsed_time(end) / 1000.0 for start, end in pairs]  # elapsed_time: ms
        for start, end in pairs:
            self._free.extend((start, end))
        return seconds


class DeviceTimes:
    """One role's device marks of one step: ``(node, start event, end event)``."""

    __slots__ = ("dropped", "pairs", "source")

    def __init__(self, source: CudaEvents) -> None:
        self.source = source
        self.pairs: list[tuple[Node, Any, Any]] = []
        self.dropped = 0

    def mark(self) -> Any:
        """An event for an entry or exit (None once the step holds :data:`MAX_PAIRS`)."""
        if len(self.pairs) >= MAX_PAIRS:
            return None
        return self.source.mark()

    def add(self, node: Node, start: Any, end: Any) -> None:
        """An entry of ``node`` ended (list appends are atomic: any thread may call this)."""
        if start is None or end is None:
            self.dropped += 1
            return
        self.pairs.append((node, start, end))

    def settle(self) -> dict[Node, float]:
        """Device seconds per node for the step, read with one synchronize."""
        pairs, self.pairs = self.pairs, []
        if self.dropped:
            once(
                "device-time-dropped",
                logging.WARNING,
                "profdsl: a step had more than %d timed stage entries; the device time of %d of them is missing",
                MAX_PAIRS,
                self.dropped,
            )
            self.dropped = 0
        if not pairs:
            return {}
        seconds = self.source.read([(start, end) for _, start, end in pairs])
        totals: dict[Node, float] = {}
        for (node, _, _), value in zip(pairs, seconds):
            totals[node] = totals.get(node, 0.0) + value
        return totals


def cuda_source() -> CudaEvents | None:
    """CUDA events when torch is installed and CUDA is available, else None. It imports torch:
    call it once per profiler, not per step."""
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
    except Exception:  # a broken driver install: no device time, training goes on
        return None
    return CudaEvents(torch.cuda.Event, torch.cuda.synchronize)
