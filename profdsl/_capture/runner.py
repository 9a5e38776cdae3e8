"""Where a capture's calls run: :class:`Inline` (the calling thread: an own-thread capture) or
the process's one :class:`SessionThread` (a capture of every thread).

torch requires a capture to be started and stopped on one thread. An own-thread capture runs on
the thread that opens it and records that thread. A capture of every thread (torch's
``profile_all_threads``) runs every call on the session thread instead, so ``start_profile``
and ``stop_profile`` may arrive on different threads (threaded Ray actors) and regions opened on
any thread are captured.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["Inline", "SessionThread"]

T = TypeVar("T")
_Job = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class SessionThread:
    """A daemon thread running submitted calls one at a time, in order.

    A daemon, so that a profiler call that never returns cannot keep the interpreter from exiting.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="profdsl-session", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the caller, who decides
                future.set_exception(exc)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` without waiting for it."""
        self._jobs.put((Future(), fn, args))

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run ``fn(*args)`` on the thread and return its result.

        Raises:
            TimeoutError: no result within ``timeout`` seconds (the call goes on in the thread).
            Exception: whatever ``fn`` raised.
        """
        if threading.current_thread() is self._thread:  # re-entrant: a callback calling back in
            return fn(*args)
        future: Future[T] = Future()
        self._jobs.put((future, fn, args))
        try:
            return future.result(timeout)
        except TimeoutError:
            if future.cancel():  # never started: it will not run at all
                raise TimeoutError(f"{getattr(fn, '__name__', fn)} was still queued after {timeout}s") from None
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} took over {timeout}s") from None


class Inline:
    """Runs calls on the caller's thread (when torch cannot capture other threads anyway)."""

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run ``fn(*args)`` here; ``timeout`` is ignored."""
        return fn(*args)
