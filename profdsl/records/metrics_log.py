"""The metrics log's lines (``Metrics(log=True)``: ``save_path/profdsl-metrics-*.jsonl``): one
role's step on one rank per line, with each stage path's timing.

Examples:
    >>> line = parse_metrics_line({"role": "actor", "step": 1, "stages": {"gen": {"total_s": 0.5}}})
    >>> line.stages["gen"].total_s, line.rank
    (0.5, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from profdsl.records.fields import (
    DURATION,
    FLAG,
    SCHEMA_VERSION,
    TEXT,
    RecordError,
    count,
    decode,
    field,
    nested_map,
    seconds_map,
    spans_map,
    unknown_field,
)

__all__ = ["MetricsLine", "StageLine", "parse_metrics_line"]


@attrs.frozen(kw_only=True)
class StageLine:
    """One stage path of one step in the metrics log (as ``StageTiming``)."""

    total_s: float | None = field(DURATION, "seconds inside the stage this step, all its entries", always=True)
    self_s: float | None = field(DURATION, "of which not inside a nested stage", always=True)
    count: int | None = field(count(0), "its entries this step", always=True)
    device_s: float | None = field(DURATION, "CUDA time between entry and exit (CUDA only)")
    kind: str | None = field(TEXT, "its kind of work, declared or by its name (`generation`, `update`, ...)")
    unknown: Mapping[str, Any] = unknown_field()


@attrs.frozen(kw_only=True)
class MetricsLine:
    """One role's step on one rank in the metrics log (``Metrics(log=True)``:
    ``save_path/profdsl-metrics-*.jsonl``, one JSON object per line)."""

    role: str | None = field(TEXT, "the role", always=True)
    rank: int | None = field(count(0), "the global rank", always=True)
    world_size: int | None = field(count(1), "the job's world size", always=True)
    step: int | None = field(count(0), "the step", always=True)
    wall_s: float | None = field(DURATION, "the step's wall time, start() to stop()", always=True)
    stages: Mapping[str, StageLine] | None = field(
        nested_map(StageLine), "per stage path (`/` between nested stages), its timing", always=True
    )
    overflow: int | None = field(count(0), "entries of stage paths beyond `Metrics.max_stages`")
    ledger: Mapping[str, float] | None = field(
        seconds_map,
        "the step's wall time split: seconds per kind of work, `overhead` and `outside` (they add up to `wall_s`)",
    )
    ledger_beside: Mapping[str, float] | None = field(
        seconds_map, "per kind, its stage time that ran beside the stage its instant went to (not in `ledger`'s sum)"
    )
    ledger_why: str | None = field(TEXT, "why the step has no `ledger`")
    ledger_spans: Mapping[str, tuple[tuple[float, float], ...]] | None = field(
        spans_map,
        "per kind, `[[start, end], ...]`: where it worked, seconds from `began_s` (absent beyond 256 intervals)",
    )
    ledger_engines_s: float | None = field(
        DURATION,
        "of `ledger`'s `overhead`, the seconds the step waited on rollout engines' profilers "
        "(`rollout_window`: their start and stop, moving their traces)",
    )
    ledger_waits_s: float | None = field(
        DURATION,
        "profiling's own waits inside the step as the metrics timed them (a stage capture's start and stop, "
        "a scheduled stage's schedule steps, rollout engines' profilers): `ledger`'s `overhead` before any cap; "
        "a traced step's ledger takes its overhead from it (absent in logs before it: from its traces' `blocked_ms`)",
    )
    ledger_device: Mapping[str, float] | None = field(
        seconds_map,
        "with `Metrics(device_time=True)` on CUDA: the device span of the step's stages (from the first one's "
        "entry to the last one's exit, on the device) split: seconds per kind of work and `outside` (no stage's work)",
    )
    began_s: float | None = field(DURATION, "when the step began, seconds since 1970 (places it beside other ranks')")
    traced: bool | None = field(FLAG, "whether the step was traced on this rank (its times include profiling's cost)")
    host: str | None = field(TEXT, "the host")
    pid: int | None = field(count(0), "the process")
    time_ms: int | None = field(count(0), "when the step ended, milliseconds since 1970")
    schema: int = field(count(0), "the schema version that wrote it", default=SCHEMA_VERSION, always=True)
    unknown: Mapping[str, Any] = unknown_field()


def parse_metrics_line(value: object) -> MetricsLine:
    """One line of a metrics log, parsed from JSON.

    Raises:
        RecordError: not an object, or a field has the wrong type or value (the message names
            it), or ``role``, ``step`` or ``stages`` is missing.
    """
    line = decode(MetricsLine, value)
    for name in ("role", "step", "stages"):
        if getattr(line, name) is None:
            raise RecordError(f"{name} is required")
    return line
