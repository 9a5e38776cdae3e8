"""Sets of time as sorted, disjoint half-open intervals ``[start, end)`` of integers
(nanoseconds): what the step ledger's fleet view measures idle time with.

Examples:
    >>> busy = union([(0, 10), (5, 20), (30, 40)])
    >>> busy, length(busy)
    ([(0, 20), (30, 40)], 30)
    >>> subtract([(0, 100)], busy), length(subtract(busy, [(15, 35)]))
    ([(20, 30), (40, 100)], 20)
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Intervals", "length", "subtract", "union"]

Intervals = list[tuple[int, int]]


def union(spans: Iterable[tuple[int, int]]) -> Intervals:
    """The time any of ``spans`` covers, as sorted disjoint intervals (empty spans left out)."""
    merged: Intervals = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(spans: Intervals) -> int:
    """The total length of sorted disjoint intervals."""
    return sum(end - start for start, end in spans)


def subtract(spans: Intervals, taken: Intervals) -> Intervals:
    """The time of ``spans`` that ``taken`` does not cover (both sorted and disjoint)."""
    result: Intervals = []
    index = 0
    for start, end in spans:
        while index < len(taken) and taken[index][1] <= start:
            index += 1
        cursor, at = start, index
        while at < len(taken) and taken[at][0] < end:
            if taken[at][0] > cursor:
                result.append((cursor, taken[at][0]))
            cursor = max(cursor, taken[at][1])
            at += 1
        if cursor < end:
            result.append((cursor, end))
    return result
