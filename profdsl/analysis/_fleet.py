"""The step ledger across groups of ranks: per step, how long each group sat idle while another
worked (``docs/ledger.md``), from traces (:mod:`profdsl.analysis._ledger`) or the always-on
metrics (:func:`from_metrics`: the metrics log afterwards, every rank's step timings on a Ray
driver). Pure: ledgers and intervals in, figures and lines out.

A **group** is a role's ranks, or one engine replica's. Its **busy** time on a rank is the time
any of the rank's outermost stages ran; a group works while any of its ranks is busy. The
step's **span** runs from the first stage any group began to the last to end. A group's idle
time is the part of the span its rank was not busy (the mean over its ranks), and, for each
other group, the part of that during which the other group worked; and for each kind of work,
the part during which any other group worked at that kind. Times are on the hosts' clocks
(different hosts' clocks differ by their skew).

Examples:
    >>> ms = 1_000_000  # ns
    >>> actor = RankLedger("actor", 7, 0, ("actor", None), None, None, [(100 * ms, 130 * ms)])
    >>> driver = RankLedger(
    ...     "driver", 7, 0, ("driver", None), None, None, [(0, 100 * ms)], work={"generation": [(0, 100 * ms)]}
    ... )
    >>> groups, spans = fleet([actor, driver])
    >>> kind_headlines(7, spans[7][1] - spans[7][0], groups)
    ['actor ranks idle 76.9% of step 7 while generation ran (100.000 of 130.000 ms)']
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import attrs

from profdsl.analysis._reader import MAX_TIME_US
from profdsl.core import _intervals as intervals
from profdsl.core._kinds import STAGE_KINDS
from profdsl.core._ledger import OUTSIDE, OVERHEAD, Ledger
from profdsl.core._units import ms_text, percent_text

__all__ = [
    "FROM_METRICS",
    "FROM_TRACE",
    "Group",
    "GroupStep",
    "RankLedger",
    "all_ns",
    "fleet",
    "from_metrics",
    "group_name",
    "headlines",
    "kind_headlines",
    "ms",
    "to_ns",
    "unsplit",
]

T = TypeVar("T")

Group = tuple[str, "int | None"]  # role, replica (None: a trainer role)
#: Where a rank's ledger came from.
FROM_TRACE, FROM_METRICS = "trace", "metrics"
#: Why a step from the metrics has no place beside other ranks.
UNPLACED = "its metrics do not say where its stages ran (an older profdsl, or more intervals than a step places)"
#: Why a step from the metrics has no ledger when one of its times is beyond any clock.
BEYOND = "its metrics hold a time beyond any clock (over 1e12 s, what a trace may hold): no number of it is right"
#: Why a step from the metrics has no ledger when its buckets do not add up to its wall time.
NOT_ADDING_UP = "its metrics' buckets add up to {sum:.9f} s, not its wall time {wall:.9f} s: one of them is wrong"


def to_ns(value: float, ns_per_unit: float = 1e9) -> int | None:
    """``value`` (seconds, or the unit of ``ns_per_unit``) in ns, or None beyond the times a trace
    may hold (:data:`MAX_TIME_US`, either side of 0): a file's number no clock reads, whose ns
    would not fit a float.

    Examples:
        >>> to_ns(0.25), to_ns(-1.5), to_ns(2.5, 1e6), to_ns(1e300), to_ns(float("nan"))
        (250000000, -1500000000, 2500000, None, None)
    """
    ns = value * ns_per_unit
    return round(ns) if abs(ns) <= MAX_TIME_US * 1e3 else None


def group_name(group: Group) -> str:
    """``actor``, or ``rollout replica 0``."""
    role, replica = group
    return role if replica is None else f"{role} replica {replica}"


@attrs.frozen
class RankLedger:
    """One role's step on one rank: its ledger, or why there is none (``why``); where it was
    busy (ns, on the common clock of its folder or fleet), and per kind where it worked
    (``work``); ``overhead_outside`` (ns of continuous traces' waits); ``source``: from a trace
    or from the metrics; ``placed``: whether where it was busy is known (a trace's always is; a
    step from the metrics without its spans is not, and is left out of its group's idle times);
    ``device``: with device time on CUDA, its metrics' device split (ns per kind of work and
    ``outside``, adding up to the device span of its stages), else None."""

    role: str
    step: int | None
    rank: int | None
    group: Group
    ledger: Ledger | None
    why: str | None
    busy: intervals.Intervals
    overhead_outside: int = 0
    work: Mapping[str, intervals.Intervals] = attrs.field(factory=dict)
    source: str = FROM_TRACE
    placed: bool = True
    device: Mapping[str, int] | None = None


@attrs.frozen
class GroupStep:
    """One group at one step: ``ranks`` that have a ledger or a place, ``ledgers`` of them that
    have a ledger, the mean per rank of each bucket over those (ns, empty when none), and over
    the step's span: the mean busy and idle ns per rank, ``idle_while``: per other group, the
    mean ns a rank sat idle while that group worked, and ``idle_while_kind``: per kind, while
    any other group worked at it."""

    step: int | None
    group: Group
    ranks: int
    ledgers: int
    buckets: Mapping[str, float]
    busy: float
    idle: float
    idle_while: Mapping[Group, float]
    idle_while_kind: Mapping[str, float] = attrs.field(factory=dict)


def from_metrics(
    role: str,
    step: int | None,
    rank: int | None,
    wall_s: float,
    buckets_s: Mapping[str, float],
    *,
    beside_s: Mapping[str, float] | None = None,
    spans_s: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    began_s: float | None = None,
    origin_s: float = 0.0,
    device_s: Mapping[str, float] | None = None,
) -> RankLedger:
    """A rank's step from its always-on metrics (a metrics log line, a ``StepTimings``): its
    ledger in ns, and, when its spans and beginning are known, where it worked, in ns from
    ``origin_s`` (seconds since 1970). A step that cannot be placed has no busy time and says
    why (it counts in its group's buckets, not its idle times). ``device_s``: its device split.
    A step with a time beyond any clock (:func:`to_ns`), or whose buckets do not add up to its
    wall time (to the ns each bucket's seconds may lose), has no ledger, and says so."""
    wall = to_ns(wall_s)
    buckets = all_ns(buckets_s)
    beside = all_ns(beside_s or {})
    at = None if began_s is None else to_ns(began_s - origin_s)
    ends = [to_ns(end) for spans in (spans_s or {}).values() for _, end in spans]  # starts are <= their end
    if wall is None or buckets is None or beside is None or None in ends or (began_s is not None and at is None):
        return unsplit(role, step, rank, BEYOND)
    if abs(sum(buckets.values()) - wall) > len(buckets):
        return unsplit(role, step, rank, NOT_ADDING_UP.format(sum=sum(buckets.values()) / 1e9, wall=wall / 1e9))
    for key in (*STAGE_KINDS, OVERHEAD, OUTSIDE):
        buckets.setdefault(key, 0)
    ledger = Ledger(wall=wall, buckets=buckets, beside=beside, beyond=0, overhead_unplaced=0, charged=(), bucket_of=())
    device = all_ns(device_s)
    if spans_s is None or at is None:
        return attrs.evolve(unsplit(role, step, rank, UNPLACED), ledger=ledger, device=device)
    work = {kind: [(at + round(a * 1e9), at + round(b * 1e9)) for a, b in spans] for kind, spans in spans_s.items()}
    busy = intervals.union(span for spans in work.values() for span in spans)
    return RankLedger(role, step, rank, (role, None), ledger, None, busy, work=work, source=FROM_METRICS, device=device)


def all_ns(seconds: Mapping[str, float] | None) -> dict[str, int] | None:
    """Each value in ns (:func:`to_ns`: buckets, or a metrics log line's device split,
    ``ledger_device``); None when there are none, or any is beyond any clock."""
    if seconds is None:
        return None
    found = {k: to_ns(v) for k, v in seconds.items()}
    return None if None in found.values() else {k: v for k, v in found.items() if v is not None}


def unsplit(role: str, step: int | None, rank: int | None, why: str) -> RankLedger:
    """A rank's step from the metrics with no ledger or no place, and why (``ledger_why``)."""
    return RankLedger(role, step, rank, (role, None), None, why, [], source=FROM_METRICS, placed=False)


def fleet(ranks: Sequence[RankLedger]) -> tuple[list[GroupStep], dict[int | None, tuple[int, int]]]:
    """Per step: each group's buckets and idle times over the step's span (steps where no rank
    was placed are left out)."""
    by_step: dict[int | None, dict[Group, list[RankLedger]]] = defaultdict(lambda: defaultdict(list))
    for rank in ranks:
        by_step[rank.step][rank.group].append(rank)
    result: list[GroupStep] = []
    spans: dict[int | None, tuple[int, int]] = {}
    for step in sorted(by_step, key=lambda s: -1 if s is None else s):
        groups = by_step[step]
        busy = {g: intervals.union(span for r in members for span in r.busy) for g, members in groups.items()}
        if not any(busy.values()):
            continue
        start = min(b[0][0] for b in busy.values() if b)
        end = max(b[-1][1] for b in busy.values() if b)
        spans[step] = (start, end)
        seen = {g for g, members in groups.items() if any(r.placed for r in members)}  # where each worked is known
        for group, members in groups.items():
            placed = [r for r in members if r.placed]
            ledgers = [r.ledger for r in members if r.ledger is not None]
            if not placed and not ledgers:  # nothing of it to show: no zeros standing for it
                continue
            result.append(
                GroupStep(
                    step,
                    group,
                    len(placed),
                    len(ledgers),
                    _mean_buckets(ledgers),
                    _mean(intervals.length(r.busy) for r in placed),
                    _idle(placed, [(start, end)]),
                    {other: _idle(placed, work) for other, work in busy.items() if other != group and other in seen},
                    {kind: _idle(placed, work) for kind, work in _work_by_kind(group, groups).items()},
                )
            )
    return result, spans


def _work_by_kind(group: Group, groups: Mapping[Group, Sequence[RankLedger]]) -> dict[str, intervals.Intervals]:
    """Per kind, where any group but ``group`` worked at it."""
    found: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for other, members in groups.items():
        if other != group:
            for rank in members:
                for kind, spans in rank.work.items():
                    found[kind].extend(spans)
    return {kind: intervals.union(spans) for kind, spans in found.items()}


def _idle(placed: Sequence[RankLedger], work: intervals.Intervals) -> float:
    """The mean ns a rank of ``placed`` sat idle while ``work`` ran (the step's span: idle at all)."""
    return _mean(intervals.length(intervals.subtract(work, r.busy)) for r in placed)


def _mean(values: Iterable[float]) -> float:
    found = list(values)
    return statistics.fmean(found) if found else 0.0


def _mean_buckets(ledgers: Sequence[Ledger]) -> dict[str, float]:
    """Each bucket's mean over ``ledgers`` (empty when there are none)."""
    keys = dict.fromkeys(k for ledger in ledgers for k in ledger.buckets)
    return {k: statistics.fmean(ledger.buckets.get(k, 0) for ledger in ledgers) for k in keys} if ledgers else {}


def ms(ns: float) -> str:
    """ns as the ledger's views write milliseconds: ``1.500``."""
    return ms_text(ns / 1e6)


def headlines(step: int | None, span: int, groups: Sequence[GroupStep]) -> list[str]:
    """Per group, the other group it sat idle longest while it worked: ``actor ranks idle 92.0%
    of step 7 while rollout replica 0 ran (118.000 of 130.000 ms)``."""
    return _idle_lines(step, span, groups, lambda g: g.idle_while, group_name)


def kind_headlines(step: int | None, span: int, groups: Sequence[GroupStep]) -> list[str]:
    """Per group, the kind of work other groups did while it sat idle longest: ``actor ranks idle
    92.0% of step 7 while generation ran (118.000 of 130.000 ms)``."""
    return _idle_lines(step, span, groups, lambda g: g.idle_while_kind, str)


def _idle_lines(
    step: int | None,
    span: int,
    groups: Sequence[GroupStep],
    idle_while: Callable[[GroupStep], Mapping[T, float]],
    name: Callable[[T], str],
) -> list[str]:
    """Per group, what (``idle_while``, shown by ``name``) it sat idle longest while it ran."""
    lines = []
    for waiting in groups:
        worst = max(idle_while(waiting).items(), key=lambda item: item[1], default=None)
        if worst is None or worst[1] <= 0 or not span:
            continue
        other, idle = worst
        lines.append(
            f"{group_name(waiting.group)} ranks idle {percent_text(idle, span)} of step {step} while "
            f"{name(other)} ran ({ms(idle)} of {ms(span)} ms)"
        )
    return lines
