"""The schema of what profdsl writes: manifest records and the ``profdsl`` metadata of a trace.

This module is the one place their keys are spelled. Writers build the attrs classes below
(an unknown field is a ``TypeError`` at construction) and write them with :func:`to_json`;
readers turn JSON back into them with :func:`parse_record` and :func:`parse_meta`, which check
every known field's type and value and raise :class:`RecordError` naming the first wrong one.

Every record and trace carries the ``schema`` version that wrote it. Fields a reader does not
know (written by a newer profdsl) are kept in ``unknown``, written back unchanged and shown by
``profdsl ls``; nothing is dropped. A record of this version spells each key as the class's
field of the same name; ``docs/records.md`` holds :func:`~profdsl.records.tables.field_tables`.

Examples:
    >>> record = TraceRecord(path="a.pt.trace.json.gz", role="actor", step=3, bytes=10)
    >>> data = to_json(record)
    >>> data["kind"], data["schema"], data["status"], "note" in data
    ('trace', 2, 'ok', False)
    >>> parse_record({**data, "colour": "red"}).unknown
    {'colour': 'red'}
    >>> parse_record({**data, "step": "3"})
    Traceback (most recent call last):
    ...
    profdsl.records.schema.RecordError: step must be an integer >= 0 or None, got '3'
"""

from __future__ import annotations

import itertools
import operator
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar

import attrs

from profdsl.config.checks import MAX_WIDE_INDEX, is_int, require_int
from profdsl.config.parallel import DIMS
from profdsl.config.selector import parse_selector
from profdsl.errors import ConfigError

__all__ = [
    "BASE_TIME_KEY",
    "DISTRIBUTED_KEY",
    "KINDS",
    "MAX_REQUEST_STEPS",
    "META_KEY",
    "RECORD_CLASSES",
    "RECORD_KEYS",
    "SCHEMA_VERSION",
    "SOURCES",
    "STATUSES",
    "VERSION_KEY",
    "CaptureNote",
    "CaptureRequest",
    "ExportMeta",
    "HookRecord",
    "MetricsLine",
    "MovedRecord",
    "NsysRecord",
    "Record",
    "RecordError",
    "Regions",
    "RolloutRecord",
    "StageLine",
    "TraceMeta",
    "TraceRecord",
    "WindowNote",
    "base_time_ns",
    "brief",
    "ask",
    "distributed_info",
    "header_meta",
    "is_relative",
    "parse_meta",
    "parse_metrics_line",
    "parse_record",
    "parse_request",
    "to_json",
    "trace_header",
]

#: The version of this schema, written into every record and trace. Readers take any version:
#: the fields they know are checked, the others kept. 2: ``capture`` (on-demand and automatic
#: captures), capture requests and the metrics log.
SCHEMA_VERSION: Final = 2
#: The key that holds it.
VERSION_KEY: Final = "schema"
#: The top-level trace keys profdsl writes: its own metadata, torch's rank block (written when
#: torch does not), and the clock origin torch writes (and ``merge`` / ``export`` write again).
META_KEY: Final = "profdsl"
DISTRIBUTED_KEY: Final = "distributedInfo"
BASE_TIME_KEY: Final = "baseTimeNanoseconds"
#: Every status a record may have. ``ok`` and ``skipped`` are no loss; the others are
#: (:attr:`Record.lost`; so is a status a newer version may add). ``stray``: a rollout engine's
#: file written after its window ended (an SGLang profile that outlived it), moved in but no
#: step's generation.
STATUSES: Final = ("ok", "failed", "incomplete", "skipped", "timeout", "interrupted", "stray", "empty")
_MAX_BYTES = 2**63 - 1
_MAX_BASE_NS = 2**63 - 1
#: What may ask for a capture the plan did not name: a request file (``profdsl trigger``), a Ray
#: trainer's driver, the metrics endpoint's ``POST /profile``, ``Profiler.request`` in the
#: process itself, or a slow step (``ProfilerConfig.auto``).
SOURCES: Final = ("file", "ray", "http", "api", "auto")
#: The most steps one capture request may ask for, whatever the config allows.
MAX_REQUEST_STEPS: Final = 10_000
_MAX_TEXT = 1000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,79}")

T = TypeVar("T")
Check = Callable[[str, Any], Any]


class RecordError(ValueError):
    """A manifest record or trace metadata that does not fit the schema (the message names the
    field and the value)."""


def brief(value: object) -> str:
    """``repr(value)`` cut to 40 characters, for one-line messages."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def is_relative(path: str) -> bool:
    """True for a path inside ``save_path``: not empty, not absolute, no ``..``, no NUL."""
    return bool(path) and "\0" not in path and not os.path.isabs(path) and ".." not in Path(path).parts


# -- the checks a reader applies to each field (value in, typed value out) ----------------------


def _text(key: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise RecordError(f"{key} must be a string or null, got {brief(value)}")


def _count(low: int, high: int | None = None) -> Check:
    def check(key: str, value: Any) -> int | None:
        try:
            return require_int(key, value, low, high, optional=True)
        except ConfigError as exc:
            raise RecordError(str(exc)) from None

    return check


def _integer(key: str, value: Any) -> int | None:
    if value is None or is_int(value):
        return value  # type: ignore[no-any-return]
    raise RecordError(f"{key} must be an integer or null, got {brief(value)}")


def _duration(key: str, value: Any) -> float | None:
    """A finite number >= 0 (``bool``, NaN, infinities and ints too large for a float refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= sys.float_info.max:
        raise RecordError(f"{key} must be a finite number >= 0 or null, got {brief(value)}")
    return float(value)


def _path(key: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and is_relative(value)):
        return value
    raise RecordError(f"{key} must be a file name relative to the folder or null, got {brief(value)}")


def _window(key: str, value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        raise RecordError(f"{key} must be [first, last] or null, got {brief(value)}")
    first, last = (_count(0)(key, v) for v in value)
    if first is None or last is None:
        raise RecordError(f"{key} must be [first, last] or null, got {brief(value)}")
    return first, last


def _texts(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RecordError(f"{key} must be a list of strings or null, got {brief(value)}")


def _integers(key: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(is_int(v) for v in value):
        return tuple(value)
    raise RecordError(f"{key} must be a list of integers or null, got {brief(value)}")


def _counts_of(key_check: Check, low: int) -> Check:
    """A mapping of names (``key_check``) to integers >= ``low``."""

    def check(key: str, value: Any) -> dict[str, int] | None:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise RecordError(f"{key} must be an object or null, got {brief(value)}")
        for name, count in value.items():
            key_check(key, name)
            _count(low)(f"{key}.{name}", count)
        return dict(value)

    return check


def _path_counts(key: str, value: Any) -> tuple[tuple[tuple[str, ...], int], ...] | None:
    """``[[[label, ...], count], ...]``: the items of that shape (labels not empty, count > 0),
    summed per path; items of another shape are left out (a reader's count falls back to the
    labels' ``continued``)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise RecordError(f"{key} must be a list of [labels, count] or null, got {brief(value)}")
    found: dict[tuple[str, ...], int] = {}
    for item in value:
        if (
            isinstance(item, (list, tuple))
            and len(item) == 2
            and type(item[1]) is int
            and item[1] > 0
            and isinstance(item[0], (list, tuple))
            and item[0]
            and all(isinstance(v, str) for v in item[0])
        ):
            path = tuple(item[0])
            found[path] = found.get(path, 0) + item[1]
    return tuple(sorted(found.items()))


def _dim(key: str, name: Any) -> None:
    if name not in DIMS:
        raise RecordError(f"{key} names a parallel dimension ({', '.join(DIMS)}), got {brief(name)}")


def _any_name(key: str, name: Any) -> None:
    if not isinstance(name, str):
        raise RecordError(f"{key} must have string keys, got {brief(name)}")


def _json_object(key: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    raise RecordError(f"{key} must be an object or null, got {brief(value)}")


def _objects(key: str, value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value):
        return tuple(dict(v) for v in value)
    raise RecordError(f"{key} must be a list of objects or null, got {brief(value)}")


def _flag(key: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise RecordError(f"{key} must be true, false or null, got {brief(value)}")


def _short_text(key: str, value: Any) -> str | None:
    text = _text(key, value)
    if text is not None and len(text) > _MAX_TEXT:
        raise RecordError(f"{key} must be at most {_MAX_TEXT} characters, got {len(text)}")
    return text


def _request_id(key: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and _ID.fullmatch(value)):
        return value
    raise RecordError(f"{key} must be 1-80 letters, digits, '.', '_', ':' or '-' (not first), got {brief(value)}")


def _source(key: str, value: Any) -> str | None:
    if value is None or value in SOURCES:
        return value  # type: ignore[no-any-return]
    raise RecordError(f"{key} must be one of {', '.join(SOURCES)}, got {brief(value)}")


def _rank_choice(key: str, value: Any) -> tuple[int, ...] | str | None:
    """``"all"``, a rank selector (its canonical spelling) or a non-empty list of ranks."""
    if value is None or value == "all":
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        try:
            return parse_selector(value, where=key).format()
        except ConfigError as exc:
            raise RecordError(str(exc)) from None
    if isinstance(value, (list, tuple)) and value:
        for i, rank in enumerate(value):
            if not is_int(rank) or not 0 <= rank < MAX_WIDE_INDEX:
                raise RecordError(f"{key}[{i}] must be a rank (an integer >= 0), got {brief(rank)}")
        return tuple(sorted(set(value)))
    raise RecordError(f"{key} must be 'all', a rank selector or a non-empty list of ranks, got {brief(value)}")


def _role_names(key: str, value: Any) -> tuple[str, ...] | None:
    names = _texts(key, value)
    if names is not None and (not names or not all(names)):
        raise RecordError(f"{key} must be a non-empty list of role names or null, got {brief(value)}")
    return names


def _when(key: str, value: Any) -> float | None:
    seconds = _duration(key, value)
    if seconds is not None and seconds > 1e11:
        raise RecordError(f"{key} must be seconds since 1970, got {brief(value)}")
    return seconds


def _nested_map(cls: type[T]) -> Check:
    """A mapping of names to objects of ``cls``."""

    def check(key: str, value: Any) -> dict[str, T] | None:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise RecordError(f"{key} must be an object or null, got {brief(value)}")
        out = {}
        for name, item in value.items():
            _any_name(key, name)
            out[name] = _decode(cls, item, f"{key}.{name}.")
        return out

    return check


def _nested(cls: type[T]) -> Check:
    def check(key: str, value: Any) -> T | None:
        return None if value is None else _decode(cls, value, f"{key}.")

    return check


def _nested_list(cls: type[T]) -> Check:
    def check(key: str, value: Any) -> tuple[T, ...] | None:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{key} must be a list or null, got {brief(value)}")
        return tuple(_decode(cls, item, f"{key}[{i}].") for i, item in enumerate(value))

    return check


def _field(check: Check, doc: str, *, default: Any = None, always: bool = False) -> Any:
    """A schema field: how a reader checks it, what it means (``docs/records.md``), and whether
    it is written when None (``always``: the keys every record carries)."""
    return attrs.field(default=default, metadata={"check": check, "doc": doc, "always": always})


def _unknown() -> Any:
    return attrs.field(factory=dict, eq=False, repr=False, metadata={"unknown": True})


# -- shared pieces ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class WindowNote:
    """One mini-batch window a continuous step recorded (a trace record's and metadata's ``windows``)."""

    role: str | None = _field(_text, "the role whose mini-batches these are", always=True)
    step: int | None = _field(_count(0), "its step", always=True)
    window: tuple[int, int] | None = _field(_window, "`[first, last]` mini-batch indices", always=True)
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class Regions:
    """The profdsl regions a trace holds (``profdsl.regions``, read by :mod:`profdsl.analysis.regions`)."""

    stages: tuple[str, ...] | None = _field(_texts, "stage labels opened while it recorded", always=True)
    mini_batches: tuple[str, ...] | None = _field(
        _texts, "mini-batch base labels (a region is the base and its index)", always=True
    )
    continued: Mapping[str, int] | None = _field(
        _counts_of(_any_name, 0), "per region name, its events that continue an entry begun earlier", always=True
    )
    continued_at: tuple[tuple[tuple[str, ...], int], ...] | None = _field(
        _path_counts,
        "`[[labels, count], ...]`: the same per path of labels (the regions open around "
        "it on its thread, then its own), so that a label at several paths is counted where it sits",
    )
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class CaptureNote:
    """Why a trace was captured (or a hook ran) when the plan did not name its step: a capture
    request or a slow step (a trace record's, hook record's and metadata's ``capture``)."""

    source: str | None = _field(
        _source,
        "what asked: `file` (`profdsl trigger`), `ray` (the driver's "
        "`request()`), `http` (`POST /profile`), `api` (`Profiler.request`) or "
        "`auto` (a slow step)",
        always=True,
    )
    request: str | None = _field(_request_id, "the request's id (one hook run per request)", always=True)
    steps: tuple[int, int] | None = _field(_window, "`[first, last]`: the steps it traces on this rank", always=True)
    reason: str | None = _field(
        _short_text, "what the asker said, or why a step was slow (`update_actor took 2.3x the median of steps 80-99`)"
    )
    unknown: Mapping[str, Any] = _unknown()


_COORDS_DOC = "the writer's coordinate in that parallel dimension, when known"


# -- manifest records ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Record:
    """The fields of every manifest record; :data:`RECORD_KEYS` are written even when None."""

    kind: ClassVar[str] = ""
    path: str | None = _field(
        _path,
        "the file, relative to save_path; null for a file that does not "
        "exist (lost, skipped, not moved in) and for hook records",
        always=True,
    )
    role: str | None = _field(_text, "the role (the exact label; names hold its sanitized form)", always=True)
    stage: str | None = _field(_text, "the stage of a discrete trace", always=True)
    step: int | None = _field(_count(0), "the profiled step", always=True)
    rank: int | None = _field(_count(0), "the global rank that wrote it", always=True)
    world_size: int | None = _field(_count(1), "the job's world size", always=True)
    replica: int | None = _field(_count(0), "the rollout replica", always=True)
    window: tuple[int, int] | None = _field(_window, "`[first, last]` mini-batches recorded", always=True)
    host: str | None = _field(_text, "the host that wrote it (whose clock its timestamps follow)", always=True)
    pid: int | None = _field(_count(0), "the writing process", always=True)
    bytes: int | None = _field(_count(0, _MAX_BYTES), "the file's size", always=True)
    status: str = _field(
        _text,
        "`ok`, `failed`, `incomplete`, `skipped`, `timeout`, `interrupted`, "
        "`stray` (a rollout file written after its window: moved in, no step's "
        "generation) or `empty` (a schedule that recorded no window: no trace); an empty "
        "value reads as `ok`",
        default="ok",
        always=True,
    )
    error: str | None = _field(_text, "why a `failed` (`timeout`, `interrupted`) one failed")
    reason: str | None = _field(_text, "why an `incomplete`, `skipped`, `stray` or `empty` one is so")
    intended: str | None = _field(
        _text, "the file name a `failed` one would have had (schema 1; schema 0 wrote it as `path`)"
    )
    tp: int | None = _field(_count(0), _COORDS_DOC)
    pp: int | None = _field(_count(0), _COORDS_DOC)
    dp: int | None = _field(_count(0), _COORDS_DOC)
    cp: int | None = _field(_count(0), _COORDS_DOC)
    ep: int | None = _field(_count(0), _COORDS_DOC)
    schema: int = _field(
        _count(0),
        "the schema version that wrote it (0: before versions were written)",
        default=SCHEMA_VERSION,
        always=True,
    )
    unknown: Mapping[str, Any] = _unknown()

    @property
    def lost(self) -> bool:
        """Whether the record is a loss (failed, incomplete, timeout, interrupted, stray: what
        ``check`` reports)."""
        return self.status not in ("ok", "skipped")

    @property
    def why(self) -> str | None:
        """The error or reason the record gives."""
        return self.error or self.reason

    @property
    def origin(self) -> str | None:
        """Where the file came from (a moved artifact's source), if the record says."""
        return None

    def parallel(self) -> tuple[tuple[str, int], ...]:
        """The known parallel coordinates, in the order tp, pp, dp, cp, ep."""
        return tuple((d, v) for d in DIMS if (v := getattr(self, d)) is not None)


@attrs.frozen(kw_only=True)
class TraceRecord(Record):
    """A torch trace profdsl wrote (or lost)."""

    kind: ClassVar[str] = "trace"
    part: int | None = _field(_count(0), "the part of a trace written in pieces")
    roles: tuple[str, ...] | None = _field(_texts, "every role the trace records (fused roles)")
    config_hash: str | None = _field(_text, "a hash of the profiler config")
    time_ms: int | None = _field(_count(0), "when it was written, milliseconds since 1970 (its name's time)")
    parallel_sizes: Mapping[str, int] | None = _field(_counts_of(_dim, 1), "the size of each known parallel dimension")
    windows: tuple[WindowNote, ...] | None = _field(
        _nested_list(WindowNote), "a continuous step's recorded mini-batch windows, per role and step"
    )
    note: str | None = _field(_text, "why the session was stopped early, if it was")
    blocked_ms: float | None = _field(
        _duration, "milliseconds the training thread was blocked by the session for this trace"
    )
    export_ms: float | None = _field(_duration, "milliseconds the background export took")
    export_cpu_ms: float | None = _field(
        _duration,
        "CPU milliseconds of the writer thread while it exported this trace (the time it took from the "
        "training's cores)",
    )
    init_ms: float | None = _field(
        _duration,
        "the start of the process's first capture session, which pays the profiler's one-time set-up; "
        "on that session's first trace only (which has no `start_ms`); part of `blocked_ms`",
    )
    start_ms: float | None = _field(
        _duration,
        "the start of its session (but the process's first), on the session's first trace; part of `blocked_ms`",
    )
    stop_ms: float | None = _field(
        _duration,
        "the call that ended its recording (its session's stop, or the schedule step that closed its window), "
        "up to its hand-over to the writer; part of `blocked_ms`",
    )
    wait_ms: float | None = _field(
        _duration,
        "milliseconds the training thread waited for the writer for this trace: a free export slot, and the "
        "trace itself at the last profiled step or close(); part of `blocked_ms`",
    )
    events: str | None = _field(_path, "an `incomplete` trace's events, kept in save_path as plain JSON")
    capture: CaptureNote | None = _field(
        _nested(CaptureNote),
        "why it was captured, when the plan did not name its step (a request, a slow step; schema 2)",
    )


@attrs.frozen(kw_only=True)
class MovedRecord(Record):
    """An artifact another tool wrote and profdsl moved (or could not move) into save_path."""

    source: str | None = _field(_text, "where the tool wrote it")
    source_bytes: int | None = _field(_count(0, _MAX_BYTES), "an `incomplete` source's size when given up")
    source_mtime_ns: int | None = _field(_integer, "an `incomplete` source's mtime when given up")

    @property
    def origin(self) -> str | None:
        """Where the file came from."""
        return self.source


@attrs.frozen(kw_only=True)
class RolloutRecord(MovedRecord):
    """A rollout engine's file, or an engine call that failed."""

    kind: ClassVar[str] = "rollout"
    node: str | None = _field(_text, "the Ray node the engine ran on")
    call: str | None = _field(_text, "the engine call that failed (`start_profile`, `stop_profile`)")


@attrs.frozen(kw_only=True)
class NsysRecord(MovedRecord):
    """An Nsight Systems report."""

    kind: ClassVar[str] = "nsys"


@attrs.frozen(kw_only=True)
class HookRecord(Record):
    """One finish-hook run (no file)."""

    kind: ClassVar[str] = "hook"
    exit_code: int | None = _field(_integer, "the command's exit code (null when it did not exit)", always=True)
    duration_s: float | None = _field(_duration, "how long it ran, seconds")
    steps: tuple[int, ...] | None = _field(_integers, "the profiled steps of the round it ran for")
    blocked_ms: float | None = _field(
        _duration, "milliseconds a training thread waited for it (the last profiled step's stop, or close())"
    )
    capture: CaptureNote | None = _field(
        _nested(CaptureNote), "the request it ran for (a hook runs once per completed request; schema 2)"
    )
    output: tuple[str, ...] | None = _field(
        _texts,
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
_KIND: Final = frozenset({"kind"})
RECORD_KEYS: Final = ("kind", *(f.name for f in attrs.fields(Record) if f.metadata.get("always")))


# -- trace metadata -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ExportMeta:
    """What an ``export --hta`` file holds (``profdsl.export``)."""

    format: str | None = _field(_text, "`hta`", always=True)
    role: str | None = _field(_text, "the stage's role", always=True)
    stage: str | None = _field(_text, "the exported stage", always=True)
    step: int | None = _field(_count(0), "its step", always=True)
    rank: int | None = _field(_count(0), "the rank of this file", always=True)
    iterations: str | None = _field(_text, "what an iteration is: `mini_batch` or `entry`", always=True)
    traces: tuple[str, ...] | None = _field(_texts, "the input traces", always=True)
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class TraceMeta:
    """A trace's ``profdsl`` metadata: who wrote it and which regions it holds; ``merge`` and
    ``export --hta`` outputs carry their own fields here instead (and null for the ``always``
    ones, which every trace profdsl captured carries)."""

    role: str | None = _field(_text, "the role that owns the session", always=True)
    roles: tuple[str, ...] | None = _field(_texts, "every role it records (fused roles)")
    stage: str | None = _field(_text, "a discrete trace's stage", always=True)
    step: int | None = _field(_count(0), "the step", always=True)
    rank: int | None = _field(_count(0), "the global rank", always=True)
    world_size: int | None = _field(_count(1), "the world size", always=True)
    window: tuple[int, int] | None = _field(_window, "a scheduled trace's mini-batch window", always=True)
    windows: tuple[WindowNote, ...] | None = _field(_nested_list(WindowNote), "a continuous step's recorded windows")
    config_hash: str | None = _field(_text, "a hash of the profiler config")
    host: str | None = _field(_text, "the writing host")
    pid: int | None = _field(_count(0), "the writing process")
    regions: Regions | None = _field(_nested(Regions), "the profdsl regions it holds")
    parallel: Mapping[str, int] | None = _field(_counts_of(_dim, 0), "the writer's parallel coordinates")
    parallel_sizes: Mapping[str, int] | None = _field(_counts_of(_dim, 1), "the size of each dimension")
    export: ExportMeta | None = _field(_nested(ExportMeta), "an `export --hta` file: what it exports")
    merged_traces: int | None = _field(_count(0), "a `merge` output: how many traces it holds")
    alignment: Mapping[str, Any] | None = _field(_json_object, "a `merge` output: how its rows share one clock")
    stages: tuple[dict[str, Any], ...] | None = _field(_objects, "a `merge` output: the stage-time model's rows")
    capture: CaptureNote | None = _field(
        _nested(CaptureNote), "why it was captured, when the plan did not name its step"
    )
    schema: int = _field(_count(0), "the schema version that wrote it", default=SCHEMA_VERSION, always=True)
    unknown: Mapping[str, Any] = _unknown()


# -- capture requests ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CaptureRequest:
    """A request to trace the next ``steps`` steps of a running job: a request file
    (``profdsl trigger``, in ``save_path/profdsl-requests/``), the body of ``POST /profile``, or
    what a Ray trainer's driver sends its workers. ``id`` and ``steps`` are required
    (:func:`parse_request`)."""

    id: str | None = _field(_request_id, "the request's id: a request seen twice is taken once", always=True)
    steps: int | None = _field(_count(1, MAX_REQUEST_STEPS), "how many steps to trace", always=True)
    ranks: tuple[int, ...] | str | None = _field(
        _rank_choice, "which ranks: a list, `all`, or a rank selector (`tp == 0`); null: the config's ranks"
    )
    roles: tuple[str, ...] | None = _field(
        _role_names, "which roles (`rollout`: the engines, through the driver); null: every role"
    )
    at_step: int | None = _field(
        _count(0, MAX_WIDE_INDEX),
        "the first step to trace, when it is not yet reached; null: the next step each process begins",
    )
    reason: str | None = _field(_short_text, "why it was asked (written into the capture's records)")
    source: str | None = _field(_source, "what asked (set by the receiver)")
    created: float | None = _field(
        _when, "when it was made, seconds since 1970: a request file older than the process that finds it is not taken"
    )
    schema: int = _field(_count(0), "the schema version that wrote it", default=SCHEMA_VERSION, always=True)
    unknown: Mapping[str, Any] = _unknown()

    def note(self, first: int, last: int) -> CaptureNote:
        """The capture note of the steps ``first``..``last`` it traces."""
        return CaptureNote(source=self.source, request=self.id, steps=(first, last), reason=self.reason)


def parse_request(value: object, *, default_id: str | None = None, source: str | None = None) -> CaptureRequest:
    """A capture request from its JSON object (``default_id``: the id of one that names none;
    ``source``: what carried it, replacing what it says).

    Raises:
        RecordError: it is not an object, ``id`` or ``steps`` is missing, or a field has the
            wrong type or value (the message names it).

    Examples:
        >>> parse_request({"id": "r1", "steps": 2, "ranks": "rank in {3, 1}"}).ranks
        'rank in {1, 3}'
        >>> parse_request({"id": "r1", "steps": 0})
        Traceback (most recent call last):
        ...
        profdsl.records.schema.RecordError: steps must be an integer in 1..10000 or None, got 0
    """
    request = _decode(CaptureRequest, value)
    if request.id is None and default_id is not None:
        request = attrs.evolve(request, id=default_id)
    if source is not None:
        request = attrs.evolve(request, source=source)
    for name in ("id", "steps"):
        if getattr(request, name) is None:
            raise RecordError(f"{name} is required")
    return request


def ask(
    steps: object,
    *,
    ranks: object = None,
    roles: object = None,
    at_step: object = None,
    reason: object = None,
    source: str,
    request_id: str,
) -> CaptureRequest:
    """A capture request from Python arguments (``Profiler.request``, ``RayStepProfiler.request``),
    checked as a request file is.

    Raises:
        RecordError: an argument has the wrong type or value (the message names it), or reading
            it raised (the callers promise never to raise).
    """
    try:
        asked = {
            "steps": _as_plain(steps),
            "ranks": _as_plain(ranks, many=True),
            "roles": _as_plain(roles, many=True),
            "at_step": _as_plain(at_step),
            "reason": reason,
        }
        return parse_request(asked, default_id=request_id, source=source)
    except RecordError:
        raise
    except Exception as exc:  # the caller's own object raised (an array's truth value, ...)
        raise RecordError(f"an argument cannot be read: {type(exc).__name__}: {exc}") from exc


#: The most items taken from a sequence argument before the schema judges it (it refuses far
#: fewer): an endless iterator cannot hang the caller.
_MOST_ITEMS = 100_001


def _as_plain(value: object, many: bool = False) -> object:
    """A Python argument as a request file would carry it: an integer of any type that
    ``start()`` takes (``np.int64``: it has ``__index__``, and is not a bool) becomes an ``int``;
    with ``many``, a sequence that is not text (a tuple, a range, a NumPy array) becomes a list
    of such. Anything else is left for the schema to refuse by name."""
    if value is None or isinstance(value, (str, bytes, bool, float)):
        return value
    if many and isinstance(value, Iterable) and not isinstance(value, Mapping):
        if getattr(value, "ndim", 1) != 1:
            tolist = getattr(value, "tolist", None)
            return tolist() if callable(tolist) else value  # nested lists: refused by name
        return [_as_plain(item) for item in itertools.islice(value, _MOST_ITEMS)]
    if hasattr(type(value), "__index__"):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:  # np.bool_ and arrays of one item claim it and refuse
            return value
    return value


# -- the metrics log ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class StageLine:
    """One stage path of one step in the metrics log (as ``StageTiming``)."""

    total_s: float | None = _field(_duration, "seconds inside the stage this step, all its entries", always=True)
    self_s: float | None = _field(_duration, "of which not inside a nested stage", always=True)
    count: int | None = _field(_count(0), "its entries this step", always=True)
    device_s: float | None = _field(_duration, "CUDA time between entry and exit (CUDA only)")
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class MetricsLine:
    """One role's step on one rank in the metrics log (``Metrics(log=True)``:
    ``save_path/profdsl-metrics-*.jsonl``, one JSON object per line)."""

    role: str | None = _field(_text, "the role", always=True)
    rank: int | None = _field(_count(0), "the global rank", always=True)
    world_size: int | None = _field(_count(1), "the job's world size", always=True)
    step: int | None = _field(_count(0), "the step", always=True)
    wall_s: float | None = _field(_duration, "the step's wall time, start() to stop()", always=True)
    stages: Mapping[str, StageLine] | None = _field(
        _nested_map(StageLine), "per stage path (`/` between nested stages), its timing", always=True
    )
    overflow: int | None = _field(_count(0), "entries of stage paths beyond `Metrics.max_stages`")
    traced: bool | None = _field(_flag, "whether the step was traced on this rank (its times include profiling's cost)")
    host: str | None = _field(_text, "the host")
    pid: int | None = _field(_count(0), "the process")
    time_ms: int | None = _field(_count(0), "when the step ended, milliseconds since 1970")
    schema: int = _field(_count(0), "the schema version that wrote it", default=SCHEMA_VERSION, always=True)
    unknown: Mapping[str, Any] = _unknown()


def parse_metrics_line(value: object) -> MetricsLine:
    """One line of a metrics log, parsed from JSON.

    Raises:
        RecordError: not an object, or a field has the wrong type or value (the message names
            it), or ``role``, ``step`` or ``stages`` is missing.
    """
    line = _decode(MetricsLine, value)
    for name in ("role", "step", "stages"):
        if getattr(line, name) is None:
            raise RecordError(f"{name} is required")
    return line


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


# -- JSON ---------------------------------------------------------------------------------------


def _decode(cls: type[T], value: Any, prefix: str = "", *, skip: frozenset[str] = frozenset()) -> T:
    """``value`` as ``cls``: each known field checked, the rest (but ``skip``) kept in ``unknown``."""
    if not isinstance(value, Mapping):
        raise RecordError(f"{prefix.rstrip('.') or 'it'} is {brief(value)}, not a JSON object")
    known: dict[str, Any] = {}
    names = set()
    for field in attrs.fields(cls):  # type: ignore[arg-type]
        if field.metadata.get("unknown"):
            continue
        names.add(field.name)
        if field.name in value:
            checked = field.metadata["check"](f"{prefix}{field.name}", value[field.name])
            if checked is not None or field.default is None:
                known[field.name] = checked
    unknown = {k: v for k, v in value.items() if k not in names and k not in skip}
    return cls(**known, unknown=unknown)  # type: ignore[call-arg]


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        return to_json(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_json(obj: Any) -> dict[str, Any]:
    """A record or metadata object as the JSON object profdsl writes: the ``always`` keys, the
    other fields that are set, then the unknown ones it was read with."""
    out: dict[str, Any] = {"kind": obj.kind} if isinstance(obj, Record) else {}
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if field.metadata.get("unknown") or (value is None and not field.metadata.get("always")):
            continue
        out[field.name] = _plain(value)
    for key, value in obj.unknown.items():
        out.setdefault(key, value)
    return out


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
    record = _decode(RECORD_CLASSES[kind], value, skip=_KIND)
    if record.status == "":
        record = attrs.evolve(record, status="ok")
    if VERSION_KEY not in value:
        record = attrs.evolve(record, schema=0)
        if record.status == "failed" and record.path is not None and record.intended is None:
            record = attrs.evolve(record, path=None, intended=record.path)
    return record


def parse_meta(value: object) -> TraceMeta:
    """A trace's ``profdsl`` metadata.

    Raises:
        RecordError: it is not an object, or a known field has the wrong type or value.
    """
    if not isinstance(value, Mapping):
        raise RecordError(f"{META_KEY} metadata is {brief(value)}, not an object")
    return _decode(TraceMeta, value, f"{META_KEY}.")


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
