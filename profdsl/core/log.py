"""profdsl's logger, logging each distinct problem once per process, and escaping text from outside
(a file, a command's output) before it is logged.

Profiling faults are logged and recorded, never raised into training; a fault that repeats every
mini-batch must not flood the log either, hence :func:`once`. The memory of what was logged is
one :class:`OnceLog`, owned (reset, and renewed after a fork) by the process state
(:mod:`profdsl.runtime.process`).
"""

from __future__ import annotations

import logging
import re
import threading

__all__ = ["ONCE", "OnceLog", "logger", "once", "printable"]

logger = logging.getLogger("profdsl")

#: Characters that would break a line or drive the terminal: C0 and C1 controls, DEL, and the
#: Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters escaped as Python writes them (``\\n``, ``\\t``,
    ``\\x1b``); everything else, non-ASCII letters included, is kept: for a line of a
    terminal or a log that came from outside (a file, a command's output).

    Examples:
        >>> printable("ok \\x1b[31mred\\u2028")
        'ok \\\\x1b[31mred\\\\u2028'
    """
    return _CONTROL.sub(lambda match: repr(match[0])[1:-1], text)


class OnceLog:
    """The keys already logged in this process."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.RLock()  # re-entrant: a signal handler may log

    def first(self, key: str) -> bool:
        """True the first time ``key`` is seen (and remember it)."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True

    def clear(self) -> None:
        """Forget every key."""
        with self._lock:
            self._seen.clear()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held by another thread)."""
        self._lock = threading.RLock()  # re-entrant: a signal handler may log


#: The process's log memory.
ONCE = OnceLog()


def once(key: str, level: int, message: str, *args: object, exc_info: bool = False) -> bool:
    """Log ``message`` the first time ``key`` is seen in this process; True if it was logged."""
    if not ONCE.first(key):
        return False
    logger.log(level, message, *args, exc_info=exc_info)
    return True
