"""Time units as profdsl writes them: seconds as milliseconds to the microsecond (a record's
cost fields), the wall clock in whole milliseconds (a trace's or a log line's ``time_ms``), and
milliseconds as the reading side's views print them (three decimals); a size in bytes as the
commands print one (binary units); a share as a percentage; and a trace's size as the
trace-size budget counts and prints it (``TorchOptions.max_trace_mb``: decimal megabytes,
10^6 bytes, as docs/configuration.md says); and integers as runs of consecutive values (``0-2``)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable

__all__ = ["MB", "mb_text", "ms_of", "ms_text", "now_ms", "percent_text", "runs", "size_text"]

#: A megabyte, as the trace-size budget counts it (10^6 bytes, as docs/configuration.md and
#: docs/performance.md do).
MB = 1_000_000


def ms_of(seconds: float, plus_ms: float = 0.0) -> float:
    """``seconds`` as milliseconds, to the microsecond (a record's cost fields); ``plus_ms``
    added first (a wait added to a field already in milliseconds)."""
    return round(plus_ms + seconds * 1000, 3)


def now_ms() -> int:
    """Wall-clock milliseconds: a trace's time in its name, a metrics log line's ``time_ms``."""
    return time.time_ns() // 1_000_000


def ms_text(ms: float, digits: int = 3, *, signed: bool = False) -> str:
    """Milliseconds as the views print them: ``1.500`` (the stage table, the cost table, the
    step ledger, ``diff``, the culprits); ``digits`` decimals (the demo's tables print fewer);
    ``signed``: a change, ``+1.500`` or ``-1.500``.

    Examples:
        >>> ms_text(1.5), ms_text(1497.46, 1, signed=True), ms_text(-0.25, 2)
        ('1.500', '+1497.5', '-0.25')
    """
    return f"{ms:+.{digits}f}" if signed else f"{ms:.{digits}f}"


def percent_text(part: float, whole: float = 1.0) -> str:
    """``part`` of ``whole`` (a share when ``whole`` is left out) as a percentage, one decimal
    (``summary``'s share column, the step ledger's idle and outside shares).

    Examples:
        >>> percent_text(0.125), percent_text(1, 3)
        ('12.5%', '33.3%')
    """
    return f"{100 * part / whole:.1f}%"


def size_text(size: int) -> str:
    """A size in bytes as the commands print it, in binary units: ``512 B``, ``1.5 KB``, ``2.0 MB``,
    ``3.1 GB`` (``ls``, the reading progress line)."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def mb_text(size: float) -> str:
    """``size`` bytes in the trace-size budget's megabytes (:data:`MB`), one decimal: the budget's
    warnings and ``profdsl plan``, beside a ``max_trace_mb`` counted in the same unit.

    Examples:
        >>> mb_text(6_000_000), mb_text(2**20)
        ('6.0 MB', '1.0 MB')
    """
    return f"{size / MB:.1f} MB"


def runs(ordered: Iterable[int]) -> list[str]:
    """Sorted integers as their runs of consecutive values (by value less position), each
    ``first-last`` or alone: ``[0, 1, 2, 5]`` → ``0-2``, ``5`` (``profdsl plan``, ``PROFDSL_STEPS``)."""
    found = ([v for _, v in run] for _, run in itertools.groupby(enumerate(ordered), lambda iv: iv[1] - iv[0]))
    return [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in found]
