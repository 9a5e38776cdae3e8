"""Time units as profdsl writes them: seconds as milliseconds to the microsecond (a record's
cost fields), and the wall clock in whole milliseconds (a trace's or a log line's ``time_ms``)."""

from __future__ import annotations

import time

__all__ = ["ms_of", "now_ms"]


def ms_of(seconds: float, plus_ms: float = 0.0) -> float:
    """``seconds`` as milliseconds, to the microsecond (a record's cost fields); ``plus_ms``
    added first (a wait added to a field already in milliseconds)."""
    return round(plus_ms + seconds * 1000, 3)


def now_ms() -> int:
    """Wall-clock milliseconds: a trace's time in its name, a metrics log line's ``time_ms``."""
    return time.time_ns() // 1_000_000
