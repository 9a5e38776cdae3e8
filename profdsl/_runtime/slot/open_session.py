"""The slot's open session (:attr:`OpenSession.current`) and how sessions are driven on their
owners' threads: started on the owner's runner (inline, or the session thread for a capture of
every thread) with the finish hooks of their save_paths held up meanwhile, and stopped there; a
stop asked elsewhere of an own-thread session is left to its owner (said once), and a session
recorded lost is still stopped by its owner later (:attr:`OpenSession.dropped`).

Its state is guarded by the slot's lock (``CaptureSlot._lock``, the slot's one re-entrant lock):
every method is called with that lock held, but :meth:`OpenSession.forget` (a forked child, where
no other thread runs). It takes no lock of its own (docs/architecture.md, "Locks").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from profdsl._capture.base import Runner
from profdsl._capture.runner import Inline, SessionThread
from profdsl._runtime.slot.owner import ThreadWatch
from profdsl._runtime.slot.session import Session
from profdsl._runtime.writer.rounds import HookRounds
from profdsl.core._log import once

__all__ = ["OpenSession"]


class OpenSession:
    """The session open in the slot, if any, and the sessions recorded lost that their owners
    still run. ``refused()`` is called when a step session's capture could not start (its claims
    record nothing more); ``thread_ended(ident)`` on a watched owner thread as it ends."""

    def __init__(self, rounds: HookRounds, refused: Callable[[], None], thread_ended: Callable[[int], None]) -> None:
        self._rounds, self._refused, self._thread_ended = rounds, refused, thread_ended
        self.current: Session | None = None
        self.dropped: list[Session] = []  # recorded lost, still running: their owners stop them
        self._watch = ThreadWatch(thread_ended)
        self._session_thread: SessionThread | None = None
        self._between: set[tuple[str, str | None]] = set()  # a cut step's save_paths, held between parts

    def start(self, session: Session, *, every_thread: bool) -> bool:
        """Open ``session`` and start its capture; the hooks of its save_paths wait for it from
        now on. A capture that cannot start is recorded as such (by the session) and leaves the
        slot free; a step session's claims record nothing more this step."""
        self.current = session
        self.hold(session)
        try:
            session.start(self._runner(every_thread), every_thread=every_thread)
        finally:  # an interrupt held during the start is delivered after it: the capture runs
            if session.capture is not None:
                if not session.every_thread:
                    self._watch.watch()
            else:
                self._release(session)
                if self.current is session:
                    self.current = None
                if session.kind == "step":
                    self._refused()
        return session.capture is not None

    def stop(self, session: Session) -> bool:
        """Stop ``session`` here, or leave it to its owner when that is another thread."""
        if not session.owned_here():
            if not session.stop_wanted:
                session.stop_wanted = True
                once(
                    f"torch-thread:stop:{session.label.rank}",
                    logging.ERROR,
                    "[profdsl rank %s] the profiler session was started on another thread; it cannot be "
                    "stopped from this one (torch crashes otherwise): it stops at the next call from its "
                    "own thread, or when that thread ends",
                    session.label.rank,
                )
            return False
        if self.current is session:
            self.current = None
        try:
            session.stop()
        finally:
            self._release(session)
        return True

    def flush(self) -> None:
        """Stop what this thread owns and another asked to stop (the current session, or one
        recorded lost: its capture ends, its trace is not written)."""
        current = self.current
        if current is not None and current.stop_wanted and current.owned_here():
            self.stop(current)
        for session in [s for s in self.dropped if s.owned_here()]:
            self.dropped.remove(session)
            session.stop()

    def drop(self, why: str) -> None:
        """The open session's owner (another thread) cannot be waited for: its loss is recorded,
        the slot is free, and what the owner ends later is not written."""
        current, self.current = self.current, None
        if current is None:
            return
        self.dropped.append(current)
        current.lost(
            f"its thread never returned to profdsl before {why} (run start/stop and "
            "stages on one thread, or set TorchOptions(all_threads=True))"
        )
        self._release(current)

    def reset(self) -> None:
        """Stop the open session when this thread may; otherwise its owner stops it at its next
        call, and nothing of it is written (tests)."""
        current, self.current, self._between = self.current, None, set()  # (the rounds are forgotten too)
        if current is not None and current.owned_here():
            current.stop()
        elif current is not None:
            current.traces.dropped = current.stop_wanted = True
            self.dropped.append(current)
        self.flush()

    def forget(self) -> None:
        """Forget every session without touching torch (a forked child: they are not here)."""
        self.current = None
        self.dropped = []
        self._between = set()  # the rounds are forgotten too
        self._watch, self._session_thread = ThreadWatch(self._thread_ended), None

    def _runner(self, every_thread: bool) -> Runner:
        if not every_thread:
            return Inline()
        if self._session_thread is None:
            self._session_thread = SessionThread()
        return self._session_thread

    def hold(self, session: Session, *save_paths: str) -> None:
        """The hooks of ``save_paths`` (none named: all of ``session``'s) wait for ``session``, in
        the round it is released from (its request's, or the plan's)."""
        for save_path in save_paths or session.save_paths:
            self._rounds.hold(save_path, session, tag=session.label.request)

    def hold_between(self, session: Session, holder: object) -> None:
        """``session`` (a step session) is cut: ``holder`` (its claims) holds the hooks of its
        save_paths until the next part holds them, or no part follows (:meth:`release_between`)."""
        for save_path in session.save_paths:
            self._between.add((save_path, session.label.request))
            self._rounds.hold(save_path, holder, tag=session.label.request)

    def release_between(self, holder: object) -> None:
        """The next part of the cut step holds its save_paths, or none follows: ``holder``'s
        hold ends (a hook it alone held up is submitted, behind the parts handed over)."""
        between, self._between = self._between, set()
        for save_path, tag in between:
            self._rounds.release(save_path, holder, tag=tag)

    def _release(self, session: Session) -> None:
        for save_path in session.save_paths:
            self._rounds.release(save_path, session, tag=session.label.request)
