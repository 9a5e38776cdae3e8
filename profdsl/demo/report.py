"""What the demo prints at the end: where every artifact went, time per stage, and what profiling
itself cost."""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from typing import Any

from profdsl.analysis import cost
from profdsl.analysis.catalog import FolderError, artifacts
from profdsl.analysis.stages import ENGINE_STAGE
from profdsl.collect.manifest import read_manifest

__all__ = ["artifacts_table", "cost_table", "stage_table"]


def _load(path: str) -> dict[str, Any]:
    with gzip.open(path, "rt") as file:
        return json.load(file)  # type: ignore[no-any-return]


def _span_ms(events: list[dict[str, Any]]) -> float:
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("ph") == "X"]
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 1000 if spans else 0.0


def stage_table(save_path: str) -> list[tuple[str, str, int, float]]:
    """(role, stage, traces, total ms) per stage: the stage's own region in each trace, or the
    whole trace's span for engine traces."""
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)
    for record in read_manifest(save_path):
        if record["kind"] not in ("trace", "rollout") or record["status"] != "ok":
            continue
        events = _load(os.path.join(save_path, record["path"]))["traceEvents"]
        stage = record.get("stage") or (ENGINE_STAGE if record["kind"] == "rollout" else "step")
        own = [e for e in events if e.get("ph") == "X" and e.get("name") == record.get("stage")]
        ms = sum(e.get("dur", 0) for e in own) / 1000 if own else _span_ms(events)
        totals[(record["role"], stage)].append(ms)
    return sorted((role, stage, len(v), sum(v)) for (role, stage), v in totals.items())


def artifacts_table(save_path: str) -> list[str]:
    """One line per manifest record."""
    lines = []
    for r in read_manifest(save_path):
        window = f" mb{r['window'][0]}-{r['window'][1]}" if r.get("window") else ""
        where = r["path"] or r.get("source") or r.get("error") or ""
        what = (r.get("stage") or "") + window
        if r["kind"] == "hook":
            what = f"{r['role']}: {r['status']}"
        step = "-" if r["step"] is None else r["step"]
        rank = "-" if r["rank"] is None else r["rank"]
        lines.append(f"{r['kind']:<8} step {step:<3} rank {rank:<3} {what:<26} {where}")
    return lines


def cost_table(save_path: str) -> list[str]:
    """The lines of ``profdsl summary``'s profiling cost table (header, rule, one row per role and
    step), or [] when no record carries a cost."""
    try:
        costs = cost.step_costs(artifacts(save_path))
    except FolderError:
        return []
    if not costs:
        return []
    rows = [["-" if c is None else str(c) for c in cost.cells(item)] for item in costs]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(cost.HEADERS)]
    return ["  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()
            for values in [list(cost.HEADERS), ["-" * w for w in widths], *rows]]
