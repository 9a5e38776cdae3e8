"""profdsl's logger, logging each distinct problem once per process, and escaping text from outside
(a file, a command's output) before it is logged.

Profiling faults are logged and recorded, never raised into training; a fault that repeats every
mini-batch must not flood the log either, hence :func:`once`. The memory of what was logged is
one :class:`OnceLog`, owned (reset, and renewed after a fork) by the process state
(:mod:`profdsl._runtime.process`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator

__all__ = ["ONCE", "OnceLog", "counted", "described", "failing_once", "internal_error", "logger", "once", "printable"]

#: Characters that would break a line or drive the terminal: C0 and C1 controls, DEL, the
#: Unicode line and paragraph separators, the bidirectional controls (an override reverses what
#: follows it: a name shown as another) and lone surrogates (the bytes of a file name that are no
#: UTF-8, as Python reads them: a UTF-8 stdout refuses to write them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with control characters escaped as Python writes them (``\\n``, ``\\t``,
    ``\\x1b``, ``\\u202e``, ``\\udcfe``); everything else, non-ASCII letters included, is kept:
    what came from outside the process (a request, a file, a client's address) before it is
    logged or printed.

    Examples:
        >>> printable("ok\\nfinish hook ok\\x1b[2J")
        'ok\\\\nfinish hook ok\\\\x1b[2J'
    """
    return _CONTROL.sub(lambda match: repr(match[0])[1:-1], text)


def described(exc: BaseException | None) -> str:
    """``exc`` as records and messages name it, its type then its text (``OSError: disk full``)."""
    return f"{type(exc).__name__}: {exc}"


logger = logging.getLogger("profdsl")


class OnceLog:
    """The keys already logged in this process."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._counts: dict[str, int] = {}  # per kind (a fixed text of profdsl's, never input)
        self._lock = threading.RLock()  # re-entrant: a signal handler may log

    def count(self, kind: str) -> int:
        """How many of ``kind`` were seen, this one included."""
        with self._lock:
            n = self._counts[kind] = self._counts.get(kind, 0) + 1
            return n

    def first(self, key: str) -> bool:
        """True the first time ``key`` is seen (and remember it)."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True

    def seen(self, key: str) -> bool:
        """Whether ``key`` was seen (without marking it)."""
        with self._lock:
            return key in self._seen

    def clear(self) -> None:
        """Forget every key and count."""
        with self._lock:
            self._seen.clear()
            self._counts.clear()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held by another thread)."""
        self._lock = threading.RLock()  # re-entrant: a signal handler may log


#: The process's log memory.
ONCE = OnceLog()


def once(key: str, level: int, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` is seen in this process."""
    if ONCE.first(key):
        logger.log(level, message, *args)


def internal_error(where: str, exc: BaseException) -> None:
    """A fault inside profdsl's own code at ``where`` (a DSL entry, a region, a metrics exit):
    logged once per place and kind of exception, never raised into the caller's code (the
    annotated code's results and exceptions pass through unchanged)."""
    once(
        f"dsl:{where}:{type(exc).__name__}",
        logging.ERROR,
        "profdsl: internal error in %s (profiling continues without it): %r",
        where,
        exc,
    )


#: How many events of one kind :func:`counted` logs in full.
COUNTED_IN_FULL = 10


def counted(kind: str, level: int, message: str, *args: object) -> None:
    """Log the first :data:`COUNTED_IN_FULL` events of ``kind`` in full (``message``), then only
    how many there were, at the 100th, 1000th...: a flood of bad input (a line per malformed
    body or refused request) costs a few lines, and no memory per event. ``kind`` is a fixed
    text of profdsl's (``"malformed POST /profile bodies"``), never input."""
    n = ONCE.count(kind)
    if n <= COUNTED_IN_FULL:
        logger.log(level, message, *args)
    elif n == COUNTED_IN_FULL + 1:
        logger.log(level, "profdsl: more %s: counted from now on, a line at each power of ten", kind)
    elif n >= 100 and str(n).rstrip("0") == "1":
        logger.log(level, "profdsl: %d %s so far (the first %d logged in full)", n, kind, COUNTED_IN_FULL)


@contextlib.contextmanager
def failing_once(key: str, message: str, *args: object, by_kind: bool = False) -> Iterator[None]:
    """A guard for a profiling step that must not fail its caller: an ``Exception`` raised inside
    is logged (at ERROR, the first time ``key`` is seen, or ``key:<its type>`` with ``by_kind``:
    :func:`once`) by ``message``, with ``args`` and then the exception as its arguments, and not
    raised."""
    try:
        yield
    except Exception as exc:
        once(f"{key}:{type(exc).__name__}" if by_kind else key, logging.ERROR, message, *args, exc)
