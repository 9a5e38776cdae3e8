"""The step ledger of a folder's traced steps: per step, role and rank, where the step's wall
time went (:func:`profdsl.core.ledger.split`), and per step, for each group of ranks, how long it
sat idle while another group worked (``profdsl summary --ledger``; ``docs/ledger.md``).

What it reads, each from its one home:

- the stages: the outermost regions of each trace (:meth:`StageModel.spans
  <profdsl.analysis.model.StageModel.spans>`; an engine's trace is one region,
  :data:`~profdsl.analysis.regions.ENGINE_STAGE`), of kind :func:`profdsl.core.kinds.kind_of`
  (their trace's declared kinds first);
- the step's wall time: the metrics log's ``wall_s`` (:mod:`profdsl.analysis.walls`). Only its
  length is known, not where it sits: the ledger places it over the stages, which is exact when
  they fit in it (they are inside ``start()`` .. ``stop()``); stages that spread over more than
  the wall time cannot be placed, and that rank's step gets no ledger;
- profiling's overhead: the ``blocked_ms`` of the step's discrete (stage) traces
  (:mod:`profdsl.analysis.cost`): a stage's capture starts and stops inside the step. A
  continuous step's capture starts before the step's clock and stops after it, so its
  ``blocked_ms`` is shown beside the ledger (``overhead_outside``), not in it.

A **group** is a role's ranks, or one engine replica's. Its **busy** time on a rank is the time
any of the rank's outermost stages ran; a group works while any of its ranks is busy. The
step's **traced span** runs from the first stage any group began to the last to end. A group's
idle time is the part of the span its rank was not busy (the mean over its ranks), and, for
each other group, the part of that during which the other group worked: the time it waited
while the other worked, as seen on the hosts' clocks (different hosts' clocks differ by their
skew).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from profdsl.analysis import cost
from profdsl.analysis.catalog import Artifact
from profdsl.analysis.load import scan_artifacts
from profdsl.analysis.model import StageModel
from profdsl.analysis.walls import step_walls
from profdsl.core import intervals
from profdsl.core.kinds import kind_of
from profdsl.core.ledger import Ledger, Stage, split

__all__ = ["FolderLedger", "GroupStep", "RankLedger", "group_name", "load_ledger"]

Key = tuple[str, "int | None", "int | None"]  # role, step, rank
Group = tuple[str, "int | None"]  # role, replica (None: a trainer role)
#: Why a rank's step has no ledger.
NO_WALL = "no wall time: no metrics log line for it (Metrics(log=True) writes one per step)"
ENGINE = "an engine replica has no steps of its own: its busy time is in the step's fleet view only"


def group_name(group: Group) -> str:
    """``actor``, or ``rollout replica 0``."""
    role, replica = group
    return role if replica is None else f"{role} replica {replica}"


@attrs.frozen
class RankLedger:
    """One role's step on one rank: its ledger, or why there is none (``why``); the stage
    intervals it was made of (ns) and ``overhead_outside`` (ns of continuous traces' waits)."""

    role: str
    step: int | None
    rank: int | None
    group: Group
    ledger: Ledger | None
    why: str | None
    busy: intervals.Intervals
    overhead_outside: int = 0


@attrs.frozen
class GroupStep:
    """One group at one step: ``ranks`` that have traces, ``ledgers`` of them that have a
    ledger, the mean per rank of each bucket over those (ns, empty when none), and over the
    step's traced span: the mean busy and idle ns per rank, and ``idle_while``: per other
    group, the mean ns a rank sat idle while that group worked."""

    step: int | None
    group: Group
    ranks: int
    ledgers: int
    buckets: Mapping[str, float]
    busy: float
    idle: float
    idle_while: Mapping[Group, float]


@attrs.frozen
class FolderLedger:
    """Every traced (role, step, rank), every step's groups and traced span, and the steps the
    metrics log has that no trace holds. Times are ns from ``origin_us`` (wall-clock µs)."""

    ranks: list[RankLedger]
    groups: list[GroupStep]
    spans: Mapping[int | None, tuple[int, int]]
    untraced: list[int]
    origin_us: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``profdsl summary --ledger --json``), in milliseconds."""
        return {
            "ranks": [_rank_dict(r) for r in self.ranks],
            "steps": [
                {
                    "step": step,
                    "span_ms": _ms(end - start),
                    "groups": [_group_dict(g) for g in self.groups if g.step == step],
                }
                for step, (start, end) in self.spans.items()
            ],
            "untraced_steps": self.untraced,
        }


def _ms(ns: float) -> float:
    """Milliseconds to the microsecond: a trace's times are microseconds on a clock of about
    1.8e15 µs, which a float holds to a quarter of a microsecond."""
    return round(ns / 1e6, 3)


def _rank_dict(rank: RankLedger) -> dict[str, Any]:
    ledger = rank.ledger
    return {
        "role": rank.role,
        "step": rank.step,
        "rank": rank.rank,
        "group": group_name(rank.group),
        "wall_ms": None if ledger is None else _ms(ledger.wall),
        "buckets_ms": None if ledger is None else {k: _ms(v) for k, v in ledger.buckets.items()},
        "beside_ms": None if ledger is None else {k: _ms(v) for k, v in ledger.beside.items()},
        "concurrent_ms": None if ledger is None else _ms(ledger.concurrent),
        "overhead_unplaced_ms": None if ledger is None else _ms(ledger.overhead_unplaced),
        "overhead_outside_ms": _ms(rank.overhead_outside),
        "why": rank.why,
    }


def _group_dict(group: GroupStep) -> dict[str, Any]:
    return {
        "group": group_name(group.group),
        "ranks": group.ranks,
        "ledgers": group.ledgers,
        "buckets_ms": {k: _ms(v) for k, v in group.buckets.items()},
        "busy_ms": _ms(group.busy),
        "idle_ms": _ms(group.idle),
        "idle_while_ms": {group_name(g): _ms(v) for g, v in group.idle_while.items()},
    }


def _overheads(artifacts: Iterable[Artifact]) -> tuple[dict[Key, int], dict[Key, int]]:
    """Per (role, step, rank): profiling's recorded waits inside the step (discrete traces) and
    outside it (continuous ones), ns."""
    traces = [a for a in artifacts if a.kind == "trace"]

    def waits(part: list[Artifact]) -> dict[Key, int]:
        return {(c.role, c.step, c.rank): round((c.blocked_ms or 0.0) * 1e6) for c in cost.rank_costs(part)}

    return waits([a for a in traces if a.stage is not None]), waits([a for a in traces if a.stage is None])


def _stages(
    model: StageModel, kinds: Mapping[int, Mapping[str, str]], origin_us: float
) -> dict[Key, tuple[Group, list[Stage]]]:
    """Every (role, step, rank)'s outermost stages, with its group: in ns from ``origin_us``
    (a time near them: ns since 1970 would not fit a float to the nanosecond)."""

    def _ns(us: float) -> int:
        return round((us - origin_us) * 1000)

    found: dict[Key, tuple[Group, list[Stage]]] = {}
    for artifact, spans in model.spans():
        key: Key = (artifact.role or "unknown", artifact.step, artifact.rank)
        group: Group = (key[0], artifact.replica if artifact.kind == "rollout" else None)
        declared = kinds.get(id(artifact), {})
        stages = found.setdefault(key, (group, []))[1]
        for span in spans:
            stages.append(
                Stage(_ns(span.start_us), _ns(span.end_us), kind_of(span.stage, declared.get(span.stage)), None)
            )
    return found


def _rank(key: Key, group: Group, stages: list[Stage], wall_us: float | None, inside: int, outside: int) -> RankLedger:
    busy = intervals.union((s.start, s.end) for s in stages)
    first, last = min(s.start for s in stages), max(s.end for s in stages)
    why: str | None = None
    ledger: Ledger | None = None
    if group[1] is not None:
        why = ENGINE
    elif wall_us is None:
        why = NO_WALL
    elif last - first > round(wall_us * 1000):
        why = (
            f"its stages spread over {_ms(last - first):.3f} ms, more than its wall time "
            f"({wall_us / 1000:.3f} ms): where the step sat among them is unknown"
        )
    else:
        ledger = split(first, first + round(wall_us * 1000), stages, inside)
    return RankLedger(key[0], key[1], key[2], group, ledger, why, busy, outside)


def _groups(ranks: Sequence[RankLedger]) -> tuple[list[GroupStep], dict[int | None, tuple[int, int]]]:
    """Per step: each group's buckets and idle time over the step's traced span."""
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
        for group, members in groups.items():
            ledgers = [r.ledger for r in members if r.ledger is not None]
            idle = [intervals.subtract([(start, end)], r.busy) for r in members]
            result.append(
                GroupStep(
                    step,
                    group,
                    len(members),
                    len(ledgers),
                    _mean_buckets(ledgers),
                    statistics.fmean(intervals.length(r.busy) for r in members),
                    statistics.fmean(intervals.length(i) for i in idle),
                    {
                        other: statistics.fmean(intervals.length(intervals.subtract(work, r.busy)) for r in members)
                        for other, work in busy.items()
                        if other != group
                    },
                )
            )
    return result, spans


def _mean_buckets(ledgers: Sequence[Ledger]) -> dict[str, float]:
    """Each bucket's mean over ``ledgers`` (empty when there are none)."""
    keys = dict.fromkeys(k for ledger in ledgers for k in ledger.buckets)
    return {k: statistics.fmean(ledger.buckets.get(k, 0) for ledger in ledgers) for k in keys} if ledgers else {}


def load_ledger(folder: str, artifacts: Sequence[Artifact], skipped: list[str] | None = None) -> FolderLedger:
    """The ledger of ``folder``'s traced steps (see the module docstring); traces that cannot be
    read are left out, their reasons appended to ``skipped``."""
    scans = scan_artifacts(folder, artifacts, skipped)
    walls = step_walls(folder)
    model = StageModel(scans, walls)
    kinds = {id(artifact): scan.kinds for artifact, scan in scans}
    inside, outside = _overheads(artifacts)
    origin_us = math.floor(min((s.start_us for _, spans in model.spans() for s in spans), default=0.0))
    ranks = [
        _rank(key, group, stages, model.wall_us(*key), inside.get(key, 0), outside.get(key, 0))
        for key, (group, stages) in sorted(_stages(model, kinds, origin_us).items(), key=lambda kv: _order(kv[0]))
        if stages
    ]
    groups, spans = _groups(ranks)
    traced = {r.step for r in ranks}
    untraced = sorted({step for _, step, _ in walls if step is not None and step not in traced})
    return FolderLedger(ranks, groups, spans, untraced, origin_us)


def _order(key: Key) -> tuple[Any, ...]:
    return (-1 if key[1] is None else key[1], key[0], -1 if key[2] is None else key[2])
