"""The step ledger's arithmetic: one step's wall time on one rank of one role, split into buckets
that add up to it exactly (``docs/ledger.md``). Pure: integers (nanoseconds) in, integers out.

The buckets:

- one per **kind** of work (:data:`profdsl.core._kinds.STAGE_KINDS`): the time charged to the
  outermost stages of that kind;
- ``overhead``: profiling's own waits inside the step (recorded as durations, not placed in
  time: they are charged to time no stage covers, where profdsl waits: a discrete stage's
  capture starts before its region opens and stops after it closes);
- ``outside``: the rest of the time no stage covers.

**One instant, one stage.** Each instant of the step is charged to at most one outermost stage:
of those running then (on any thread or task), the one that **began last** (a tie: the one that
ends first, then the first given; by the stages' own times, not clipped to the step). A stage
on a background thread is therefore charged while nothing started after it runs, and a stage
started inside its time takes the time it runs. The time an outermost stage ran while the
instant was charged to another is its ``beside`` time: shown next to the buckets (per kind,
and in all as ``concurrent``), never added to them. A nested stage (``parent`` set) is in its
outermost stage's bucket and is charged nothing of its own: its time is its parent's. A
stage's time outside the step's span is ``beyond``, and not counted. Recorded overhead larger
than the time no stage covers is capped there; the excess is ``overhead_unplaced`` (it
overlapped stage time, which keeps it).

Examples:
    >>> from profdsl.core._ledger import Stage, split
    >>> ledger = split(0, 100, [Stage(10, 60, "update"), Stage(20, 30, "weight_sync"),
    ...                          Stage(50, 90, "generation"), Stage(12, 14, "data", parent=0)],
    ...                overhead=5)
    >>> {k: v for k, v in ledger.buckets.items() if v}
    {'generation': 40, 'update': 30, 'weight_sync': 10, 'overhead': 5, 'outside': 15}
    >>> ledger.beside, ledger.bucket_of
    ({'update': 20}, ('update', 'weight_sync', 'generation', 'update'))
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from profdsl.core._kinds import STAGE_KINDS

__all__ = ["OUTSIDE", "OVERHEAD", "Ledger", "Stage", "split"]

OVERHEAD: Final = "overhead"
OUTSIDE: Final = "outside"


@attrs.frozen
class Stage:
    """One stage interval ``[start, end)``: its kind, the index of the stage it is nested in
    (None: outermost) and the thread or task it ran on (shown only)."""

    start: int
    end: int
    kind: str
    parent: int | None = None
    track: str = ""


@attrs.frozen
class Ledger:
    """One step's split (see the module docstring). ``buckets`` holds every kind of
    :data:`STAGE_KINDS`, any other kind a stage had, ``overhead`` and ``outside``: their sum is
    ``wall``. Per stage, in the order given: ``charged`` (its outermost stage's share, 0 for a
    nested one) and ``bucket_of``."""

    wall: int
    buckets: Mapping[str, int]
    beside: Mapping[str, int]
    beyond: int
    overhead_unplaced: int
    charged: tuple[int, ...]
    bucket_of: tuple[str, ...]

    @property
    def concurrent(self) -> int:
        """Stage time that ran beside the stage its instant was charged to (not in the sum)."""
        return sum(self.beside.values())


def _roots(stages: Sequence[Stage]) -> list[int]:
    """Each stage's outermost ancestor (itself when outermost).

    Raises:
        ValueError: a parent that is no stage, or a cycle.
    """
    roots: list[int] = []
    for index, stage in enumerate(stages):
        seen, at = {index}, stage
        current = index
        while at.parent is not None:
            if not 0 <= at.parent < len(stages) or at.parent in seen:
                raise ValueError(f"stage {index}: parent {at.parent} is no stage or makes a cycle")
            current = at.parent
            seen.add(current)
            at = stages[current]
        roots.append(current)
    return roots


def _charge(start: int, end: int, stages: Sequence[Stage], outer: Sequence[int]) -> dict[int, int]:
    """Time charged to each outermost stage: a sweep over the (clipped) stage boundaries; at
    each part, the running stage that began last (then ends first, then comes first: by its
    own times, not clipped to the step) takes it."""
    clipped = {i: (max(stages[i].start, start), min(stages[i].end, end)) for i in outer}
    live = sorted((i for i in outer if clipped[i][0] < clipped[i][1]), key=lambda i: clipped[i][0])
    cuts = sorted({t for i in live for t in clipped[i]})
    charged = dict.fromkeys(outer, 0)
    heap: list[tuple[int, int, int]] = []
    added = 0
    for left, right in zip(cuts, cuts[1:]):
        while added < len(live) and clipped[live[added]][0] <= left:
            i = live[added]
            heapq.heappush(heap, (-stages[i].start, stages[i].end, i))
            added += 1
        while heap and clipped[heap[0][2]][1] <= left:
            heapq.heappop(heap)
        if heap:
            charged[heap[0][2]] += right - left
    return charged


def split(start: int, end: int, stages: Sequence[Stage], overhead: int = 0) -> Ledger:
    """Split the step ``[start, end)`` among ``stages``, ``overhead`` (profiling's recorded
    waits inside the step) and the time outside any stage.

    Raises:
        ValueError: ``end < start``, a negative ``overhead``, a stage that ends before it
            begins, whose kind is ``overhead`` or ``outside``, or whose parent is no stage.
    """
    if end < start or overhead < 0:
        raise ValueError(f"a step of [{start}, {end}) with overhead {overhead}")
    for index, stage in enumerate(stages):
        if stage.end < stage.start or stage.kind in (OVERHEAD, OUTSIDE):
            raise ValueError(f"stage {index}: [{stage.start}, {stage.end}) of kind {stage.kind!r}")
    roots = _roots(stages)
    outer = [i for i, root in enumerate(roots) if root == i]
    charged = _charge(start, end, stages, outer)
    buckets = dict.fromkeys(STAGE_KINDS, 0)
    beside: dict[str, int] = {}
    beyond = 0
    for i in outer:
        kind = stages[i].kind
        buckets[kind] = buckets.get(kind, 0) + charged[i]
        inside = max(0, min(stages[i].end, end) - max(stages[i].start, start))
        beyond += stages[i].end - stages[i].start - inside
        if inside > charged[i]:
            beside[kind] = beside.get(kind, 0) + inside - charged[i]
    uncovered = end - start - sum(charged.values())
    placed = min(overhead, uncovered)
    buckets[OVERHEAD], buckets[OUTSIDE] = placed, uncovered - placed
    return Ledger(
        wall=end - start,
        buckets=buckets,
        beside=beside,
        beyond=beyond,
        overhead_unplaced=overhead - placed,
        charged=tuple(charged.get(i, 0) for i in range(len(stages))),
        bucket_of=tuple(stages[root].kind for root in roots),
    )
