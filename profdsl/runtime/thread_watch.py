"""Knowing when a thread ends, on that thread.

torch's profiler must be stopped on the thread that started it; a session left to a thread that
ended crashes the process at exit. :class:`ThreadWatch` puts a token in a watched thread's local
storage; CPython frees it when the thread ends, on that thread, while its thread state is still
alive, and the callback runs there. Never in a forked child (its copy of the thread is not the
one that owned anything) and never at interpreter exit (the main thread is closed by ``atexit``).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["ThreadWatch"]


class _Token:
    """Lives in a watched thread's local storage."""


class ThreadWatch:
    """Calls ``on_end(ident)`` on each watched thread as it ends."""

    def __init__(self, on_end: Callable[[int], None]) -> None:
        self._on_end = on_end
        self._local = threading.local()

    def watch(self) -> None:
        """Watch the calling thread (the main thread is left to ``atexit``)."""
        if threading.current_thread() is threading.main_thread() or hasattr(self._local, "token"):
            return
        token = self._local.token = _Token()
        finalizer = weakref.finalize(token, self._ended, threading.get_ident(), os.getpid())
        finalizer.atexit = False  # at exit it would run on the main thread, not the watched one

    def _ended(self, ident: int, pid: int) -> None:
        """The token was freed: on the watched thread as it ends, or (ignored) in a forked child
        dropping its copy."""
        if os.getpid() == pid and threading.get_ident() == ident:
            self._on_end(ident)
