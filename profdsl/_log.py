"""profdsl's logger, and logging each distinct problem once per process.

Profiling faults are logged and recorded, never raised into training; a fault that repeats every
mini-batch must not flood the log either, hence :func:`once`.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["logger", "once", "reset_once"]

logger = logging.getLogger("profdsl")

_seen: set[str] = set()
_seen_lock = threading.Lock()


def once(key: str, level: int, message: str, *args: object, exc_info: bool = False) -> bool:
    """Log ``message`` the first time ``key`` is seen in this process; True if it was logged."""
    with _seen_lock:
        if key in _seen:
            return False
        _seen.add(key)
    logger.log(level, message, *args, exc_info=exc_info)
    return True


def reset_once() -> None:
    """Forget which keys were logged (for tests)."""
    with _seen_lock:
        _seen.clear()
