"""One step's timings over ranks: per role and stage, the spread of the ranks' seconds.

A straggler shows every step: ``max_s`` against ``mean_s``, and which rank it was. A rank counts
for a stage only when it entered the stage in that step.

:func:`over_ranks` is the one computation of a spread over ranks (least, mean, median, most, the
slowest rank): the always-on metrics' :class:`Spread` reports its mean (``timing_s_mean``, every
rank weighs alike in what the exporters sum), the stage-time model's
(:class:`~profdsl.analysis._model.StageSpread`, ``profdsl summary``) its median (one slow rank
does not move it: the slowest rank is shown beside it).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import NamedTuple, cast

import attrs

from profdsl.metrics._slow import StragglerAlert
from profdsl.metrics._timings import NAMES, StepTimings
from profdsl.metrics._tree import segment

__all__ = ["Figures", "Spread", "StepSummary", "aggregate", "fleet_lines", "over_ranks"]


class Figures(NamedTuple):
    """A quantity over ranks: how many ranks, the least, mean, median and most, and the rank that
    took the most (the lowest such rank on a tie, None before any)."""

    ranks: int
    least: float
    mean: float
    median: float
    most: float
    slowest: int | None


def over_ranks(samples: Iterable[tuple[int | None, float]]) -> Figures:
    """The figures of ``(rank, value)`` samples (at least one).

    Examples:
        >>> over_ranks([(0, 1.0), (1, 1.0), (2, 9.0), (3, 1.0)])
        Figures(ranks=4, least=1.0, mean=3.0, median=1.0, most=9.0, slowest=2)
    """
    items = list(samples)
    values = [value for _, value in items]
    most = max(values)
    slowest = min((rank for rank, value in items if value == most), key=lambda r: -1 if r is None else r)
    return Figures(len(items), min(values), sum(values) / len(values), statistics.median(values), most, slowest)


@attrs.frozen
class Spread:
    """One role's stage (``stage=None``: the whole step's wall time) over ``ranks`` ranks: the
    least, mean and most seconds, and the rank that took the most (the lowest such rank on a tie;
    :func:`over_ranks`)."""

    role: str
    stage: str | None
    ranks: int
    min_s: float
    mean_s: float
    max_s: float
    slowest_rank: int


@attrs.frozen
class StepSummary:
    """What ``RayStepProfiler`` gathered for one step: each rank's timings and their spread, and
    the straggler episodes going on (``Metrics.stragglers``; ``profdsl.metrics._slow``).

    Examples:
        >>> from profdsl.metrics._timings import StageTiming
        >>> def t(rank, s):
        ...     return StepTimings(role="actor", rank=rank, step=1, wall_s=s, stages={
        ...         "update_actor": StageTiming(total_s=s, self_s=s, count=1)})
        >>> summary = aggregate(1, [t(0, 1.0), t(1, 3.0)])
        >>> summary.flat()["timing_s_max/actor/update_actor"], summary.flat()["timing_slowest_rank/actor/update_actor"]
        (3.0, 1)
    """

    step: int
    spreads: tuple[Spread, ...]
    timings: tuple[StepTimings, ...]
    stragglers: tuple[StragglerAlert, ...] = ()
    #: The step's fleet lines: per role, the kind of work other roles did while its ranks sat
    #: idle longest (``actor ranks idle 92.0% of step 7 while generation ran (...)``; the step
    #: ledger, ``docs/ledger.md``); derived from ``timings``, so not compared.
    fleet: tuple[str, ...] = attrs.field(default=(), eq=False)

    def flat(self) -> dict[str, float]:
        """The flat mapping for a logger: ``timing_s_{min,mean,max}/<role>/<stage>`` and
        ``timing_slowest_rank/<role>/<stage>``, and the same with ``timing_step_s`` for the
        step's wall time per role. The role is one path segment, escaped as stage names are
        (``/`` as ``%2F``, ``%`` as ``%25``), so that role ``a/b`` with stage ``c`` and role ``a``
        with nested stage ``b/c`` keep apart. A straggler episode going on adds
        ``timing_straggler_factor/<role>/<stage>`` (its time over the other ranks' median),
        ``timing_straggler_rank/...`` and ``timing_straggler_steps/...`` (consecutive slow steps;
        the slowest rank's, when several straggle in one stage)."""
        out: dict[str, float] = {}
        for spread in self.spreads:
            role = segment(spread.role)
            if spread.stage is None:
                prefix, key, slowest = NAMES.step, role, "timing_step_slowest_rank"
            else:
                prefix, key, slowest = NAMES.total, f"{role}/{spread.stage}", "timing_slowest_rank"
            out[f"{prefix}_min/{key}"] = spread.min_s
            out[f"{prefix}_mean/{key}"] = spread.mean_s
            out[f"{prefix}_max/{key}"] = spread.max_s
            out[f"{slowest}/{key}"] = spread.slowest_rank
        for alert in sorted(self.stragglers, key=lambda a: a.factor):  # the slowest rank's last
            key = f"{segment(alert.role)}/{alert.stage}"
            out[f"{NAMES.straggler_factor}/{key}"] = alert.factor
            out[f"{NAMES.straggler_rank}/{key}"] = alert.rank
            out[f"{NAMES.straggler_steps}/{key}"] = alert.count
        return out


def aggregate(step: int, timings: Iterable[StepTimings]) -> StepSummary:
    """The spread over ranks of each role's stages (in the order first seen) and step wall time."""
    gathered = tuple(timings)
    stages: dict[tuple[str, str | None], list[tuple[int, float]]] = {}
    for item in gathered:
        stages.setdefault((item.role, None), []).append((item.rank, item.wall_s))
        for path, timing in item.stages.items():
            stages.setdefault((item.role, path), []).append((item.rank, timing.total_s))
    spreads = []
    for (role, stage), samples in stages.items():
        f = over_ranks(samples)
        spreads.append(Spread(role, stage, f.ranks, f.least, f.mean, f.most, cast(int, f.slowest)))
    return StepSummary(step=step, spreads=tuple(spreads), timings=gathered, fleet=fleet_lines(step, gathered))


def fleet_lines(step: int, timings: Iterable[StepTimings]) -> tuple[str, ...]:
    """Per role of ``step``, the kind of work the other roles did while its ranks sat idle
    longest, from each rank's ledger placed by its beginning on the wall clock (hosts' clocks
    differ by their skew); none when no rank's step has a ledger placed in time."""
    placed = [t for t in timings if t.step == step and t.ledger is not None and t.began_s is not None]
    if not placed:
        return ()
    from profdsl.analysis._fleet import fleet, from_metrics, kind_headlines  # (not at `import profdsl`)

    origin = min(t.began_s for t in placed if t.began_s is not None)
    ranks = [
        from_metrics(
            t.role,
            t.step,
            t.rank,
            t.wall_s,
            t.ledger or {},
            beside_s=t.ledger_beside,
            spans_s=t.ledger_spans,
            began_s=t.began_s,
            origin_s=origin,
        )
        for t in placed
    ]
    groups, spans = fleet(ranks)
    if step not in spans:
        return ()
    start, end = spans[step]
    return tuple(kind_headlines(step, end - start, groups))
