"""Profiling's own cost, per role and step: how long the training thread was blocked by the
profiler (``blocked_ms``) and how long the background export took (``export_ms``), summed over
the trace records that carry them; and, where the records carry them (older ones do not), the
parts of that cost (:data:`PARTS`): the process's first session's start, which pays the
profiler's one-time set-up (``init_ms``), the other sessions' starts and stops (``start_ms``,
``stop_ms``), the waits for the writer (``wait_ms``: export slots, and the last profiled step's
wait for its traces), and the writer thread's CPU time while it exported (``export_cpu_ms``).

This is the one home of that arithmetic: ``profdsl summary`` and the demo's closing report both
show :func:`step_costs`, through :func:`headers` and :func:`cells`.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs

from profdsl.analysis._catalog import Artifact, number
from profdsl.core._units import ms_text
from profdsl.records.manifest import TraceRecord

__all__ = [
    "HEADERS",
    "PARTS",
    "PARTS_NOTE",
    "PART_HEADERS",
    "TITLE",
    "RankCost",
    "StepCost",
    "cells",
    "has_parts",
    "headers",
    "rank_costs",
    "step_costs",
]

#: The cost table's title, and its columns (:func:`cells` gives one row).
TITLE = (
    "profiling's own cost (blocked ms: the training thread waited on profdsl's own captures, not on rollout "
    "engines' profilers, which the step ledger's overhead adds; export ms: background export)"
)
HEADERS = ("role", "step", "traces", "blocked ms", "max rank", "export ms")
#: The trace record fields summed as the parts of the cost, in :class:`RankCost`'s order.
PARTS = ("init_ms", "start_ms", "stop_ms", "wait_ms", "export_cpu_ms")
#: The columns the parts add (start and stop in one), when a record carries them.
PART_HEADERS = ("init ms", "start+stop ms", "wait ms", "export cpu ms")
#: What the parts are, said under a table that shows them.
PARTS_NOTE = (
    "init: the process's first capture start (the profiler's one-time set-up); start+stop: the "
    "other sessions' starts and the stops (in discrete mode, inside the step, around each stage); "
    "wait: for a free export slot, and at the last profiled step for its traces. All three are "
    "part of blocked. export cpu: the writer thread's CPU time, taken from training's cores "
    "while it runs. - where no record says (older records; a rollout sampler's own session, whose trace is a "
    "moved rollout file, has none: its start may have paid the set-up)"
)


def _round(value: float | None) -> float | None:
    """``value`` to the nanosecond; None where nothing was recorded, or where a sum of recorded
    values overflows a float (each is finite; their sum need not be)."""
    return None if value is None or not math.isfinite(value) else round(value, 6)


def _rounded(cost: object, names: Iterable[str]) -> dict[str, float | None]:
    """``cost``'s fields ``names`` as a JSON row holds them (:func:`_round`)."""
    return {name: _round(getattr(cost, name)) for name in names}


Sums = tuple[float | None, ...]
_NONE: Sums = (None,) * (2 + len(PARTS))


def _values(artifact: Artifact) -> Sums:
    """``blocked_ms``, ``export_ms`` and the :data:`PARTS` of one artifact's record."""
    record = artifact.record
    parts = tuple(getattr(record, name) for name in PARTS) if isinstance(record, TraceRecord) else _NONE[2:]
    return (artifact.blocked_ms, artifact.export_ms, *parts)


def _sum(into: Sums, values: Sums) -> Sums:
    """Field by field, a sum over the records that carry a value: None while none has."""
    return tuple(t if v is None else v if t is None else t + v for t, v in zip(into, values))


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
    init_ms: float | None = None
    start_ms: float | None = None
    stop_ms: float | None = None
    wait_ms: float | None = None
    export_cpu_ms: float | None = None

    @property
    def sums(self) -> Sums:
        """``blocked_ms``, ``export_ms`` and the :data:`PARTS`, in that order."""
        return (self.blocked_ms, self.export_ms, *(getattr(self, name) for name in PARTS))

    def as_dict(self, parts: bool = False) -> dict[str, Any]:
        """JSON-friendly form (one of :meth:`StepCost.as_dict`'s ``ranks``), with the
        :data:`PARTS` when ``parts``."""
        return {
            "rank": self.rank,
            "traces": self.traces,
            **_rounded(self, ("blocked_ms", "export_ms", *(PARTS if parts else ()))),
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
    init_ms: float | None = None
    start_ms: float | None = None
    stop_ms: float | None = None
    wait_ms: float | None = None
    export_cpu_ms: float | None = None

    def as_dict(self, parts: bool = False) -> dict[str, Any]:
        """JSON-friendly form (``profdsl summary --cost --json``), with the :data:`PARTS` when
        ``parts``."""
        return {
            "role": self.role,
            "step": self.step,
            "traces": self.traces,
            **_rounded(self, ("blocked_ms", "export_ms")),
            "max_rank": self.max_rank,
            **_rounded(self, ("max_blocked_ms", *(PARTS if parts else ()))),
            "ranks": [r.as_dict(parts) for r in self.ranks],
        }


def _costed(rows: Iterable[Artifact]) -> list[Artifact]:
    """The records that carry a cost, whatever their status (a lost trace's blocking was paid);
    a path listed twice counts once (its first record), as the trace readers read it."""
    seen: set[str] = set()
    found = []
    for artifact in rows:
        if all(value is None for value in _values(artifact)) or artifact.path in seen:
            continue
        if artifact.path is not None:
            seen.add(artifact.path)
        found.append(artifact)
    return found


def rank_costs(rows: Iterable[Artifact]) -> list[RankCost]:
    """One row per (role, step, rank) with a cost, sorted; records without any cost field are left out."""
    sums: dict[tuple[str, int | None, int | None], tuple[int, Sums]] = {}
    for a in _costed(rows):
        key = (a.role or "unknown", a.step, a.rank)
        count, values = sums.get(key, (0, _NONE))
        sums[key] = (count + 1, _sum(values, _values(a)))
    result = [RankCost(role, step, rank, count, *values) for (role, step, rank), (count, values) in sums.items()]
    return sorted(result, key=lambda r: (r.role, number(r.step), number(r.rank)))


def step_costs(rows: Iterable[Artifact]) -> list[StepCost]:
    """One row per (role, step) with a cost, sorted: sums over its ranks, and its most blocked rank
    (the lowest such rank on a tie)."""
    per_step: dict[tuple[str, int | None], list[RankCost]] = defaultdict(list)
    for cost in rank_costs(rows):
        per_step[(cost.role, cost.step)].append(cost)
    result = []
    for (role, step), ranks in per_step.items():
        blocked, export, *parts = functools.reduce(_sum, (r.sums for r in ranks), _NONE)
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
                *parts,
            )
        )
    return result


def has_parts(costs: Iterable[StepCost]) -> bool:
    """Whether any record behind ``costs`` carries a part (a folder written before they were
    recorded has none: its table keeps the columns it always had)."""
    return any(getattr(c, name) is not None for c in costs for name in PARTS)


def headers(parts: bool) -> tuple[str, ...]:
    """The cost table's columns: :data:`HEADERS`, then :data:`PART_HEADERS` with ``parts`` (when
    any record carries a part: :func:`has_parts`)."""
    return HEADERS + PART_HEADERS if parts else HEADERS


def cells(cost: StepCost, parts: bool = False) -> list[object]:
    """One row of the cost table (:data:`HEADERS`, and :data:`PART_HEADERS` with ``parts``);
    None where nothing was recorded."""
    rank = "?" if cost.max_rank is None else cost.max_rank
    most = None if _ms(cost.max_blocked_ms) is None else f"rank {rank} ({_ms(cost.max_blocked_ms)} ms)"
    row: list[object] = [cost.role, cost.step, cost.traces, _ms(cost.blocked_ms), most, _ms(cost.export_ms)]
    if parts:
        (sessions,) = _sum((cost.start_ms,), (cost.stop_ms,))
        row += [_ms(cost.init_ms), _ms(sessions), _ms(cost.wait_ms), _ms(cost.export_cpu_ms)]
    return row


def _ms(value: float | None) -> str | None:
    return None if value is None or not math.isfinite(value) else ms_text(value)
