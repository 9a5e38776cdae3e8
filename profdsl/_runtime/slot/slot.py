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
session has one owner thread (:mod:`profdsl._runtime.slot.owner`) and is only driven there; a
stop asked elsewhere of an own-thread session is left to its owner (:meth:`CaptureSlot.flush`,
its next profdsl call, or the moment it ends). A session the caller of ``close()`` or the exit
cannot end (its owner is another thread) is recorded lost there: what its owner ends later is
not written (:meth:`CaptureSlot.abandon`).

Each open session holds up the finish hook of its save_path (:mod:`profdsl._runtime.writer.rounds`;
of its capture request's round, for a step a request asked for) until its trace is handed to the
writer or its loss recorded; between the parts of a cut step session, its claims hold the
save_paths of the part just written, until the next part holds them or none follows.
"""

from __future__ import annotations

import threading

import attrs

from profdsl._capture.base import Backend
from profdsl._runtime.slot.claims import Claim, StepClaims
from profdsl._runtime.slot.interrupts import Signals
from profdsl._runtime.slot.open_session import OpenSession
from profdsl._runtime.slot.session import Session
from profdsl._runtime.writer.rounds import HookRounds
from profdsl._runtime.writer.writer import Writer
from profdsl.collect._export import TraceLabel
from profdsl.config import Schedule
from profdsl.core._log import failing_once

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
    """The process's capture slot: its one re-entrant lock, and who may hold the slot (the
    claims, the stages, the sessions whose thread ends, ``close()`` and the exit). The session
    open and how it is started and stopped are its :class:`OpenSession`, guarded by this lock."""

    def __init__(self, writer: Writer, rounds: HookRounds, signals: Signals) -> None:
        self.writer, self.signals = writer, signals
        self._lock = threading.RLock()
        self.claims = StepClaims(writer, signals)
        self.open = OpenSession(rounds, self.claims.refuse, self._thread_ended)

    @property
    def current(self) -> Session | None:
        """The session open in the slot, if any."""
        return self.open.current

    # -- continuous steps -------------------------------------------------------------------
    def claim(self, claim: Claim) -> None:
        """A continuous role's profiled step (or run of steps) begins."""
        with self._lock:
            self.open.flush()
            self.claims.add(claim)
            current = self.current
            if current is None:
                self._resume()
            elif current.kind == "step" and not current.stop_wanted and current.join(claim.label):
                self.open.hold(current, claim.label.save_path)

    def release(self, claim: Claim) -> None:
        """A continuous role's step ends: the step session stops with its last claim."""
        with self._lock:
            self.open.flush()
            if not self.claims.remove(claim):
                return
            self.open.release_between(self.claims)  # no part of a cut step follows
            current = self.current
            if current is not None and current.kind == "step":
                self.open.stop(current)

    def step_session(self, claim: Claim) -> Session | None:
        """The step session ``claim`` records into right now, if any (starting it, on its own
        thread, when it waited for another thread's stage to end)."""
        current = self.current
        if current is None and claim in self.claims.live():
            with self._lock:
                self._resume()  # (when the slot is still free)
                current = self.current
        if current is not None and current.kind == "step" and not current.stop_wanted and claim in self.claims.live():
            return current
        return None

    def _resume(self) -> None:
        """Under the lock, the slot free: open a step session for the claims (here when it
        records every thread, else only on the claims' thread: ``step_session`` starts it there)."""
        if self.current is not None:
            return
        session = self.claims.next_session()
        if session is not None:
            self.open.start(session, every_thread=self.claims.every_thread())
        if session is not None or not self.claims.live():  # the next part holds, or none follows
            self.open.release_between(self.claims)

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
            self.open.flush()
            current = self.current
            if current is not None:
                if not cut or current.kind != "step" or current.stop_wanted or not current.owned_here():
                    return Busy(holder(current))
                self.claims.cut(current)
                self.open.hold_between(current, self.claims)  # until the next part holds
                self.open.stop(current)
            session = Session("stage", label, backend, self.writer, schedule, signals=self.signals)
            if self.open.start(session, every_thread=backend.all_threads and backend.every_thread_possible):
                return session
            self._resume()  # the cut step goes on
            return None
        finally:
            self._lock.release()

    def end_stage(self, session: Session) -> None:
        """A stage session ends; a step session it cut resumes as the next part. One recorded
        lost meanwhile (its owner is this thread) is stopped here: its owner's next call."""
        with self._lock:
            if self.current is session and self.open.stop(session):
                self._resume()
            else:
                self.open.flush()

    # -- threads that end, close and exit ---------------------------------------------------
    def _thread_ended(self, ident: int) -> None:
        """A watched thread ends (on it): its claims are over, its session is stopped here."""
        # a thread's last breath: say it, never raise
        with failing_once("thread-ended", "profdsl: stopping the session of an ending thread failed: %r"), self._lock:
            self.claims.thread_ended(ident)
            self.open.flush()
            current = self.current
            if current is not None and current.owned_here():
                current.cut_short = current.cut_short or "its thread ended before it was stopped"
                self.open.stop(current)

    def flush(self) -> None:
        """Stop a session whose stop was asked from another thread, if this thread owns it
        (every profiler call on a step boundary does this)."""
        if (self.current is not None and self.current.stop_wanted) or self.open.dropped:
            with self._lock:
                self.open.flush()

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
                self.open.stop(current)
            elif role is not None and current.returns:
                current.stop_wanted = True
            else:
                self.open.drop(why)

    # -- tests and fork ---------------------------------------------------------------------
    def reset(self) -> None:
        """Stop the open session (when this thread may) and forget every claim (tests)."""
        with self._lock:
            self.claims.clear()
            self.open.reset()

    def forget(self) -> None:
        """Forget the slot without touching torch (a forked child: the session is not here)."""
        self.claims.clear()
        self.open.forget()
        self._lock = threading.RLock()
