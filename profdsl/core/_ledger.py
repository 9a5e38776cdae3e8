"""The step ledger's arithmetic: one step's wall time on one rank of one role, split into buckets
that add up to it exactly (``docs/ledger.md``). Pure: integers (nanoseconds) in, integers out.

The buckets:

- one per **kind** of work (:data:`profdsl.core._kinds.STAGE_KINDS`): the time charged to the
  outermost stages of that kind;
- ``overhead``: profiling's own waits inside the step (below);
- ``outside``: the rest of the time no stage covers.

**One instant, one stage.** Each instant of the step is charged to at most one outermost stage:
of those running then (on any thread or task), the one that **began last** (a tie: the one that
ends first, then the first given; by the stages' own times, not clipped to the step). A stage
on a background thread is therefore charged while nothing started after it runs, and a stage
started inside its time takes the time it runs. The time an outermost stage ran while the
instant went to another is its ``beside`` time: shown next to the buckets (per kind,
and in all as ``concurrent``), never added to them. A nested stage (``parent`` set) is in its
outermost stage's bucket and is charged nothing of its own: its time is its parent's. A
stage's time outside the step's span is ``beyond``, and not counted.

**Profiling's waits.** A wait whose place is known (``waits``: ``[start, end)`` intervals) is
carved out of whatever runs then: an instant inside one is ``overhead``, whichever stage runs
(its stage, the one the instant would have gone to, is not charged it; the other stages running
then are beside as always). A wait known only by its length (``overhead``) is charged to time
no stage covers and no placed wait holds, where profdsl waits outside a stage's own time; one
larger than that time is capped there, and the excess is ``overhead_unplaced`` (it overlapped
stage time, which keeps it).

Examples:
    >>> from profdsl.core._ledger import Stage, split
    >>> ledger = split(0, 100, [Stage(10, 60, "update"), Stage(20, 30, "weight_sync"),
    ...                          Stage(50, 90, "generation"), Stage(12, 14, "data", parent=0)],
    ...                overhead=5)
    >>> {k: v for k, v in ledger.buckets.items() if v}
    {'generation': 40, 'update': 30, 'weight_sync': 10, 'overhead': 5, 'outside': 15}
    >>> ledger.beside, ledger.bucket_of
    ({'update': 20}, ('update', 'weight_sync', 'generation', 'update'))

    A placed wait of 4 inside the update (a scheduled stage's schedule step between two
    mini-batches) is overhead, not update:

    >>> ledger = split(0, 100, [Stage(10, 60, "update")], waits=[(30, 34)])
    >>> {k: v for k, v in ledger.buckets.items() if v}
    {'update': 46, 'overhead': 4, 'outside': 50}
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from profdsl.core import _intervals as intervals
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


def _charge(
    start: int, end: int, stages: Sequence[Stage], outer: Sequence[int], held: intervals.Intervals
) -> tuple[dict[int, int], dict[int, int]]:
    """Time each outermost stage wins and time charged to it: a sweep over the (clipped) stage
    boundaries and those of ``held`` (the placed waits: sorted, disjoint, inside the step); at
    each part, the running stage that began last (then ends first, then comes first: by its own
    times, not clipped to the step) wins it, and is charged it unless a wait holds it."""
    clipped = {i: (max(stages[i].start, start), min(stages[i].end, end)) for i in outer}
    live = sorted((i for i in outer if clipped[i][0] < clipped[i][1]), key=lambda i: clipped[i][0])
    cuts = sorted({t for i in live for t in clipped[i]} | {t for span in held for t in span})
    won = dict.fromkeys(outer, 0)
    charged = dict.fromkeys(outer, 0)
    heap: list[tuple[int, int, int]] = []
    added = at = 0
    for left, right in zip(cuts, cuts[1:]):
        while added < len(live) and clipped[live[added]][0] <= left:
            i = live[added]
            heapq.heappush(heap, (-stages[i].start, stages[i].end, i))
            added += 1
        while heap and clipped[heap[0][2]][1] <= left:
            heapq.heappop(heap)
        while at < len(held) and held[at][1] <= left:
            at += 1
        if heap:
            winner = heap[0][2]
            won[winner] += right - left
            if not (at < len(held) and held[at][0] <= left):  # (the cuts hold every wait's bounds)
                charged[winner] += right - left
    return won, charged


def split(
    start: int, end: int, stages: Sequence[Stage], overhead: int = 0, waits: Sequence[tuple[int, int]] = ()
) -> Ledger:
    """Split the step ``[start, end)`` among ``stages``, profiling's waits inside the step
    (``waits``: placed ``[start, end)`` intervals; ``overhead``: the length of those whose place
    is unknown) and the time outside any stage.

    Raises:
        ValueError: ``end < start``, a negative ``overhead``, a stage or wait that ends before it
            begins, a stage whose kind is ``overhead`` or ``outside``, or whose parent is no
            stage.
    """
    if end < start or overhead < 0:
        raise ValueError(f"a step of [{start}, {end}) with overhead {overhead}")
    for index, stage in enumerate(stages):
        if stage.end < stage.start or stage.kind in (OVERHEAD, OUTSIDE):
            raise ValueError(f"stage {index}: [{stage.start}, {stage.end}) of kind {stage.kind!r}")
    for index, (a, b) in enumerate(waits):
        if b < a:
            raise ValueError(f"wait {index}: [{a}, {b})")
    held = intervals.union((max(a, start), min(b, end)) for a, b in waits)
    roots = _roots(stages)
    outer = [i for i, root in enumerate(roots) if root == i]
    won, charged = _charge(start, end, stages, outer, held)
    buckets = dict.fromkeys(STAGE_KINDS, 0)
    beside: dict[str, int] = {}
    beyond = 0
    for i in outer:
        kind = stages[i].kind
        buckets[kind] = buckets.get(kind, 0) + charged[i]
        inside = max(0, min(stages[i].end, end) - max(stages[i].start, start))
        beyond += stages[i].end - stages[i].start - inside
        if inside > won[i]:
            beside[kind] = beside.get(kind, 0) + inside - won[i]
    waited = intervals.length(held)
    uncovered = end - start - sum(charged.values()) - waited
    placed = min(overhead, uncovered)
    buckets[OVERHEAD], buckets[OUTSIDE] = waited + placed, uncovered - placed
    return Ledger(
        wall=end - start,
        buckets=buckets,
        beside=beside,
        beyond=beyond,
        overhead_unplaced=overhead - placed,
        charged=tuple(charged.get(i, 0) for i in range(len(stages))),
        bucket_of=tuple(stages[root].kind for root in roots),
    )
