"""Callers' waits on the writer's jobs: always bounded, in slices (a signal for the main thread
is seen within one), and charged to the jobs they wait for: the seconds a caller waited for a job
are that job's share of the training thread's blocked time, kept by the job running when a wait
ends (done, run out or interrupted) as well as read while it goes on.

The waiting threads are kept under the writer's condition, which the writer notifies whenever a
job ends or settles (docs/architecture.md, "Locks").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Waits"]

#: The longest a wait goes without looking for a signal delivered to another thread.
_SLICE_S = 0.2


class Waits:
    """The waits on one writer's jobs, under its condition ``cond``."""

    def __init__(self, cond: threading.Condition, left: Callable[[float, float | None], None]) -> None:
        self._cond = cond
        # left(since, rest): a charged wait ended (under the condition); the waits went on since
        # ``since``, and the others still go on since ``rest`` (None: none does)
        self._left = left
        self._waiters: dict[int, float] = {}  # thread ident -> when it began waiting

    def until(self, done: Callable[[], bool], timeout: float, *, charged: bool = True) -> bool:
        """Wait until ``done()``, at most ``timeout`` seconds; False when the wait ran out.
        ``charged``: the wait counts for the jobs running meanwhile (:meth:`waited`)."""
        if done():
            return True
        me = threading.get_ident()
        deadline = time.monotonic() + timeout
        with self._cond:
            mine = charged and me not in self._waiters  # not inside this thread's other wait (a signal handler's)
            if mine:
                self._waiters[me] = time.perf_counter()
            try:
                while not done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(min(_SLICE_S, remaining))
                return True
            finally:
                since = self._waiters.pop(me, None) if mine else None
                if since is not None:
                    rest = min(self._waiters.values(), default=None)
                    self._left(since if rest is None else min(since, rest), rest)

    @staticmethod
    def wait_event(event: threading.Event, *, timeout: float) -> bool:
        """Wait until ``event`` is set, at most ``timeout`` seconds, in slices."""
        deadline = time.monotonic() + timeout
        while not event.wait(min(_SLICE_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return False
        return True

    def waited(self, started: float) -> float:
        """Seconds a caller has waited for the job that began running at ``started`` (the
        earliest wait still going on, from when it or the job began): a job's share of the
        training thread's blocked time."""
        with self._cond:
            if not self._waiters:
                return 0.0
            since = max(min(self._waiters.values()), started)
        return max(0.0, time.perf_counter() - since)
