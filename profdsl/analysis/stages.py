"""Time per stage, from the regions profdsl itself wrote into each trace (streamed).

A trace's ``profdsl.regions`` metadata names the stages and mini-batch bases profdsl opened;
complete events with those names are its regions. Nesting is found per thread by time
containment, so that a step's share can be computed from its outermost regions only. Engine
traces (no profdsl metadata) count as one region, ``generate (engine)``, spanning the trace.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs

from profdsl.analysis.catalog import Artifact
from profdsl.analysis.reader import events, header
from profdsl.core.naming import is_json_trace

__all__ = ["ENGINE_STAGE", "Region", "StageRow", "regions_of", "stage_rows"]

ENGINE_STAGE = "generate (engine)"
_INDEXED = re.compile(r"(.*?)(\d+)")


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


def _stage_name(name: str, stages: set[str], bases: set[str]) -> str | None:
    if name in stages:
        return name
    match = _INDEXED.fullmatch(name)
    return match[1] if match and match[1] in bases else None


def regions_of(path: str | os.PathLike[str], *, engine: bool = False) -> list[Region]:
    """The profdsl regions of one trace file, streamed (memory: the regions, not the trace).

    ``engine``: a rollout engine's trace, counted as one region over its span when it holds no
    profdsl region.
    """
    meta = header(path).get("profdsl") or {}
    regions = meta.get("regions") or {}
    stages, bases = set(regions.get("stages") or ()), set(regions.get("mini_batches") or ())
    if meta.get("stage"):  # a discrete trace's own stage, even without the regions list
        stages.add(meta["stage"])
    found: list[tuple[Any, float, float, str]] = []
    first, last = float("inf"), float("-inf")
    for event in events(path):
        if event.get("ph") != "X" or event.get("cat") == "gpu_user_annotation":
            continue  # GPU-side copies of a region would count it twice
        ts, dur = float(event.get("ts", 0)), float(event.get("dur", 0))
        first, last = min(first, ts), max(last, ts + dur)
        stage = _stage_name(str(event.get("name", "")), stages, bases) if meta else None
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


def stage_rows(folder: str | os.PathLike[str], items: Iterable[Artifact]) -> list[StageRow]:
    """Aggregate every ok trace of ``items`` into one row per (role, stage, step, rank)."""
    totals: dict[tuple[str, str, int | None, int | None], list[float]] = defaultdict(list)
    outer: dict[tuple[str, int | None, int | None], float] = defaultdict(float)
    for artifact in items:
        if artifact.status != "ok" or not artifact.path or not is_json_trace(artifact.path):
            continue
        engine = artifact.kind == "rollout"
        for region in regions_of(os.path.join(folder, artifact.path), engine=engine):
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
