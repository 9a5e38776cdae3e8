"""The capture slot's lock, and the work that must wait until it is released.

A finish hook can become due while the slot is held (the last session of a save_path was just
written): it must not run under the lock, where it would hold up every other thread's stages for
the length of an upload. :class:`SlotLock` queues such work and runs it once the outermost holder
lets go; work queued while an exception (a Ctrl-C) unwinds waits for :meth:`SlotLock.run_due`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["SlotLock"]


class SlotLock:
    """A re-entrant lock with work to run after its release.

    Examples:
        >>> lock, ran = SlotLock(), []
        >>> with lock.held():
        ...     with lock.held():
        ...         lock.after(lambda: ran.append("hook"))
        ...     ran.append("inner released")
        >>> ran
        ['inner released', 'hook']
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # nesting of held() on the thread holding the lock
        self._due: list[Callable[[], None]] = []

    def try_acquire(self) -> bool:
        """Take the lock if it is free (or held by this thread), without waiting; the caller
        then enters ``held(acquired=True)``."""
        return self._lock.acquire(blocking=False)

    @contextlib.contextmanager
    def held(self, *, acquired: bool = False) -> Iterator[None]:
        """Hold the lock; work queued meanwhile runs once the outermost holder releases it,
        unless an exception unwinds (then it waits for :meth:`run_due`)."""
        if not acquired:
            self._lock.acquire()
        due: list[Callable[[], None]] = []
        try:
            self._depth += 1
            completed = False
            try:
                yield
                completed = True
            finally:
                self._depth -= 1
                if self._depth == 0 and completed:
                    due, self._due = self._due, []
        finally:
            self._lock.release()
        for job in due:
            job()

    def after(self, job: Callable[[], None]) -> None:
        """Run ``job`` once the lock is released (call with the lock held)."""
        self._due.append(job)

    def run_due(self) -> None:
        """Run work left queued by an exception (``close()``, exit)."""
        with self._lock:
            due, self._due = self._due, []
        for job in due:
            job()
