"""What the demo prints at the end: where every artifact went, where each step went (the stage-time
model, as ``profdsl summary`` shows it), and what profiling itself cost; all from one read of the
run's manifest (:func:`read_run`)."""

from __future__ import annotations

import statistics

from profdsl._cli.common import table
from profdsl._cli.summary import cost_lines, step_view
from profdsl.analysis import _cost as cost
from profdsl.analysis._catalog import Artifact, FolderError, catalog
from profdsl.analysis._load import load_model
from profdsl.analysis._model import StageModel
from profdsl.collect.metrics_log import read_log
from profdsl.core._units import ms_text
from profdsl.records.manifest import HookRecord, Record, TraceRecord

__all__ = [
    "artifacts_table",
    "auto_captures",
    "cost_table",
    "read_run",
    "slow_step_table",
    "stage_tables",
    "traced_totals",
]


def read_run(save_path: str) -> list[Artifact] | None:
    """The run's artifacts, from one read of its manifest; None when the folder holds nothing to read."""
    try:
        return catalog(save_path).artifacts
    except FolderError:
        return None


def stage_tables(
    save_path: str, artifacts: list[Artifact] | None
) -> tuple[list[str], list[tuple[str, str, int, float]]]:
    """From one read of the run's traces (what ``profdsl summary`` reads): the lines of its step
    view (each profiled step's roles and stages, mini-batches under the stage they ran in) and
    :func:`traced_totals`; nothing when the folder holds nothing to read."""
    if artifacts is None:
        return [], []
    model = load_model(save_path, artifacts, [])
    return step_view(model).splitlines(), traced_totals(model)


def traced_totals(model: StageModel) -> list[tuple[str, str, int, float]]:
    """(role, stage path, entries, total ms) per role and stage path over the run's traces, the
    path named as the always-on metrics name it (``update_actor/mini_batch``), to set beside them."""
    totals: dict[tuple[str, str], list[float]] = {}
    for node in model.nodes:
        key = (node.role, node.metric_path)
        into = totals.setdefault(key, [0, 0.0])
        into[0] += node.count
        into[1] += node.total_us / 1000
    return sorted((role, path, int(count), total) for (role, path), (count, total) in totals.items())


def artifacts_table(records: list[Record]) -> list[str]:
    """One line per manifest record."""
    lines = []
    for r in records:
        window = f" mb{r.window[0]}-{r.window[1]}" if r.window else ""
        what = f"{r.role}: {r.status}" if isinstance(r, HookRecord) else (r.stage or "") + window
        where = r.where or ""
        step = "-" if r.step is None else r.step
        rank = "-" if r.rank is None else r.rank
        lines.append(f"{r.kind:<8} step {step:<3} rank {rank:<3} {what:<26} {where}")
    return lines


def cost_table(artifacts: list[Artifact]) -> list[str]:
    """The lines of ``profdsl summary``'s profiling cost table (header, rule, one row per role and
    step, then, after an empty line, what the parts are when it shows them), or [] when no record
    carries a cost."""
    costs = cost.step_costs(artifacts)
    return cost_lines(costs) if costs else []


def auto_captures(records: list[Record]) -> list[str]:
    """One line per trace an automatic capture wrote: its step, rank and roles, and why."""
    found: dict[tuple[int, int, str], set[str]] = {}
    for r in records:
        if isinstance(r, TraceRecord) and r.capture is not None and r.capture.source == "auto":
            roles = found.setdefault((r.step or 0, r.rank or 0, r.capture.reason or ""), set())
            roles.update(r.roles or [r.role or "?"])
    return [
        f"step {step} rank {rank} ({', '.join(sorted(roles))}): {reason}"
        for (step, rank, reason), roles in sorted(found.items())
    ]


def slow_step_table(save_path: str, step: int, rank: int) -> list[str]:
    """Per role and stage path of ``rank``: its time at ``step`` against the median of its other
    untraced steps (from the metrics log), sorted by the absolute change; [] without a log."""
    lines, _ = read_log(save_path)
    mine = [line for line in lines if line.rank == rank and line.stages]
    at = {
        (line.role, path): stage.total_s or 0.0
        for line in mine
        if line.step == step
        for path, stage in (line.stages or {}).items()
    }
    rows = []
    for (role, path), seconds in at.items():
        others = [
            (line.stages or {})[path].total_s or 0.0
            for line in mine
            if line.role == role and line.step != step and not line.traced and path in (line.stages or {})
        ]
        if not others:
            continue
        median = statistics.median(others)
        ratio = f"{seconds / median:.1f}x" if median > 0 else "-"
        change = seconds - median
        figures = [ms_text(seconds * 1000, 1), ms_text(median * 1000, 1), ms_text(change * 1000, 1, signed=True)]
        cells = [str(role), path, *figures, ratio]
        rows.append((abs(change), [*cells, str(len(others))]))
    if not rows:
        return []
    rows.sort(key=lambda row: (-row[0], row[1][0], row[1][1]))
    headers = ["role", "stage", f"step {step} ms", "median ms", "change ms", "ratio", "n"]
    return table(headers, [row for _, row in rows], left=2).splitlines()  # names left-aligned, figures right-aligned
