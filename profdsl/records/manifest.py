"""Manifest records: one JSON object per line of ``save_path/profdsl-manifest.jsonl``, one per
trace, moved file or finish-hook run (:data:`RECORD_CLASSES`, by ``kind``).

Examples:
    >>> from profdsl.records.fields import to_json
    >>> record = TraceRecord(path="a.pt.trace.json.gz", role="actor", step=3, bytes=10)
    >>> data = to_json(record)
    >>> data["kind"], data["schema"], data["status"], "note" in data
    ('trace', 2, 'ok', False)
    >>> parse_record({**data, "colour": "red"}).unknown
    {'colour': 'red'}
    >>> parse_record({**data, "step": "3"})
    Traceback (most recent call last):
    ...
    profdsl.records.fields.RecordError: step must be an integer >= 0 or None, got '3'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

import attrs

from profdsl.config._checks import brief
from profdsl.records.fields import (
    DURATION,
    INTEGER,
    INTEGERS,
    PATH,
    SCHEMA_VERSION,
    TEXT,
    TEXTS,
    VERSION_KEY,
    WINDOW,
    RecordError,
    count,
    counts_of,
    decode,
    dim,
    field,
    nested,
    nested_list,
    unknown_field,
)
from profdsl.records.meta import WindowNote
from profdsl.records.requests import CaptureNote

__all__ = [
    "KINDS",
    "RECORD_CLASSES",
    "RECORD_KEYS",
    "PARTIAL",
    "STATUSES",
    "HookRecord",
    "MovedRecord",
    "NsysRecord",
    "Record",
    "RolloutRecord",
    "TraceRecord",
    "parse_record",
]

#: Every status a record may have. ``ok`` and ``skipped`` are no loss; the others are
#: (:attr:`Record.lost`; so is a status a newer version may add). ``stray``: a rollout engine's
#: file written after its window ended (an SGLang profile that outlived it), moved in but no
#: step's generation. ``truncated``: a trace ended early by the size budget (schema 2).
STATUSES: Final = ("ok", "failed", "incomplete", "skipped", "timeout", "interrupted", "stray", "empty", "truncated")
#: The statuses of a trace whose file exists but holds less than asked (a lost device window, a
#: window ended early): read like ``ok`` ones, reported by ``check``.
PARTIAL: Final = ("incomplete", "truncated")
_MAX_BYTES = 2**63 - 1
_COORDS_DOC = "the writer's coordinate in that parallel dimension, when known"


# -- manifest records ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Record:
    """The fields of every manifest record; :data:`RECORD_KEYS` are written even when None."""

    kind: ClassVar[str] = ""
    path: str | None = field(
        PATH,
        "the file, relative to save_path; null for a file that does not "
        "exist (lost, skipped, not moved in) and for hook records",
        always=True,
    )
    role: str | None = field(TEXT, "the role (the exact label; names hold its sanitized form)", always=True)
    stage: str | None = field(TEXT, "the stage of a discrete trace", always=True)
    step: int | None = field(count(0), "the profiled step", always=True)
    rank: int | None = field(count(0), "the global rank that wrote it", always=True)
    world_size: int | None = field(count(1), "the job's world size", always=True)
    replica: int | None = field(count(0), "the rollout replica", always=True)
    window: tuple[int, int] | None = field(WINDOW, "`[first, last]` mini-batches recorded", always=True)
    host: str | None = field(TEXT, "the host that wrote it (whose clock its timestamps follow)", always=True)
    pid: int | None = field(count(0), "the writing process", always=True)
    bytes: int | None = field(count(0, _MAX_BYTES), "the file's size", always=True)
    status: str = field(
        TEXT,
        "`ok`, `failed`, `incomplete`, `skipped`, `timeout`, `interrupted`, "
        "`stray` (a rollout file written after its window: moved in, no step's "
        "generation), `empty` (a schedule that recorded no window: no trace) or `truncated` "
        "(a trace ended early by the size budget; its file holds the window up to the cut); "
        "an `incomplete` or `truncated` trace with a `path` is a file that holds less than "
        "asked; an empty value reads as `ok`",
        default="ok",
        always=True,
    )
    error: str | None = field(TEXT, "why a `failed` (`timeout`, `interrupted`) one failed")
    reason: str | None = field(TEXT, "why an `incomplete`, `skipped`, `stray`, `empty` or `truncated` one is so")
    intended: str | None = field(
        TEXT, "the file name a `failed` one would have had (schema 1; schema 0 wrote it as `path`)"
    )
    tp: int | None = field(count(0), _COORDS_DOC)
    pp: int | None = field(count(0), _COORDS_DOC)
    dp: int | None = field(count(0), _COORDS_DOC)
    cp: int | None = field(count(0), _COORDS_DOC)
    ep: int | None = field(count(0), _COORDS_DOC)
    schema: int = field(
        count(0),
        "the schema version that wrote it (0: before versions were written)",
        default=SCHEMA_VERSION,
        always=True,
    )
    unknown: Mapping[str, Any] = unknown_field()

    @property
    def lost(self) -> bool:
        """Whether the record is a loss (failed, incomplete, timeout, interrupted, stray,
        truncated: what ``check`` reports)."""
        return self.status not in ("ok", "skipped")

    @property
    def readable(self) -> bool:
        """Whether it names a file to read: ``ok``, or :data:`PARTIAL` with a ``path``."""
        return self.path is not None and (self.status == "ok" or self.status in PARTIAL)

    @property
    def why(self) -> str | None:
        """The error or reason the record gives."""
        return self.error or self.reason

    @property
    def origin(self) -> str | None:
        """Where the file came from (a moved artifact's source), if the record says."""
        return None

    @property
    def where(self) -> str | None:
        """Its file, else where the file was to go or came from, or why there is none."""
        return self.path or self.intended or self.origin or self.why


@attrs.frozen(kw_only=True)
class TraceRecord(Record):
    """A torch trace profdsl wrote (or lost)."""

    kind: ClassVar[str] = "trace"
    part: int | None = field(count(0), "the part of a trace written in pieces")
    roles: tuple[str, ...] | None = field(TEXTS, "every role the trace records (fused roles)")
    config_hash: str | None = field(TEXT, "a hash of the profiler config")
    time_ms: int | None = field(count(0), "when it was written, milliseconds since 1970 (its name's time)")
    parallel_sizes: Mapping[str, int] | None = field(counts_of(dim, 1), "the size of each known parallel dimension")
    windows: tuple[WindowNote, ...] | None = field(
        nested_list(WindowNote), "a continuous step's recorded mini-batch windows, per role and step"
    )
    note: str | None = field(TEXT, "why the session was stopped early, if it was")
    blocked_ms: float | None = field(
        DURATION, "milliseconds the training thread was blocked by the session for this trace"
    )
    export_ms: float | None = field(DURATION, "milliseconds the background export took")
    export_cpu_ms: float | None = field(
        DURATION,
        "CPU milliseconds of the writer thread while it exported this trace (the time it took from the "
        "training's cores)",
    )
    init_ms: float | None = field(
        DURATION,
        "the start of the process's first capture session, which pays the profiler's one-time set-up; "
        "on that session's first trace only (which has no `start_ms`); part of `blocked_ms`",
    )
    start_ms: float | None = field(
        DURATION,
        "the start of its session (but the process's first), on the session's first trace; part of `blocked_ms`",
    )
    stop_ms: float | None = field(
        DURATION,
        "the call that ended its recording (its session's stop, or the schedule step that closed its window), "
        "up to its hand-over to the writer; part of `blocked_ms`",
    )
    wait_ms: float | None = field(
        DURATION,
        "milliseconds the training thread waited for the writer for this trace: a free export slot, and the "
        "trace itself at the last profiled step or close(); part of `blocked_ms`",
    )
    json_bytes: int | None = field(
        count(0, _MAX_BYTES),
        "the trace's size as plain JSON, what a viewer loads (the measure of `TorchOptions.max_trace_mb`)",
    )
    events: str | None = field(PATH, "an `incomplete` trace's events, kept in save_path as plain JSON")
    capture: CaptureNote | None = field(
        nested(CaptureNote),
        "why it was captured, when the plan did not name its step (a request, a slow step; schema 2)",
    )


@attrs.frozen(kw_only=True)
class MovedRecord(Record):
    """An artifact another tool wrote and profdsl moved (or could not move) into save_path."""

    source: str | None = field(TEXT, "where the tool wrote it")
    source_bytes: int | None = field(count(0, _MAX_BYTES), "an `incomplete` source's size when given up")
    source_mtime_ns: int | None = field(INTEGER, "an `incomplete` source's mtime when given up")

    @property
    def origin(self) -> str | None:
        """Where the file came from."""
        return self.source


@attrs.frozen(kw_only=True)
class RolloutRecord(MovedRecord):
    """A rollout engine's file, or an engine call that failed."""

    kind: ClassVar[str] = "rollout"
    node: str | None = field(TEXT, "the Ray node the engine ran on")
    call: str | None = field(TEXT, "the engine call that failed (`start_profile`, `stop_profile`)")


@attrs.frozen(kw_only=True)
class NsysRecord(MovedRecord):
    """An Nsight Systems report."""

    kind: ClassVar[str] = "nsys"


@attrs.frozen(kw_only=True)
class HookRecord(Record):
    """One finish-hook run (no file)."""

    kind: ClassVar[str] = "hook"
    exit_code: int | None = field(INTEGER, "the command's exit code (null when it did not exit)", always=True)
    duration_s: float | None = field(DURATION, "how long it ran, seconds")
    steps: tuple[int, ...] | None = field(INTEGERS, "the profiled steps of the round it ran for")
    blocked_ms: float | None = field(
        DURATION, "milliseconds a training thread waited for it (the last profiled step's stop, or close())"
    )
    capture: CaptureNote | None = field(
        nested(CaptureNote), "the request it ran for (a hook runs once per completed request; schema 2)"
    )
    output: tuple[str, ...] | None = field(
        TEXTS,
        "a run that did not end `ok`: the last lines its command wrote (stdout and stderr; at most 20 "
        "lines and 4096 characters, control characters escaped)",
    )

    @property
    def why(self) -> str | None:
        """The error, and the last line the command wrote."""
        last = f"last output: {self.output[-1]}" if self.output else None
        return "; ".join(part for part in (self.error or self.reason, last) if part) or None


#: The record class of each kind.
RECORD_CLASSES: Final[dict[str, type[Record]]] = {
    cls.kind: cls for cls in (TraceRecord, RolloutRecord, NsysRecord, HookRecord)
}
KINDS: Final = tuple(RECORD_CLASSES)
#: The keys every record carries (None when not applicable); hook records add ``exit_code``.
RECORD_KEYS: Final = ("kind", *(f.name for f in attrs.fields(Record) if f.metadata.get("always")))


def parse_record(value: object) -> Record:
    """The record a manifest line holds.

    A record without ``kind`` is a trace; without ``schema``, version 0. A ``failed`` record of
    version 0 named its intended file in ``path``: it is read into ``intended`` (``path`` null).

    Raises:
        RecordError: ``value`` is not an object, its kind is unknown, or a known field has the
            wrong type or value (the message names the first such field).
    """
    if not isinstance(value, Mapping):
        raise RecordError(f"{brief(value)} is not a JSON object")
    kind = value.get("kind", "trace")
    if not isinstance(kind, str) or kind not in RECORD_CLASSES:
        newer = value.get(VERSION_KEY)
        later = (
            f" (written by schema {newer}, newer than {SCHEMA_VERSION})"
            if isinstance(newer, int) and newer > SCHEMA_VERSION
            else ""
        )
        raise RecordError(f"kind must be one of {', '.join(KINDS)}, got {brief(kind)}{later}")
    record = decode(RECORD_CLASSES[kind], value, skip=frozenset({"kind"}))
    if record.status == "":
        record = attrs.evolve(record, status="ok")
    if VERSION_KEY not in value:
        record = attrs.evolve(record, schema=0)
        if record.status == "failed" and record.path is not None and record.intended is None:
            record = attrs.evolve(record, path=None, intended=record.path)
    return record
