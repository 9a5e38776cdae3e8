"""The one capture session a process may have open, and whom it belongs to.

torch allows one profiler session per process, so every role of the process shares one slot:

- Continuous roles *claim* the slot for their profiled steps. The first claim opens a step
  segment; fused roles' claims join it; it stops when the last claim is released.
- A discrete stage opens a stage segment when the slot is free. When a continuous step segment
  of its own thread holds it (mixed modes: ref continuous, actor discrete), the step segment is
  cut: written as a part, the stage gets its own trace, and the step resumes as the next part
  afterwards, under the step session's name, so that each trace carries exactly its own role's
  and stage's name.
- A discrete stage that starts while the slot is held elsewhere (another thread or asyncio task,
  or a session being started or stopped) gets no trace of its own: :class:`Busy`.

Every change of the slot, the starting and stopping of sessions included, happens under one
lock, so no two sessions ever overlap; a stage never waits for it (it is refused instead). A
session is only started and stopped on the thread that owns it: a stop asked from another thread
marks the segment *orphaned*, and the owning thread stops it at its next call (or ``close``).
"""

from __future__ import annotations

import logging
import threading

import attrs

from profdsl.capture.base import Backend, Runner
from profdsl.capture.runner import Inline, ProfilerThread
from profdsl.collect.export import TraceLabel
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.runtime.segment import Segment

__all__ = ["Busy", "Claim", "Coordinator"]


@attrs.frozen(eq=False)
class Claim:
    """A continuous role's hold on the slot: the label of its step trace, its backend, and the
    thread its step runs on (where its session must start and stop)."""

    label: TraceLabel
    backend: Backend
    thread: int = attrs.field(factory=threading.get_ident)


@attrs.frozen
class Busy:
    """The slot is held by ``holder`` (e.g. ``"actor stage 'update_actor'"``) elsewhere."""

    holder: str


def _holder(segment: Segment) -> str:
    label = segment.label
    what = f"stage {label.stage!r}" if segment.kind == "stage" else f"step {label.step}"
    return f"{label.role} {what}"


class Coordinator:
    """The process's capture slot."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.current: Segment | None = None
        self._claims: list[Claim] = []
        self._pieces = 0  # parts already written of the step session being cut
        self._name: TraceLabel | None = None  # the step session's name, kept across its parts
        self._thread: ProfilerThread | None = None

    # -- continuous steps -------------------------------------------------------------------
    def claim(self, claim: Claim) -> None:
        """A continuous role's profiled step (or run of steps) begins."""
        with self._lock:
            self._flush_orphan()
            self._claims.append(claim)
            current = self.current
            if current is None:
                self._resume()
            elif current.kind == "step" and not current.orphaned:
                current.join(claim.label.role)

    def release(self, claim: Claim) -> None:
        """A continuous role's session ends: the step segment stops with its last claim."""
        with self._lock:
            self._flush_orphan()
            if claim in self._claims:
                self._claims.remove(claim)
            if self._claims:
                return
            self._pieces, self._name = 0, None
            current = self.current
            if current is not None and current.kind == "step":
                self._stop(current)

    def step_segment(self, claim: Claim) -> Segment | None:
        """The step segment ``claim`` records into right now, if any (starting it, on its own
        thread, when it waited for another thread's stage to end)."""
        current = self.current
        if current is None and claim in self._claims:
            with self._lock:
                if self.current is None:
                    self._resume()
                current = self.current
        if current is not None and current.kind == "step" and not current.orphaned \
                and claim in self._claims:
            return current
        return None

    # -- discrete stages --------------------------------------------------------------------
    def begin_stage(self, label: TraceLabel, backend: Backend, schedule: Schedule | None, *,
                    cut: bool = True) -> Segment | Busy | None:
        """Open a stage segment, cutting a step segment this thread owns (unless ``cut`` is
        False). :class:`Busy` when the slot is held elsewhere; None when the session could not
        start."""
        if not self._lock.acquire(blocking=False):
            return Busy("a capture being started or stopped on another thread")
        try:
            self._flush_orphan()
            current = self.current
            if current is not None:
                if not cut or current.kind != "step" or current.orphaned or not current.owned_here():
                    return Busy(_holder(current))
                current.label = attrs.evolve(current.label, part=self._pieces)
                self._pieces += 1
                self._stop(current)
            segment = self.current = Segment("stage", label, backend, schedule)
            if self._start(segment):
                return segment
            self._resume()  # the cut step goes on
            return None
        finally:
            self._lock.release()

    def end_stage(self, segment: Segment) -> None:
        """A stage segment ends; a step segment it cut resumes as the next part."""
        with self._lock:
            if self.current is segment and self._stop(segment):
                self._resume()

    # -- helpers (under the lock) -----------------------------------------------------------
    def _resume(self) -> None:
        """The slot is free: open a step segment for the claims, if their thread is this one."""
        if self.current is not None or not self._claims:
            return
        first = self._claims[0]
        if self._name is None:
            self._name = first.label
        name = attrs.evolve(self._name, part=self._pieces or None)  # numbered only once cut
        segment = Segment("step", name, first.backend, thread=first.thread)
        for claim in self._claims:
            segment.join(claim.label.role)
        if segment.owned_here():  # otherwise step_segment() starts it on the claims' thread
            self.current = segment
            self._start(segment)

    def _start(self, segment: Segment) -> bool:
        runner: Runner = Inline()
        if segment.backend.all_threads:
            if self._thread is None:
                self._thread = ProfilerThread()
            runner = self._thread
        if segment.start(runner):
            return True
        if self.current is segment:
            self.current = None
        return False

    def _stop(self, segment: Segment) -> bool:
        """Stop ``segment`` here, or mark it orphaned when another thread owns it."""
        if not segment.owned_here():
            segment.orphaned = True
            once(f"torch-thread:stop:{segment.label.rank}", logging.ERROR,
                 "[profdsl rank %s] the profiler session was started on another thread; stopping "
                 "it from this thread is skipped (torch crashes otherwise): it stops at the next "
                 "call from its own thread. Call start/stop and run stages on one thread, or set "
                 "TorchOptions(all_threads=True)", segment.label.rank)
            return False
        if self.current is segment:
            self.current = None
        segment.stop()
        return True

    def flush(self) -> None:
        """Stop a session whose stop was asked from another thread, if this thread owns it
        (a profiler's start and close call this)."""
        if self.current is not None and self.current.orphaned:
            with self._lock:
                self._flush_orphan()

    def _flush_orphan(self) -> None:
        current = self.current
        if current is not None and current.orphaned and current.owned_here():
            self._stop(current)

    # -- tests and fork ---------------------------------------------------------------------
    def reset(self) -> None:
        """Stop the open session (when this thread may) and forget every claim (tests)."""
        with self._lock:
            current, self.current = self.current, None
            self._claims, self._pieces, self._name = [], 0, None
            if current is not None and current.owned_here():
                current.stop()

    def forget(self) -> None:
        """Forget the slot without touching torch (a forked child: the session is not here)."""
        self._lock = threading.RLock()
        self.current, self._claims, self._pieces, self._name = None, [], 0, None
        self._thread = None
