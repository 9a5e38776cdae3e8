"""Holding Ctrl-C back while torch stops a session and hands its events over.

An interrupt that lands inside torch's ``prof.stop()`` loses the events inside torch (the results
are never stored), and one that lands between stopping and handing the trace to the writer loses
the trace. Signals are handled on the main thread only, so on the main thread, for the length of
that bounded section, a SIGINT is held and delivered when the section ends, through the handler
that was installed before (Python's ``KeyboardInterrupt``, or the program's own). Waits (for an
export slot, for the hook) are never held: an interrupt there goes through at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["held"]


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT for the block (on the main thread; elsewhere no signal can land). Nested, the
    inner block hands a held signal to the outer one, which delivers it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[FrameType | None] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(frame)

    try:
        previous = signal.signal(signal.SIGINT, hold)
    except (ValueError, OSError, TypeError):  # not the main interpreter, or shutting down
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            _deliver(previous, caught[0])


def _deliver(handler: Any, frame: FrameType | None) -> None:
    """Deliver the held SIGINT as it would have been delivered."""
    if callable(handler):
        handler(signal.SIGINT, frame)  # Python's default raises KeyboardInterrupt here
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)
