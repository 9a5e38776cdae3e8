"""The ``profdsl`` metadata of a trace (who wrote it, which regions it holds), and the other
top-level keys profdsl reads and writes in a trace's header.

Examples:
    >>> from profdsl.records.fields import to_json
    >>> meta = parse_meta({"role": "actor", "step": 3, "regions": {"stages": ["update_actor"]}})
    >>> meta.regions.stages, trace_header(to_json(meta), distributed=True)[DISTRIBUTED_KEY]["rank"]
    (('update_actor',), None)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from profdsl.config._checks import brief
from profdsl.records.fields import (
    OBJECT,
    OBJECTS,
    SCHEMA_VERSION,
    TEXT,
    TEXTS,
    WINDOW,
    RecordError,
    any_name,
    count,
    counts_of,
    decode,
    dim,
    field,
    nested,
    nested_list,
    path_counts,
    text_map,
    unknown_field,
)
from profdsl.records.requests import CaptureNote

__all__ = [
    "BASE_TIME_KEY",
    "DISTRIBUTED_KEY",
    "META_KEY",
    "ExportMeta",
    "Regions",
    "TraceMeta",
    "WindowNote",
    "base_time_ns",
    "distributed_info",
    "header_meta",
    "parse_meta",
    "trace_header",
]

#: The top-level trace keys profdsl writes: its own metadata, torch's rank block (written when
#: torch does not), and the clock origin torch writes (and ``merge`` / ``export`` write again).
META_KEY: Final = "profdsl"
DISTRIBUTED_KEY: Final = "distributedInfo"
BASE_TIME_KEY: Final = "baseTimeNanoseconds"
_MAX_BASE_NS = 2**63 - 1


@attrs.frozen(kw_only=True)
class WindowNote:
    """One mini-batch window a continuous step recorded (a trace record's and metadata's ``windows``)."""

    role: str | None = field(TEXT, "the role whose mini-batches these are", always=True)
    step: int | None = field(count(0), "its step", always=True)
    window: tuple[int, int] | None = field(WINDOW, "`[first, last]` mini-batch indices", always=True)
    unknown: Mapping[str, Any] = unknown_field()


@attrs.frozen(kw_only=True)
class Regions:
    """The profdsl regions a trace holds (``profdsl.regions``, read by :mod:`profdsl.analysis._regions`)."""

    stages: tuple[str, ...] | None = field(TEXTS, "stage labels opened while it recorded", always=True)
    mini_batches: tuple[str, ...] | None = field(
        TEXTS, "mini-batch base labels (a region is the base and its index)", always=True
    )
    continued: Mapping[str, int] | None = field(
        counts_of(any_name, 0), "per region name, its events that continue an entry begun earlier", always=True
    )
    continued_at: tuple[tuple[tuple[str, ...], int], ...] | None = field(
        path_counts,
        "`[[labels, count], ...]`: the same per path of labels (the regions open around "
        "it on its thread, then its own), so that a label at several paths is counted where it sits",
    )
    kinds: Mapping[str, str] | None = field(
        text_map, "per stage label, the kind of work it declared (`generation`, `update`, ...: the step ledger's)"
    )
    unknown: Mapping[str, Any] = unknown_field()


@attrs.frozen(kw_only=True)
class ExportMeta:
    """What an ``export --hta`` file holds (``profdsl.export``)."""

    format: str | None = field(TEXT, "`hta`", always=True)
    role: str | None = field(TEXT, "the stage's role", always=True)
    stage: str | None = field(TEXT, "the exported stage", always=True)
    step: int | None = field(count(0), "its step", always=True)
    rank: int | None = field(count(0), "the rank of this file", always=True)
    iterations: str | None = field(TEXT, "what an iteration is: `mini_batch` or `entry`", always=True)
    traces: tuple[str, ...] | None = field(TEXTS, "the input traces", always=True)
    unknown: Mapping[str, Any] = unknown_field()


@attrs.frozen(kw_only=True)
class TraceMeta:
    """A trace's ``profdsl`` metadata: who wrote it and which regions it holds; ``merge`` and
    ``export --hta`` outputs carry their own fields here instead (and null for the ``always``
    ones, which every trace profdsl captured carries)."""

    role: str | None = field(TEXT, "the role that owns the session", always=True)
    roles: tuple[str, ...] | None = field(TEXTS, "every role it records (fused roles)")
    stage: str | None = field(TEXT, "a discrete trace's stage", always=True)
    step: int | None = field(count(0), "the step", always=True)
    rank: int | None = field(count(0), "the global rank", always=True)
    world_size: int | None = field(count(1), "the world size", always=True)
    window: tuple[int, int] | None = field(WINDOW, "a scheduled trace's mini-batch window", always=True)
    windows: tuple[WindowNote, ...] | None = field(nested_list(WindowNote), "a continuous step's recorded windows")
    config_hash: str | None = field(TEXT, "a hash of the profiler config")
    host: str | None = field(TEXT, "the writing host")
    pid: int | None = field(count(0), "the writing process")
    regions: Regions | None = field(nested(Regions), "the profdsl regions it holds")
    parallel: Mapping[str, int] | None = field(counts_of(dim, 0), "the writer's parallel coordinates")
    parallel_sizes: Mapping[str, int] | None = field(counts_of(dim, 1), "the size of each dimension")
    export: ExportMeta | None = field(nested(ExportMeta), "an `export --hta` file: what it exports")
    merged_traces: int | None = field(count(0), "a `merge` output: how many traces it holds")
    alignment: Mapping[str, Any] | None = field(OBJECT, "a `merge` output: how its rows share one clock")
    stages: tuple[dict[str, Any], ...] | None = field(OBJECTS, "a `merge` output: the stage-time model's rows")
    capture: CaptureNote | None = field(nested(CaptureNote), "why it was captured, when the plan did not name its step")
    schema: int = field(count(0), "the schema version that wrote it", default=SCHEMA_VERSION, always=True)
    unknown: Mapping[str, Any] = unknown_field()


def distributed_info(rank: int | None, world_size: int | None, **more: Any) -> dict[str, Any]:
    """The ``distributedInfo`` block profdsl writes where torch does not (HTA reads the rank)."""
    return {"rank": rank, "world_size": world_size, **more}


def trace_header(meta: Mapping[str, Any], *, distributed: bool) -> dict[str, Any]:
    """The top-level metadata of a trace profdsl writes: ``meta`` (a :class:`TraceMeta`'s JSON)
    as ``profdsl``, and with ``distributed`` a ``distributedInfo`` from its rank and world size
    (where torch writes none: no process group)."""
    header: dict[str, Any] = {META_KEY: dict(meta)}
    if distributed:
        header[DISTRIBUTED_KEY] = distributed_info(meta.get("rank"), meta.get("world_size"), backend=None)
    return header


def parse_meta(value: object) -> TraceMeta:
    """A trace's ``profdsl`` metadata.

    Raises:
        RecordError: it is not an object, or a known field has the wrong type or value.
    """
    if not isinstance(value, Mapping):
        raise RecordError(f"{META_KEY} metadata is {brief(value)}, not an object")
    return decode(TraceMeta, value, f"{META_KEY}.")


def header_meta(header: Mapping[str, Any]) -> TraceMeta | None:
    """The ``profdsl`` metadata of a trace header, or None when it has none (an engine's trace,
    torch's own).

    Raises:
        RecordError: as :func:`parse_meta`.
    """
    return parse_meta(header[META_KEY]) if META_KEY in header else None


def base_time_ns(header: Mapping[str, Any]) -> int:
    """A trace header's ``baseTimeNanoseconds`` (0 when absent).

    Raises:
        RecordError: it is not a whole number of nanoseconds >= 0.
    """
    value = header.get(BASE_TIME_KEY, 0)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        and not _whole_decimal(value)
        or not 0 <= value <= _MAX_BASE_NS
    ):
        raise RecordError(f"{BASE_TIME_KEY} is {brief(value)}, not a number of nanoseconds >= 0")
    return int(value)


def _whole_decimal(value: object) -> bool:
    from decimal import Decimal

    return isinstance(value, Decimal) and value == value.to_integral_value()
