"""Profiling's own cost, per role and step: how long the training thread was blocked by the
profiler (``blocked_ms``) and how long the background export took (``export_ms``), summed over
the trace records that carry them.

This is the one home of that arithmetic: ``profdsl summary`` and the demo's closing report both
show :func:`step_costs`, through :data:`HEADERS` and :func:`cells`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs

from profdsl.analysis.catalog import Artifact

__all__ = ["HEADERS", "TITLE", "RankCost", "StepCost", "cells", "rank_costs", "step_costs"]

#: The cost table's title, and its columns (:func:`cells` gives one row).
TITLE = "profiling's own cost (blocked ms: the training thread waited on the profiler; export ms: background export)"
HEADERS = ("role", "step", "traces", "blocked ms", "max rank", "export ms")


def _add(total: float | None, value: float | None) -> float | None:
    """A sum over the records that carry a value: None while none has."""
    if value is None:
        return total
    return value if total is None else total + value


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@attrs.frozen
class RankCost:
    """Profiling's cost for one role, step and rank: ``traces`` records carry a cost; each sum is
    over the records that carry that field (None when none does)."""

    role: str
    step: int | None
    rank: int | None
    traces: int
    blocked_ms: float | None
    export_ms: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (one of :meth:`StepCost.as_dict`'s ``ranks``)."""
        return {
            "rank": self.rank,
            "traces": self.traces,
            "blocked_ms": _round(self.blocked_ms),
            "export_ms": _round(self.export_ms),
        }


@attrs.frozen
class StepCost:
    """Profiling's cost for one role and step, over its ranks: the sums, and the rank the
    training thread was blocked longest on (``max_rank``, ``max_blocked_ms``; None when no record
    carries ``blocked_ms``)."""

    role: str
    step: int | None
    traces: int
    blocked_ms: float | None
    export_ms: float | None
    max_rank: int | None
    max_blocked_ms: float | None
    ranks: tuple[RankCost, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``profdsl summary --cost --json``)."""
        return {
            "role": self.role,
            "step": self.step,
            "traces": self.traces,
            "blocked_ms": _round(self.blocked_ms),
            "export_ms": _round(self.export_ms),
            "max_rank": self.max_rank,
            "max_blocked_ms": _round(self.max_blocked_ms),
            "ranks": [r.as_dict() for r in self.ranks],
        }


def _order(value: int | None) -> int:
    return -1 if value is None else value


def _costed(rows: Iterable[Artifact]) -> list[Artifact]:
    """The records that carry a cost, whatever their status (a lost trace's blocking was paid);
    a path listed twice counts once (its first record), as the trace readers read it."""
    seen: set[str] = set()
    found = []
    for artifact in rows:
        if artifact.blocked_ms is None and artifact.export_ms is None:
            continue
        if artifact.path is not None:
            if artifact.path in seen:
                continue
            seen.add(artifact.path)
        found.append(artifact)
    return found


def rank_costs(rows: Iterable[Artifact]) -> list[RankCost]:
    """One row per (role, step, rank) with a cost, sorted; records without either field are left out."""
    sums: dict[tuple[str, int | None, int | None], tuple[int, float | None, float | None]] = {}
    for a in _costed(rows):
        key = (a.role or "unknown", a.step, a.rank)
        count, blocked, export = sums.get(key, (0, None, None))
        sums[key] = (count + 1, _add(blocked, a.blocked_ms), _add(export, a.export_ms))
    result = [RankCost(role, step, rank, *values) for (role, step, rank), values in sums.items()]
    return sorted(result, key=lambda r: (r.role, _order(r.step), _order(r.rank)))


def step_costs(rows: Iterable[Artifact]) -> list[StepCost]:
    """One row per (role, step) with a cost, sorted: sums over its ranks, and its most blocked rank
    (the lowest such rank on a tie)."""
    per_step: dict[tuple[str, int | None], list[RankCost]] = defaultdict(list)
    for cost in rank_costs(rows):
        per_step[(cost.role, cost.step)].append(cost)
    result = []
    for (role, step), ranks in per_step.items():
        blocked: float | None = None
        export: float | None = None
        for r in ranks:
            blocked, export = _add(blocked, r.blocked_ms), _add(export, r.export_ms)
        timed = [r for r in ranks if r.blocked_ms is not None]
        most = max(timed, key=lambda r: r.blocked_ms or 0.0, default=None)  # first (lowest rank) of ties
        result.append(
            StepCost(
                role,
                step,
                sum(r.traces for r in ranks),
                blocked,
                export,
                None if most is None else most.rank,
                None if most is None else most.blocked_ms,
                tuple(ranks),
            )
        )
    return result


def cells(cost: StepCost) -> list[object]:
    """One row of the cost table (:data:`HEADERS`); None where nothing was recorded."""
    rank = "?" if cost.max_rank is None else cost.max_rank
    most = None if cost.max_blocked_ms is None else f"rank {rank} ({cost.max_blocked_ms:.3f} ms)"
    return [cost.role, cost.step, cost.traces, _ms(cost.blocked_ms), most, _ms(cost.export_ms)]


def _ms(value: float | None) -> str | None:
    return None if value is None else f"{value:.3f}"
