"""A session's *owner*: the one thread that makes every torch call of it (start, schedule steps,
pauses, stop). torch requires a session to start and stop on one thread and records, by default,
only that thread.

- An *own-thread* session is owned by the thread that opens it and records that thread. It is
  used where that thread keeps coming back to profdsl (:func:`comes_back`: the main thread, a
  thread running an event loop, as in plain and async Ray actors), and for discrete stages,
  which open and close on one thread.
- An *every-thread* session is owned by profdsl's session thread and records every thread
  (torch's ``profile_all_threads``, torch >= 2.7): any thread may start, step or stop it. A
  continuous step opened on a thread that may never come back (a pool thread of a threaded Ray
  actor) gets one, as does a role whose work was seen on threads its session could not see, and
  every session with ``TorchOptions(all_threads=True)``.

A stop asked of an own-thread session from another thread is left to its owner, which stops it
at its next profdsl call, or when it ends (:class:`ThreadWatch`, on the ending thread).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable

__all__ = ["ThreadWatch", "comes_back"]


def comes_back() -> bool:
    """Whether the calling thread keeps calling back into profdsl: the main thread, or a thread
    running an asyncio event loop (whose every task runs there)."""
    if threading.current_thread() is threading.main_thread():
        return True
    asyncio = sys.modules.get("asyncio")  # no loop can run where asyncio was never imported
    return asyncio is not None and asyncio._get_running_loop() is not None


class _Token:
    """Lives in a watched thread's local storage."""


class ThreadWatch:
    """Calls ``on_end(ident)`` on each watched thread as it ends, on that thread (CPython frees
    a thread's local storage there, while its thread state is still alive). Never in a forked
    child (its copy of the thread owns nothing) and never at interpreter exit (the main thread
    is handled by the exit's shutdown)."""

    def __init__(self, on_end: Callable[[int], None]) -> None:
        self._on_end = on_end
        self._local = threading.local()

    def watch(self) -> None:
        """Watch the calling thread (the main thread is left to the exit's shutdown)."""
        if threading.current_thread() is threading.main_thread() or hasattr(self._local, "token"):
            return
        token = self._local.token = _Token()
        finalizer = weakref.finalize(token, self._ended, threading.get_ident(), os.getpid())
        finalizer.atexit = False  # at exit it would run on the main thread, not the watched one

    def _ended(self, ident: int, pid: int) -> None:
        if os.getpid() == pid and threading.get_ident() == ident:
            self._on_end(ident)
