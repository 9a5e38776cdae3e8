"""The step ledger of a folder's traced steps: per step, role and rank, where the step's wall
time went (:func:`profdsl.core._ledger.split`), and per step, for each group of ranks, how long it
sat idle while another group worked (``profdsl summary --ledger``; ``docs/ledger.md``).

What it reads, each from its one home:

- the stages: the outermost regions of each trace (:meth:`StageModel.spans
  <profdsl.analysis._model.StageModel.spans>`; an engine's trace is one region,
  :data:`~profdsl.analysis._regions.ENGINE_STAGE`), of kind :func:`profdsl.core._kinds.kind_of`
  (their trace's declared kinds first);
- the step's wall time: the metrics log's ``wall_s`` (:mod:`profdsl.analysis._walls`). Only its
  length is known, not where it sits: the ledger places it over the stages, which is exact when
  they fit in it (they are inside ``start()`` .. ``stop()``); stages that spread over more than
  the wall time cannot be placed, and that rank's step gets no ledger, nor does one with a
  scheduled stage's windows (:func:`_windowed`: its traces hold its recorded mini-batches only;
  its ledger is the metrics log's);
- profiling's overhead: the waits inside the step its metrics log line timed
  (``ledger_waits_s``: a stage capture's start and stop, a scheduled stage's schedule steps
  between its mini-batches, rollout engines' profilers), charged, as durations, to the time no
  traced stage covers: a stage's region opens after its capture starts, is suspended while its
  schedule steps and closes before it stops. A log written before that field: the
  ``blocked_ms`` of the step's discrete (stage) traces (:mod:`profdsl.analysis._cost`) and the
  seconds the step waited on rollout engines' profilers (``ledger_engines_s``). A continuous
  step's capture starts before the step's clock and stops after it, so its ``blocked_ms`` is
  shown beside the ledger (``overhead_outside``), not in it;
- with device time on CUDA, the device split of its metrics log line (``ledger_device``).

Steps and ranks no trace splits get their ledger from the metrics log instead (each line's
``ledger``, split by :mod:`profdsl.metrics._ledger` when the step ended, and where each kind
worked, ``ledger_spans`` from ``began_s``), kept apart (``FolderLedger.metrics``).

Groups, busy and idle times: :mod:`profdsl.analysis._fleet`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from profdsl.analysis import _cost as cost
from profdsl.analysis._catalog import Artifact, number
from profdsl.analysis._fleet import (
    BEYOND,
    Group,
    GroupStep,
    RankLedger,
    all_ns,
    fleet,
    from_metrics,
    group_name,
    to_ns,
    unsplit,
)
from profdsl.analysis._load import scan_artifacts
from profdsl.analysis._model import StageModel
from profdsl.analysis._walls import Key, LogRead, longest, read_walls, step_walls
from profdsl.core import _intervals as intervals
from profdsl.core._kinds import kind_of
from profdsl.core._ledger import Ledger, Stage, split
from profdsl.core._units import ms_text
from profdsl.records.metrics_log import MetricsLine

__all__ = ["FolderLedger", "GroupStep", "RankLedger", "group_name", "load_ledger"]

#: Why a rank's step has no ledger.
NO_WALL = "no wall time: no metrics log line for it (Metrics(log=True) writes one per step)"
ENGINE = "an engine replica has no steps of its own: its busy time is in the step's fleet view only"
WINDOWED = (
    "its traces hold only the recorded windows of its scheduled stage {stages} (mini-batches {windows}), "
    "not the rest of its step: its ledger is the metrics log's (Metrics(log=True))"
)


@attrs.frozen
class FolderLedger:
    """Every traced (role, step, rank), every step's groups and traced span, and the steps the
    metrics log has that no trace holds. Times are ns from ``origin_us`` (wall-clock µs).

    ``metrics``: the ledgers of the (role, step, rank)s no trace splits, from the metrics log
    (``Metrics(log=True)``: every step), with their groups and spans (``metric_groups``,
    ``metric_spans``: over every rank the log places at the step, traced or not)."""

    ranks: list[RankLedger]
    groups: list[GroupStep]
    spans: Mapping[int | None, tuple[int, int]]
    untraced: list[int]
    origin_us: float = 0.0
    metrics: list[RankLedger] = attrs.field(factory=list)
    metric_groups: list[GroupStep] = attrs.field(factory=list)
    metric_spans: Mapping[int | None, tuple[int, int]] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``profdsl summary --ledger --json``), in milliseconds."""
        return {
            "ranks": [_rank_dict(r) for r in self.ranks],
            "steps": _steps_dict(self.spans, self.groups),
            "untraced_steps": self.untraced,
            "metrics": {
                "ranks": [_rank_dict(r) for r in self.metrics],
                "steps": _steps_dict(self.metric_spans, self.metric_groups),
            },
        }


def _steps_dict(spans: Mapping[int | None, tuple[int, int]], groups: Sequence[GroupStep]) -> list[dict[str, Any]]:
    return [
        {"step": step, "span_ms": _ms(end - start), "groups": [_group_dict(g) for g in groups if g.step == step]}
        for step, (start, end) in spans.items()
    ]


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
        "device_ms": None if rank.device is None else {k: _ms(v) for k, v in rank.device.items()},
        "device_span_ms": None if rank.device is None else _ms(sum(rank.device.values())),
        "why": rank.why,
        "source": rank.source,
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
        "idle_while_kind_ms": {k: _ms(v) for k, v in group.idle_while_kind.items()},
    }


def _overheads(artifacts: Iterable[Artifact]) -> tuple[dict[Key, int | None], dict[Key, int | None]]:
    """Per (role, step, rank): profiling's recorded waits inside the step (discrete traces) and
    outside it (continuous ones), ns (None: beyond any clock, :func:`~profdsl.analysis._fleet.to_ns`)."""
    traces = [a for a in artifacts if a.kind == "trace"]

    def waits(part: list[Artifact]) -> dict[Key, int | None]:
        return {(c.role, c.step, c.rank): to_ns(c.blocked_ms or 0.0, 1e6) for c in cost.rank_costs(part)}

    return waits([a for a in traces if a.stage is not None]), waits([a for a in traces if a.stage is None])


def _windowed(artifacts: Iterable[Artifact]) -> dict[Key, str]:
    """Per (role, step, rank) whose traces include a scheduled stage's windows, why its traces
    cannot split its step: a window's trace holds the stage's recorded mini-batches only."""
    found: dict[Key, tuple[set[str], set[tuple[int, int]]]] = {}
    for a in artifacts:
        if a.kind == "trace" and a.stage is not None and a.window is not None:
            stages, windows = found.setdefault((a.role or "unknown", a.step, a.rank), (set(), set()))
            stages.add(a.stage)
            windows.add(a.window)
    out = {}
    for key, (stages, windows) in found.items():
        listed = [str(a) if a == b else f"{a}-{b}" for a, b in sorted(windows)[:5]]
        more = f" and {len(windows) - 5} more" if len(windows) > 5 else ""
        out[key] = WINDOWED.format(stages=", ".join(sorted(stages)), windows=", ".join(listed) + more)
    return out


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
        stages += (Stage(_ns(s.start_us), _ns(s.end_us), kind_of(s.stage, declared.get(s.stage)), None) for s in spans)
    return found


def _rank(
    key: Key,
    group: Group,
    stages: list[Stage],
    wall_us: float | None,
    inside: int | None,
    outside: int | None,
    line: MetricsLine | None,
    windowed: str | None = None,
) -> RankLedger:
    if windowed is not None:  # its traces' stages are part of its step: neither split nor placed by them
        return RankLedger(key[0], key[1], key[2], group, None, windowed, [], outside or 0, placed=False)
    busy = intervals.union((s.start, s.end) for s in stages)
    by_kind: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for stage in stages:
        by_kind[stage.kind].append((stage.start, stage.end))
    work = {kind: intervals.union(spans) for kind, spans in by_kind.items()}
    first, last = min(s.start for s in stages), max(s.end for s in stages)
    why: str | None = None
    ledger: Ledger | None = None
    wall = None if wall_us is None else to_ns(wall_us, 1e3)
    waits = _waits(line, inside)
    if group[1] is not None:
        why = ENGINE
    elif wall_us is None:
        why = NO_WALL
    elif wall is None or waits is None or outside is None:
        why = BEYOND
    elif last - first > wall:
        why = (
            f"its stages spread over {ms_text(_ms(last - first))} ms, more than its wall time "
            f"({ms_text(wall_us / 1000)} ms): where the step sat among them is unknown"
        )
    else:
        ledger = split(first, first + wall, stages, waits)
    device = None if line is None or ledger is None else all_ns(line.ledger_device)
    return RankLedger(key[0], key[1], key[2], group, ledger, why, busy, outside or 0, work, device=device)


def _waits(line: MetricsLine | None, inside: int | None) -> int | None:
    """Profiling's waits inside a traced step, ns: as its metrics log line timed them, else (a log
    written before ``ledger_waits_s``, or none) its stage traces' ``blocked_ms`` (``inside``) and
    its waits on rollout engines' profilers; None: beyond any clock."""
    if line is not None and line.ledger_waits_s is not None:
        return to_ns(line.ledger_waits_s)
    engines = to_ns(line.ledger_engines_s or 0.0) if line is not None else 0
    return None if inside is None or engines is None else inside + engines


def load_ledger(
    folder: str, artifacts: Sequence[Artifact], skipped: list[str], log: LogRead | None = None
) -> FolderLedger:
    """The ledger of ``folder``'s traced steps (see the module docstring); traces that cannot be
    read are left out, their reasons appended to ``skipped``. The metrics logs' walls and
    ledgers come from ``log``, the caller's read of them (whose bad lines it names), else from
    one read here."""
    log = read_walls(folder) if log is None else log
    scans = scan_artifacts(folder, artifacts, skipped)
    walls = step_walls(log)
    model = StageModel(scans, walls)
    kinds = {id(artifact): scan.names.kinds for artifact, scan in scans}
    inside, outside = _overheads(artifacts)
    origin_us = math.floor(min((s.start_us for _, spans in model.spans() for s in spans), default=0.0))
    lines = _lines(log)
    windowed = _windowed(artifacts)
    ranks = [
        _rank(
            key,
            group,
            stages,
            model.wall_us(*key),
            inside.get(key, 0),
            outside.get(key, 0),
            lines.get(key),
            windowed.get(key),
        )
        for key, (group, stages) in sorted(_stages(model, kinds, origin_us).items(), key=lambda kv: _order(kv[0]))
        if stages
    ]
    groups, spans = fleet(ranks)
    traced = {r.step for r in ranks}
    untraced = sorted({step for _, step, _ in walls if step is not None and step not in traced})
    split_here = {(r.role, r.step, r.rank) for r in ranks if r.ledger is not None}
    metrics = _from_log(lines, split_here, origin_us)
    placed = {(r.role, r.step, r.rank) for r in metrics}
    beside = [r for r in ranks if (r.role, r.step, r.rank) not in placed and r.step in {m.step for m in metrics}]
    metric_groups, metric_spans = fleet([*metrics, *beside])
    return FolderLedger(ranks, groups, spans, untraced, origin_us, metrics, metric_groups, metric_spans)


def _lines(log: LogRead) -> dict[Key, MetricsLine]:
    """Per (role, step, rank), the metrics log's line that has a ledger or says why not (the
    longest wall time where several processes of one rank logged one)."""
    return longest(
        ((line.role or "unknown", line.step, line.rank), line)
        for _, _, line in log.lines
        if line.ledger is not None or line.ledger_why is not None
    )


def _from_log(lines: Mapping[Key, MetricsLine], split_here: set[Key], origin_us: float) -> list[RankLedger]:
    """The ledgers the metrics log holds for the (role, step, rank)s no trace splits, or why a
    line has none."""
    best = {key: line for key, line in lines.items() if key not in split_here}
    if not origin_us:
        origin_us = math.floor(min((line.began_s or 0.0 for line in best.values()), default=0.0) * 1e6)
    return [
        unsplit(key[0], key[1], key[2], line.ledger_why or "")
        if line.ledger is None
        else from_metrics(
            key[0],
            key[1],
            key[2],
            line.wall_s or 0.0,
            line.ledger,
            beside_s=line.ledger_beside,
            spans_s=line.ledger_spans,
            began_s=line.began_s,
            origin_s=origin_us / 1e6,
            device_s=line.ledger_device,
        )
        for key, line in sorted(best.items(), key=lambda kv: _order(kv[0]))
    ]


def _order(key: Key) -> tuple[Any, ...]:
    return (number(key[1]), key[0], number(key[2]))
