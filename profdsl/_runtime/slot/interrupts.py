"""Holding signals back while torch starts or stops a capture and hands its events over.

A signal whose Python handler raises (Ctrl-C's ``KeyboardInterrupt``, a trainer's SIGTERM handler
calling ``sys.exit``) that lands inside torch's ``prof.stop()`` loses the events inside torch (the
results are never stored) and can leave torch's profiler running; one that lands inside
``prof.start()`` leaves a profiler running that nothing stops. Python handles signals on the main
thread only, so on the main thread, for the length of those bounded sections, every signal that
has a Python handler is held and delivered when the section ends, through that handler. Waits
(for an export slot, for the hook) are never held: a signal there goes through at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["HELD", "Signals"]

#: The signals held when their handler is Python code (never one left to the OS: SIG_DFL, SIG_IGN).
HELD = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)

Signal = tuple[Any, int, "FrameType | None"]


class Signals:
    """The holds of one interpreter's main thread (the process's one lives in ``Process``)."""

    def __init__(self) -> None:
        self._pending: list[list[Signal]] = []  # one list per open deferred() block
        self._depth = 0  # open held() blocks: an inner one hands its signals to the outer

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Deliver the signals that ``held()`` blocks inside catch when this block ends."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self._pending.append([])
        try:
            yield
        finally:
            _deliver(self._pending.pop())

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the signals for the block (on the main thread; elsewhere no handler can run).
        Nested, the inner block hands a held signal to the outer one, which delivers it."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        caught: list[tuple[int, FrameType | None]] = []
        previous = _install(lambda signum, frame: caught.append((signum, frame)))
        if previous is None:  # not the main interpreter, or shutting down
            yield
            return
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            _restore(previous)
            signals = [(previous[signum], signum, frame) for signum, frame in caught]
            if self._pending and not self._depth:
                self._pending[-1].extend(signals)
            else:
                _deliver(signals)

    def after_fork(self) -> None:
        """A forked child holds nothing of its parent's."""
        self._pending, self._depth = [], 0


def _install(hold: Callable[[int, FrameType | None], object]) -> dict[int, Any] | None:
    """Put ``hold`` in place of every Python handler in ``HELD``; the handlers replaced."""
    previous: dict[int, Any] = {}
    try:
        for signum in HELD:
            if callable(signal.getsignal(signum)):
                previous[signum] = signal.signal(signum, hold)
    except (ValueError, OSError, TypeError):
        _restore(previous)
        return None
    return previous


def _deliver(signals: list[Signal]) -> None:
    for handler, signum, frame in signals:
        handler(signum, frame)  # Python's SIGINT handler raises KeyboardInterrupt here


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
