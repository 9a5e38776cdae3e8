"""Time units as profdsl writes them: seconds as milliseconds to the microsecond (a record's
cost fields)."""

from __future__ import annotations

__all__ = ["ms_of"]


def ms_of(seconds: float, plus_ms: float = 0.0) -> float:
    """``seconds`` as milliseconds, to the microsecond (a record's cost fields); ``plus_ms``
    added first (a wait added to a field already in milliseconds)."""
    return round(plus_ms + seconds * 1000, 3)

