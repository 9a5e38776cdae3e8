"""A torch capture's traces as torch hands them over (``on_trace_ready``, on the session's runner
thread): the mini-batch window each holds and when it began, its metadata, what the capture held
its caller up for it (:class:`HeldTime`, the trace's ``Held``) and what it should hold
(:class:`~profdsl.core._completeness.Expect`: the device recorded, whether torch stopped collecting
it early). Each is handed to the sink whole: the writer has torch write its events
(:func:`_write_events`) and drops them, off the training thread.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from profdsl._capture.base import Describe, Held, Sink
from profdsl.config import Schedule
from profdsl.core._completeness import Expect
from profdsl.core._labels import encode
from profdsl.core._schedule import action_at, cycle_of
from profdsl.core._units import now_ms
from profdsl.records.meta import trace_header

__all__ = ["HeldTime", "TorchTraces", "now_ms"]


class HeldTime:
    """The caller's time a capture held up, trace by trace: each call on the capture counts from
    its beginning; a trace handed over during a call takes that call up to then (and the rest of
    it counts for the next trace); the capture's start is its first trace's ``start_ms``."""

    __slots__ = ("_began", "_blocked_s", "_start_s")

    def __init__(self) -> None:
        self._blocked_s = 0.0  # the caller's time held up since the last trace
        self._start_s: float | None = None  # the start's part of that, until the first trace
        self._began = time.perf_counter()

    def began(self) -> None:
        """A call on the capture begins (or goes on, for the next trace)."""
        self._began = time.perf_counter()

    def ended(self, *, start: bool = False) -> None:
        """The call ends (``start``: the capture's start)."""
        spent = time.perf_counter() - self._began
        if start:
            self._start_s = spent
        self._blocked_s += spent

    def take(self) -> Held:
        """What the trace handed over now held its caller: earlier calls, and this one until now."""
        ending = time.perf_counter() - self._began
        held = Held(self._blocked_s + ending, self._start_s, ending)
        self._blocked_s, self._start_s = 0.0, None
        return held


class TorchTraces:
    """The traces of one torch capture (see the module docstring). ``device`` is set at its
    start, ``stopping()`` called before its stop."""

    def __init__(self, schedule: Schedule | None, describe: Describe, sink: Sink) -> None:
        self.schedule, self._describe, self._sink = schedule, describe, sink
        self.held = HeldTime()
        self.device: str | None = None  # the device whose activity is recorded ("cuda"), if any
        self._pending: list[int] = []  # recorded mini-batches of the window being written
        self._window_ms = now_ms()
        self._stopped_early: str | None = None  # why torch's device collection stopped early
        self._stepped = -1  # a scheduled capture: the mini-batch its schedule last stepped past

    def stepping(self, prof: Any, index: int) -> None:
        """Scheduled: torch's schedule steps past mini-batch ``index``. A mini-batch that ran
        while torch's device collection was stopped is in no trace: torch recorded nothing of it
        (its cycle's trace was handed over when it stopped)."""
        assert self.schedule is not None
        self._stepped = index
        if action_at(self.schedule, index).records and not _device_stopped(prof):
            if not self._pending:
                self._window_ms = now_ms()
            self._pending.append(index)

    def stopping(self) -> None:
        """The capture is about to stop: note whether its device collection stopped already."""
        self._stopped_early = _kineto_stopped(self.device)

    def ready(self, prof: Any) -> None:
        """torch's ``on_trace_ready``: hand the trace over to the sink, with its window."""
        import torch.distributed as dist

        pending, self._pending = self._pending, []
        window = (pending[0], pending[-1]) if pending else None
        if self.schedule is not None and not pending:
            window = _stopped_window(self.schedule, self._stepped, prof)
            if window is None:
                return  # a window that recorded no mini-batch: torch fires anyway, nothing to write
            self._window_ms = now_ms()  # torch lost the window it was about to record: say so
        # Its metadata as it is now; torch adds its own distributedInfo when a process group is up.
        header = trace_header(self._describe(window), distributed=not (dist.is_available() and dist.is_initialized()))
        # The window's results, held whole (torch starts the next window with a new object):
        # their JSON is written, and they are dropped, wherever the sink has ``write`` called.
        write = functools.partial(_write_events, prof.profiler.export_chrome_trace, header)
        self._sink(write, window, self._window_ms, self.held.take(), self._expect(prof, window))
        self.held.began()  # the rest of this call counts for the next trace

    def _expect(self, prof: Any, window: tuple[int, int] | None) -> Expect:
        """What the trace torch just handed over should hold: the device activity recorded, and
        whether torch stopped collecting it before the window's end (its ``DEVICE_STOPPED``
        state, or, without a schedule, kineto's stopped flag read before the stop)."""
        stopped = self._stopped_early
        if _device_stopped(prof):
            where = f" during mini-batches {window[0]}-{window[1]}" if window else ""
            stopped = (
                f"torch's schedule entered DEVICE_STOPPED{where} (kineto stopped the device collection, "
                "e.g. a CUPTI buffer overflow); the rest of the window was not recorded"
            )
        return Expect(device=self.device, stopped=stopped)


def _write_events(export: Callable[[str], object], header: dict[str, Any], path: str) -> dict[str, Any]:
    """torch's export of the events to ``path`` (plain JSON); returns the metadata to add.

    Raises:
        OSError: torch wrote no file (it logs a failed write instead of raising).
    """
    with _plain_path(path) as target:
        export(target)
    if not os.path.exists(path):
        # torch writes PATH.tmp, then renames it. On a failed write it keeps PATH.tmp open (and
        # never closes it): emptied first, the file gives its space back once removed.
        with suppress(OSError):
            os.truncate(f"{path}.tmp", 0)
        with suppress(OSError):
            os.remove(f"{path}.tmp")
        raise OSError(f"torch wrote no trace file {path!r} (see its log)")
    return header


@contextmanager
def _plain_path(path: str) -> Iterator[str]:
    """A name of ``path`` that torch can write: torch copies it unescaped into the trace
    (``traceName``) and rewrites ``\\`` in it when it renames; where the folder's name holds
    such characters, the file is named through an open descriptor of the folder (Linux)."""
    folder, base = os.path.split(path)
    if encode(path) == path or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    fd = os.open(folder or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        yield f"/proc/self/fd/{fd}/{base}"
    finally:
        os.close(fd)


def _device_stopped(prof: Any) -> bool:
    """Whether torch's scheduled profiler is in its ``DEVICE_STOPPED`` state (torch >= 2.13).

    torch 2.13's ``torch/profiler/profiler.py``: ``ProfilerAction.DEVICE_STOPPED = 4`` (line 658)
    is set by ``profile.step()`` (lines 1207-1225) when ``torch.autograd._is_kineto_stopped()``,
    a device activity is recorded (``use_device``) and the previous action was WARMUP or RECORD;
    its entry transitions (lines 1067-1075) call ``stop_trace`` and then ``_trace_ready``, so
    ``on_trace_ready`` runs with ``current_action`` already ``DEVICE_STOPPED``, and the trace it
    is handed holds the window only up to the stop (nothing from a WARMUP entry). The state
    absorbs the rest of the cycle without another callback (lines 1076-1091)."""
    action = getattr(getattr(prof, "current_action", None), "name", None)
    return action == "DEVICE_STOPPED"


def _stopped_window(schedule: Schedule, index: int, prof: Any) -> tuple[int, int] | None:
    """The window torch lost whole: its schedule entered ``DEVICE_STOPPED`` from WARMUP when it
    stepped past mini-batch ``index`` (torch 2.13, ``torch/profiler/profiler.py`` lines
    1055-1071: the callback fires then, "the trace will be empty (no recording ran)"), so the
    active mini-batches of the cycle ahead are recorded by nobody. None otherwise."""
    if not _device_stopped(prof):
        return None
    cycle = cycle_of(schedule, index + 1)
    if cycle is None:
        return None
    first = schedule.skip_first + cycle * schedule.cycle_len + schedule.wait + schedule.warmup
    return first, first + schedule.active - 1


def _kineto_stopped(device: str | None) -> str | None:
    """Before an unscheduled capture stops: why its device collection had already stopped
    (kineto's stopped flag, torch's own test in ``profile.step()``), or None. Read only where a
    device activity is recorded: torch's flag may be stale from another profiler otherwise."""
    if device is None:
        return None
    try:
        from torch.autograd import _is_kineto_stopped  # type: ignore[attr-defined]

        stopped = bool(_is_kineto_stopped())
    except Exception:  # torch < 2.13: no such flag
        return None
    if not stopped:
        return None
    return "kineto's device collection had stopped before the capture ended (e.g. a CUPTI buffer overflow)"
