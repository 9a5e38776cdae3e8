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
session is only started and stopped on the thread that owns it (torch crashes otherwise): a stop
asked from another thread marks the segment *orphaned*, and the owning thread stops it at its
next profdsl call, when that thread ends, or at exit when it is the main thread. A session whose
thread is still blocked at exit cannot be ended: its loss is recorded.

Each session is a *writer* of its save_path for the finish hook (:mod:`~profdsl.runtime.hooks`)
until its trace is written or its loss recorded; a hook that becomes due then runs after the
slot's lock is released.
"""

from __future__ import annotations

import logging

import attrs

from profdsl.capture.base import Backend, Runner
from profdsl.capture.runner import Inline, ProfilerThread
from profdsl.collect.export import TraceLabel
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.runtime.claims import Claim, StepClaims
from profdsl.runtime.exports import Exports
from profdsl.runtime.hooks import HookRendezvous
from profdsl.runtime.segment import Segment
from profdsl.runtime.slot_lock import SlotLock
from profdsl.runtime.thread_watch import ThreadWatch

__all__ = ["Busy", "Coordinator", "holder"]


@attrs.frozen
class Busy:
    """The slot is held by ``holder`` (e.g. ``"actor stage 'update_actor'"``) elsewhere."""

    holder: str


def holder(segment: Segment) -> str:
    """Who holds the slot, for messages: ``"actor stage 'update_actor'"``, ``"ref step 3"``."""
    label = segment.label
    what = f"stage {label.stage!r}" if segment.kind == "stage" else f"step {label.step}"
    return f"{label.role} {what}"


class Coordinator:
    """The process's capture slot."""

    def __init__(self, hooks: HookRendezvous, exports: Exports) -> None:
        self._hooks, self.exports = hooks, exports
        self._lock = SlotLock()
        self._watch = ThreadWatch(self._thread_ended)
        self.current: Segment | None = None
        self.claims = StepClaims(exports)
        self._thread: ProfilerThread | None = None

    # -- continuous steps -------------------------------------------------------------------
    def claim(self, claim: Claim) -> None:
        """A continuous role's profiled step (or run of steps) begins."""
        with self._lock.held():
            self._flush_orphan()
            self.claims.add(claim)
            current = self.current
            if current is None:
                self._resume()
            elif current.kind == "step" and not current.orphaned:
                current.join(claim.label.role)

    def release(self, claim: Claim) -> None:
        """A continuous role's session ends: the step segment stops with its last claim."""
        with self._lock.held():
            self._flush_orphan()
            if not self.claims.remove(claim):
                return
            current = self.current
            if current is not None and current.kind == "step":
                self._stop(current)

    def step_segment(self, claim: Claim) -> Segment | None:
        """The step segment ``claim`` records into right now, if any (starting it, on its own
        thread, when it waited for another thread's stage to end)."""
        current = self.current
        if current is None and self.claims.live(claim):
            with self._lock.held():
                if self.current is None:
                    self._resume()
                current = self.current
        if current is not None and current.kind == "step" and not current.orphaned \
                and self.claims.live(claim):
            return current
        return None

    # -- discrete stages --------------------------------------------------------------------
    def begin_stage(self, label: TraceLabel, backend: Backend, schedule: Schedule | None, *,
                    cut: bool = True) -> Segment | Busy | None:
        """Open a stage segment, cutting a step segment this thread owns (unless ``cut`` is
        False). :class:`Busy` when the slot is held elsewhere; None when the session could not
        start."""
        if not self._lock.try_acquire():
            return Busy("a capture being started or stopped on another thread")
        with self._lock.held(acquired=True):
            self._flush_orphan()
            current = self.current
            if current is not None:
                if not cut or current.kind != "step" or current.orphaned or not current.owned_here():
                    return Busy(holder(current))
                self.claims.cut(current)
                self._stop(current)
            segment = self.current = Segment("stage", label, backend, self.exports, schedule)
            if self._start(segment):
                return segment
            self._resume()  # the cut step goes on
            return None

    def end_stage(self, segment: Segment) -> None:
        """A stage segment ends; a step segment it cut resumes as the next part."""
        with self._lock.held():
            if self.current is segment and self._stop(segment):
                self._resume()

    # -- helpers (under the lock) -----------------------------------------------------------
    def _resume(self) -> None:
        """The slot is free: open a step segment for the claims, if their thread is this one."""
        segment = None if self.current is not None else self.claims.next_segment()
        if segment is not None and segment.owned_here():  # otherwise step_segment() starts it on the claims' thread
            self.current = segment
            self._start(segment)

    def _start(self, segment: Segment) -> bool:
        if segment.backend.all_threads and self._thread is None:
            self._thread = ProfilerThread()
        runner: Runner = self._thread if segment.backend.all_threads and self._thread else Inline()
        if segment.start(runner):
            self._hooks.hold(segment.label.save_path, segment)
            if isinstance(runner, Inline):
                self._watch.watch()
            return True
        if self.current is segment:
            self.current = None
        return False

    def _stop(self, segment: Segment) -> bool:
        """Stop ``segment`` here, or mark it orphaned when another thread owns it."""
        if not segment.owned_here():
            segment.orphaned = True
            _say_deferred(segment)
            return False
        if self.current is segment:
            self.current = None
        try:
            segment.stop()
        finally:
            self._lock.after(self._hooks.release(segment.label.save_path, segment))
        return True

    def _flush_orphan(self) -> None:
        current = self.current
        if current is not None and current.orphaned and current.owned_here():
            self._stop(current)

    # -- threads that end, close and exit ---------------------------------------------------
    def _thread_ended(self, ident: int) -> None:
        """A watched thread ends (on it): its claims are over, its session is stopped here."""
        try:
            with self._lock.held():
                self.claims.thread_ended(ident)
                current = self.current
                if current is not None and current.owned_here():
                    current.cut_short = current.cut_short or "its thread ended before it was stopped"
                    self._stop(current)
        except Exception as exc:  # a thread's last breath: say it, never raise
            once("thread-ended", logging.ERROR,
                 "profdsl: stopping the session of an ending thread failed: %r", exc)

    def flush(self) -> None:
        """Stop a session whose stop was asked from another thread, if this thread owns it, and
        run hooks left due by an interrupt (every profiler call on a step boundary does this)."""
        if self.current is not None and self.current.orphaned:
            with self._lock.held():
                self._flush_orphan()
        self._lock.run_due()

    def abandon(self) -> None:
        """At exit: stop the open session when this thread owns it; otherwise it belongs to a
        thread that never came back (blocked, or a daemon): its loss is recorded."""
        with self._lock.held():
            current = self.current
            if current is not None and current.owned_here():
                self._stop(current)
            elif current is not None:
                self.current = None
                current.lost("its thread never returned to profdsl before the process exited "
                             "(run start/stop and stages on one thread, or set "
                             "TorchOptions(all_threads=True))")
                self._lock.after(self._hooks.release(current.label.save_path, current))
        self._lock.run_due()

    # -- tests and fork ---------------------------------------------------------------------
    def reset(self) -> None:
        """Stop the open session (when this thread may) and forget every claim (tests)."""
        with self._lock.held():
            current, self.current = self.current, None
            self.claims.clear()
            if current is not None and current.owned_here():
                current.stop()

    def forget(self) -> None:
        """Forget the slot without touching torch (a forked child: the session is not here)."""
        self.current = None
        self.claims.clear()
        self._lock, self._watch = SlotLock(), ThreadWatch(self._thread_ended)
        self._thread = None


def _say_deferred(segment: Segment) -> None:
    once(f"torch-thread:stop:{segment.label.rank}", logging.ERROR,
         "[profdsl rank %s] the profiler session was started on another thread; stopping it from "
         "this thread is deferred (torch crashes otherwise): it stops at the next call from its "
         "own thread, or when that thread ends. Call start/stop and run stages on one thread, or "
         "set TorchOptions(all_threads=True)", segment.label.rank)
