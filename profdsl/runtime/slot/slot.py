"""The capture slot: the one capture session a process may have open, and whom it belongs to.

torch allows one profiler session per process, so every role of the process shares one slot:

- Continuous roles *claim* the slot for their profiled steps. The first claim opens a step
  session; fused roles' claims join it; it stops when the last claim is released.
- A discrete stage opens a stage session when the slot is free. When a continuous step session
  of its own thread holds it (mixed modes: ref continuous, actor discrete), the step session is
  *cut*: written as a part, the stage gets its own trace, and the step resumes as the next part
  afterwards, under the step session's name.
- A discrete stage that starts while the slot is held elsewhere (another thread or asyncio task,
  or a session being started or stopped) gets no trace of its own: :class:`Busy`.

Every change of the slot, the starting and stopping of sessions included, happens under one
lock, so no two sessions ever overlap; a stage never waits for it (it is refused instead). Each
session has one owner thread (:mod:`profdsl.runtime.slot.owner`) and is only driven there; a
stop asked elsewhere of an own-thread session is left to its owner (:meth:`CaptureSlot.flush`,
its next profdsl call, or the moment it ends). A session the caller of ``close()`` or the exit
cannot end (its owner is another thread) is recorded lost there: what its owner ends later is
not written (:meth:`CaptureSlot.abandon`).

Each open session holds up the finish hook of its save_path (:mod:`profdsl.runtime.writer.rounds`;
of its capture request's round, for a step a request asked for) until its trace is handed to the
writer or its loss recorded.
"""

from __future__ import annotations

import logging
import threading

import attrs

from profdsl.capture.base import Backend, Runner
from profdsl.capture.runner import Inline, SessionThread
from profdsl.collect.export import TraceLabel
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.runtime.slot.claims import Claim, StepClaims
from profdsl.runtime.slot.interrupts import Signals
from profdsl.runtime.slot.owner import ThreadWatch
from profdsl.runtime.slot.session import Session
from profdsl.runtime.writer.rounds import HookRounds
from profdsl.runtime.writer.writer import Writer

__all__ = ["Busy", "CaptureSlot", "holder"]


@attrs.frozen
class Busy:
    """The slot is held by ``holder`` (e.g. ``"actor stage 'update_actor'"``) elsewhere."""

    holder: str


def holder(session: Session) -> str:
    """Who holds the slot, for messages: ``"actor stage 'update_actor'"``, ``"ref step 3"``."""
    label = session.label
    what = f"stage {label.stage!r}" if session.kind == "stage" else f"step {label.step}"
    return f"{label.role} {what}"


class CaptureSlot:
    """The process's capture slot."""

    def __init__(self, writer: Writer, rounds: HookRounds, signals: Signals) -> None:
        self.writer, self._rounds, self.signals = writer, rounds, signals
        self._lock = threading.RLock()
        self._watch = ThreadWatch(self._thread_ended)
        self.current: Session | None = None
        self.claims = StepClaims(writer, signals)
        self.dropped: list[Session] = []  # recorded lost, still running: their owners stop them
        self._session_thread: SessionThread | None = None

    # -- continuous steps -------------------------------------------------------------------
    def claim(self, claim: Claim) -> None:
        """A continuous role's profiled step (or run of steps) begins."""
        with self._lock:
            self._flush_wanted()
            self.claims.add(claim)
            current = self.current
            if current is None:
                self._resume()
            elif current.kind == "step" and not current.stop_wanted and current.join(claim.label):
                self._rounds.hold(claim.label.save_path, current)

    def release(self, claim: Claim) -> None:
        """A continuous role's step ends: the step session stops with its last claim."""
        with self._lock:
            self._flush_wanted()
            if not self.claims.remove(claim):
                return
            current = self.current
            if current is not None and current.kind == "step":
                self._stop(current)

    def step_session(self, claim: Claim) -> Session | None:
        """The step session ``claim`` records into right now, if any (starting it, on its own
        thread, when it waited for another thread's stage to end)."""
        current = self.current
        if current is None and self.claims.live(claim):
            with self._lock:
                if self.current is None:
                    self._resume()
                current = self.current
        if current is not None and current.kind == "step" and not current.stop_wanted and self.claims.live(claim):
            return current
        return None

    # -- discrete stages --------------------------------------------------------------------
    def begin_stage(
        self, label: TraceLabel, backend: Backend, schedule: Schedule | None, *, cut: bool = True
    ) -> Session | Busy | None:
        """Open a stage session, cutting a step session this thread owns (unless ``cut`` is
        False). :class:`Busy` when the slot is held elsewhere; None when the capture could not
        start."""
        if not self._lock.acquire(blocking=False):
            return Busy("a capture being started or stopped on another thread")
        try:
            self._flush_wanted()
            current = self.current
            if current is not None:
                if not cut or current.kind != "step" or current.stop_wanted or not current.owned_here():
                    return Busy(holder(current))
                self.claims.cut(current)
                self._stop(current)
            session = self.current = Session("stage", label, backend, self.writer, schedule, signals=self.signals)
            if self._start(session, every_thread=backend.all_threads and backend.every_thread_possible):
                return session
            self._resume()  # the cut step goes on
            return None
        finally:
            self._lock.release()

    def end_stage(self, session: Session) -> None:
        """A stage session ends; a step session it cut resumes as the next part."""
        with self._lock:
            if self.current is session and self._stop(session):
                self._resume()

    # -- helpers (under the lock) -----------------------------------------------------------
    def _resume(self) -> None:
        """The slot is free: open a step session for the claims (here when it records every
        thread, else only on the claims' thread: ``step_session`` starts it there)."""
        if self.current is not None:
            return
        session = self.claims.next_session()
        if session is None:
            return
        every_thread = self.claims.every_thread()
        if every_thread or threading.get_ident() == session.thread:
            self.current = session
            self._start(session, every_thread=every_thread)

    def _runner(self, every_thread: bool) -> Runner:
        if not every_thread:
            return Inline()
        if self._session_thread is None:
            self._session_thread = SessionThread()
        return self._session_thread

    def _hold(self, session: Session) -> None:
        for save_path in session.save_paths:
            self._rounds.hold(save_path, session, tag=session.label.request)

    def _release(self, session: Session) -> None:
        for save_path in session.save_paths:
            self._rounds.release(save_path, session, tag=session.label.request)

    def _start(self, session: Session, *, every_thread: bool) -> bool:
        """Start ``session``'s capture; the hooks of its save_paths wait for it from now on. A
        capture that cannot start is recorded as such (by the session); its claims record
        nothing more this step."""
        self._hold(session)
        started = False
        try:
            started = session.start(self._runner(every_thread), every_thread=every_thread)
        finally:  # an interrupt held during the start is delivered after it: the capture runs
            if session.capture is not None:
                if not session.every_thread:
                    self._watch.watch()
            else:
                self._release(session)
                if self.current is session:
                    self.current = None
                if session.kind == "step":
                    self.claims.refuse()
        return started

    def _stop(self, session: Session) -> bool:
        """Stop ``session`` here, or leave it to its owner when that is another thread."""
        if not session.owned_here():
            if not session.stop_wanted:
                session.stop_wanted = True
                _say_left_to_owner(session)
            return False
        if self.current is session:
            self.current = None
        try:
            session.stop()
        finally:
            self._release(session)
        return True

    def _flush_wanted(self) -> None:
        """Under the lock: stop what this thread owns and another asked to stop (the current
        session, or one recorded lost: its capture ends, its trace is not written)."""
        current = self.current
        if current is not None and current.stop_wanted and current.owned_here():
            self._stop(current)
        for session in [s for s in self.dropped if s.owned_here()]:
            self.dropped.remove(session)
            session.stop()

    # -- threads that end, close and exit ---------------------------------------------------
    def _thread_ended(self, ident: int) -> None:
        """A watched thread ends (on it): its claims are over, its session is stopped here."""
        try:
            with self._lock:
                self.claims.thread_ended(ident)
                self._flush_wanted()
                current = self.current
                if current is not None and current.owned_here():
                    current.cut_short = current.cut_short or "its thread ended before it was stopped"
                    self._stop(current)
        except Exception as exc:  # a thread's last breath: say it, never raise
            once("thread-ended", logging.ERROR, "profdsl: stopping the session of an ending thread failed: %r", exc)

    def flush(self) -> None:
        """Stop a session whose stop was asked from another thread, if this thread owns it
        (every profiler call on a step boundary does this)."""
        if (self.current is not None and self.current.stop_wanted) or self.dropped:
            with self._lock:
                self._flush_wanted()

    def abandon(self, why: str, *, role: str | None = None) -> None:
        """At ``close()`` of ``role`` (a stage session of it, or a step session no role claims
        any more) or at exit (``role`` None: any session): stop the open session when this
        thread owns it. At ``close()``, a session whose owner comes back to profdsl (the main
        thread, an event loop's) is left to it; otherwise the owner cannot be waited for: the
        loss is recorded (``why``), and what the owner ends later is not written."""
        with self._lock:
            current = self.current
            if current is None or (
                role is not None and (role not in current.roles or (current.kind == "step" and self.claims.claims))
            ):
                return
            if current.owned_here():
                self._stop(current)
                return
            if role is not None and current.returns:
                current.stop_wanted = True
                return
            self.current = None
            self.dropped.append(current)
            current.lost(
                f"its thread never returned to profdsl before {why} (run start/stop and "
                "stages on one thread, or set TorchOptions(all_threads=True))"
            )
            self._release(current)

    # -- tests and fork ---------------------------------------------------------------------
    def reset(self) -> None:
        """Stop the open session (when this thread may) and forget every claim (tests)."""
        with self._lock:
            current, self.current = self.current, None
            self.claims.clear()
            if current is not None and current.owned_here():
                current.stop()
            elif current is not None:  # its owner stops it at its next call (nothing is written)
                current.dropped = current.stop_wanted = True
                self.dropped.append(current)
            self._flush_wanted()

    def forget(self) -> None:
        """Forget the slot without touching torch (a forked child: the session is not here)."""
        self.current = None
        self.claims.clear()
        self.dropped = []
        self._lock, self._watch = threading.RLock(), ThreadWatch(self._thread_ended)
        self._session_thread = None


def _say_left_to_owner(session: Session) -> None:
    once(
        f"torch-thread:stop:{session.label.rank}",
        logging.ERROR,
        "[profdsl rank %s] the profiler session was started on another thread; it cannot be "
        "stopped from this one (torch crashes otherwise): it stops at the next call from its "
        "own thread, or when that thread ends",
        session.label.rank,
    )
