"""Time per stage, from the regions profdsl itself wrote into each trace (streamed).

A trace's ``profdsl.regions`` metadata names the stages and mini-batch bases profdsl opened;
complete events with those names are its regions. Nesting is found per thread by time
containment, so that a step's share can be computed from its outermost regions only. Engine
traces (no profdsl metadata) count as one region, ``generate (engine)``, spanning the trace.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs

from profdsl.analysis.catalog import Artifact, json_traces, trace_header
from profdsl.analysis.reader import TraceError, events, header
from profdsl.core.labels import trace_names

__all__ = ["ENGINE_STAGE", "Region", "StageRow", "regions_of", "stage_rows"]

ENGINE_STAGE = "generate (engine)"
_DIGITS = "0123456789"


@attrs.frozen
class Region:
    """One profdsl region of a trace: its stage (mini-batches under their base name)."""

    stage: str
    dur_us: float
    outermost: bool


@attrs.frozen
class StageRow:
    """Time of one stage of one role, step and rank."""

    role: str
    stage: str
    step: int | None
    rank: int | None
    count: int
    total_ms: float
    share: float | None  # of the role's outermost region time at that step and rank

    @property
    def mean_ms(self) -> float:
        """Mean time per occurrence."""
        return self.total_ms / self.count if self.count else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``summary --json``)."""
        return {"role": self.role, "stage": self.stage, "step": self.step, "rank": self.rank,
                "count": self.count, "total_ms": round(self.total_ms, 6),
                "mean_ms": round(self.mean_ms, 6),
                "share": None if self.share is None else round(self.share, 6)}


def _stage_name(name: str, stages: dict[str, str], bases: dict[str, str]) -> str | None:
    """The stage (or mini-batch base) label of the region named ``name`` in the trace.

    A mini-batch's name is its base followed by its index; the base may itself end in digits
    (``mb1``, or an escape such as ``%A9``), so each split of the trailing digits is tried.
    """
    stage = stages.get(name)
    if stage is not None:
        return stage
    for cut in range(len(name.rstrip(_DIGITS)), len(name)):
        if name[cut] == "0" and cut < len(name) - 1:
            continue  # an index has no leading zero
        base = bases.get(name[:cut])
        if base is not None:
            return base
    return None


def regions_of(path: str | os.PathLike[str], *, engine: bool = False,
               head: dict[str, Any] | None = None) -> list[Region]:
    """The profdsl regions of one trace file, streamed (memory: the regions, not the trace).

    ``engine``: a rollout engine's trace, counted as one region over its span when it holds no
    profdsl region. ``head``: the trace's header, when already read.
    """
    meta = (header(path) if head is None else head).get("profdsl") or {}
    regions = meta.get("regions") or {}
    stages, bases = set(regions.get("stages") or ()), set(regions.get("mini_batches") or ())
    if meta.get("stage"):  # a discrete trace's own stage, even without the regions list
        stages.add(meta["stage"])
    # regions are named by their encoded labels (profdsl.core.labels)
    by_name = trace_names(s for s in stages if isinstance(s, str))
    base_names = trace_names(b for b in bases if isinstance(b, str))
    found: list[tuple[Any, float, float, str]] = []
    first, last = float("inf"), float("-inf")
    for event in events(path):
        if event.get("ph") != "X" or event.get("cat") == "gpu_user_annotation":
            continue  # GPU-side copies of a region would count it twice
        ts, dur = float(event.get("ts", 0)), float(event.get("dur", 0))
        first, last = min(first, ts), max(last, ts + dur)
        stage = _stage_name(str(event.get("name", "")), by_name, base_names) if meta else None
        if stage is not None:
            found.append((event.get("tid"), ts, dur, stage))
    if not found and (engine or not meta):  # an engine's own trace: its span is generation
        return [Region(ENGINE_STAGE, last - first, True)] if last > first else []
    return _nest(found)


def _nest(found: list[tuple[Any, float, float, str]]) -> list[Region]:
    result: list[Region] = []
    ends_by_thread: dict[Any, list[float]] = defaultdict(list)
    for tid, ts, dur, stage in sorted(found, key=lambda r: (str(r[0]), r[1], -r[2])):
        ends = ends_by_thread[tid]
        while ends and ends[-1] <= ts:
            ends.pop()
        result.append(Region(stage, dur, outermost=not ends))
        ends.append(ts + dur)
    return result


def stage_rows(folder: str | os.PathLike[str], items: Iterable[Artifact],
               skipped: list[str] | None = None) -> list[StageRow]:
    """Aggregate every ok trace of ``items`` into one row per (role, stage, step, rank).

    ``skipped``: when given, a trace that cannot be read is left out and its reason appended;
    otherwise its TraceError is raised.
    """
    totals: dict[tuple[str, str, int | None, int | None], list[float]] = defaultdict(list)
    outer: dict[tuple[str, int | None, int | None], float] = defaultdict(float)
    for artifact in json_traces(items):
        path = os.path.join(folder, str(artifact.path))
        try:
            found = regions_of(path, engine=artifact.kind == "rollout", head=trace_header(folder, artifact))
        except TraceError as exc:
            if skipped is None:
                raise
            skipped.append(str(exc))
            continue
        for region in found:
            key = (artifact.role or "unknown", region.stage, artifact.step, artifact.rank)
            totals[key].append(region.dur_us / 1000)
            if region.outermost:
                outer[(key[0], artifact.step, artifact.rank)] += region.dur_us / 1000
    rows = []
    for (role, stage, step, rank), values in totals.items():
        denominator = outer.get((role, step, rank), 0.0)
        share = sum(values) / denominator if denominator else None
        rows.append(StageRow(role, stage, step, rank, len(values), sum(values), share))
    return sorted(rows, key=lambda r: (r.role, r.stage, _order(r.step), _order(r.rank)))


def _order(value: int | None) -> int:
    return -1 if value is None else value
