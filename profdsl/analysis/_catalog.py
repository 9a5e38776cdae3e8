"""What a folder holds: one row per artifact, from the manifest, or from file names when a
folder has no manifest (traces copied by hand, an older run).

This is the one place that decides a manifest record is valid (:func:`from_record`) and which
artifacts the trace-reading commands read (:func:`json_traces`, :func:`trace_header`): every
command lists, checks, sums, merges and plots through it, so they all skip the same bad input
with the same reason, and ``profdsl check`` fails on that input (and on malformed events the
fast reader of ``summary`` and ``plot`` skips over unread: :mod:`profdsl.analysis._reader`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from profdsl.analysis._reader import TraceError, file_kind, header
from profdsl.collect._manifest import MANIFEST_NAME, read_lines
from profdsl.collect.metrics_log import log_files
from profdsl.config._parallel import known_coords
from profdsl.core._naming import ARTIFACT_SUFFIXES, NSYS_EXT, TEMP_PREFIX, TraceName, is_json_trace
from profdsl.records.fields import RecordError
from profdsl.records.manifest import Record, TraceRecord, parse_record
from profdsl.records.meta import DISTRIBUTED_KEY, META_KEY

__all__ = [
    "Artifact",
    "Catalog",
    "FolderError",
    "RecordError",
    "catalog",
    "coordinates",
    "from_record",
    "json_traces",
    "number",
    "trace_header",
]


class FolderError(Exception):
    """The folder is missing, not a folder, or holds nothing profdsl can read."""


@attrs.frozen
class Artifact:
    """One artifact of a folder (a manifest record, or what a file name says)."""

    kind: str
    path: str | None
    role: str | None = None
    stage: str | None = None
    step: int | None = None
    rank: int | None = None
    world_size: int | None = None
    replica: int | None = None
    window: tuple[int, int] | None = None
    bytes: int | None = None
    status: str = "ok"
    #: Profiling's own cost for this trace, when the record says: the training thread blocked by
    #: the session, and the background export (milliseconds; ``profdsl.analysis._cost`` sums them).
    blocked_ms: float | None = None
    export_ms: float | None = None
    host: str | None = None  # the host that wrote it (whose clock its timestamps follow)
    #: The manifest record it comes from (None: known by its file name only).
    record: Record | None = attrs.field(default=None, eq=False, repr=False)
    #: The writer's known parallel coordinates, ``(("tp", 1), ("pp", 0), ...)`` in the order
    #: tp, pp, dp, cp, ep (the record's ``tp`` ... ``ep`` keys, or the file name's).
    parallel: tuple[tuple[str, int], ...] = ()

    @property
    def needs_metadata(self) -> bool:
        """A training trace profdsl recorded in the manifest carries ``profdsl`` and
        ``distributedInfo`` metadata (traces known by their file name only may predate it)."""
        return self.kind == "trace" and self.record is not None

    @property
    def label(self) -> str:
        """A short name for the process row of this artifact: role, rank, replica."""
        parts = [self.role or "unknown"]
        if self.replica is not None:
            parts.append(f"replica{self.replica}")
        parts.append(f"rank{self.rank}" if self.rank is not None else "rank?")
        return " ".join(parts)


@attrs.frozen
class Catalog:
    """A folder's valid artifacts; ``problems``: one line per input every command skips (a
    manifest line that is not a valid record, and, in a folder without a manifest, each file
    named like an artifact but not by profdsl, or not a regular file: a JSON trace of those is
    still an artifact, known by its name only, ``role`` and the rest unknown, and read by its
    events); ``leftovers``: the hidden files profdsl left there (a write or an export cut short:
    ``check`` names them)."""

    artifacts: list[Artifact]
    problems: list[str]
    leftovers: list[str] = attrs.field(factory=list)


def from_record(record: object) -> Artifact:
    """The artifact a manifest record describes (its JSON object).

    Raises:
        RecordError: ``record`` is not an object, or a field has the wrong type or value (the
            message names the first such field: :func:`profdsl.records.manifest.parse_record`).
    """
    parsed = parse_record(record)
    blocked, export = (parsed.blocked_ms, parsed.export_ms) if isinstance(parsed, TraceRecord) else (None, None)
    return Artifact(
        kind=parsed.kind,
        path=parsed.path,
        bytes=parsed.bytes,
        status=parsed.status,
        blocked_ms=blocked,
        export_ms=export,
        record=parsed,
        parallel=known_coords(parsed),
        **coordinates(parsed),
    )


#: What a record and a trace name both say of an artifact.
_COORDINATES = ("role", "stage", "step", "rank", "world_size", "replica", "window", "host")


def coordinates(source: object) -> dict[str, Any]:
    """What ``source`` (a record, a trace name, an artifact) says of :data:`_COORDINATES`."""
    return {name: getattr(source, name) for name in _COORDINATES}


def _from_name(folder: Path, name: str) -> tuple[Artifact | None, str | None]:
    """The artifact a file name describes (None: not read), and why the file is not taken as
    profdsl's (None: it is)."""
    where = folder / name
    try:
        info = where.stat()
    except OSError as exc:
        return None, f"{where}: unreadable: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{where}: not a regular file ({file_kind(info.st_mode)}): not read"
    parsed = TraceName.try_parse(name)
    if parsed is None:
        if not is_json_trace(name):
            return None, f"{where}: not a profdsl trace name: not read"
        return (
            Artifact(kind="trace", path=name, bytes=info.st_size),
            f"{where}: not a profdsl trace name: read by its events only (role, step and rank unknown)",
        )
    kind = "nsys" if parsed.ext == NSYS_EXT else "rollout" if parsed.role == "rollout" else "trace"
    artifact = Artifact(kind=kind, path=name, bytes=info.st_size, parallel=known_coords(parsed), **coordinates(parsed))
    return artifact, None


def catalog(folder: str | os.PathLike[str]) -> Catalog:
    """Every artifact of ``folder`` (the manifest's valid records, or parsed trace names when it
    has none), with the problems and leftovers :class:`Catalog` describes.

    Raises:
        FolderError: ``folder`` is missing or not a folder, or holds no artifact and no manifest
            line at all.
    """
    path = Path(folder)
    if not path.exists():
        raise FolderError(f"{folder}: no such folder")
    if not path.is_dir():
        raise FolderError(f"{folder}: not a folder")
    rows, problems = _from_manifest(path)
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise FolderError(f"{folder}: cannot list: {exc.strerror or exc}") from exc
    foreign: list[str] = []
    if not rows:  # no manifest, or no valid record in it: read the file names
        for name in names:
            if not name.endswith(ARTIFACT_SUFFIXES) or name.startswith(TEMP_PREFIX):
                continue
            found, note = _from_name(path, name)
            foreign += [note] if note is not None else []
            rows += [found] if found is not None else []
    leftovers = [n for n in names if n.startswith(TEMP_PREFIX)]
    if not rows and not problems and not leftovers and not foreign:
        raise FolderError(f"{folder}: no profdsl manifest and no profdsl trace files")
    return Catalog(rows, problems + foreign, leftovers)


def catalog_or_logs(folder: str | os.PathLike[str], *, logs: bool) -> Catalog:
    """:func:`catalog`; with ``logs`` (a view the metrics logs can draw alone: the step ledger),
    an empty one for a folder of metrics logs only (``Metrics(log=True)``: no trace, no manifest).

    Raises:
        FolderError: as :func:`catalog`, unless ``logs`` and ``folder`` holds a metrics log.
    """
    try:
        return catalog(folder)
    except FolderError:
        if logs and log_files(folder):
            return Catalog([], [])
        raise


def _from_manifest(folder: Path) -> tuple[list[Artifact], list[str]]:
    manifest = folder / MANIFEST_NAME
    try:
        lines = read_lines(folder)
    except OSError as exc:
        return [], [f"{manifest}: unreadable: {exc.strerror or exc}"]
    rows, problems = [], []
    for line in lines:
        where = f"{manifest} line {line.number}"
        if line.error is not None:
            problems.append(f"{where}: {line.error}")
            continue
        try:
            rows.append(from_record(line.value))
        except RecordError as exc:
            problems.append(f"{where}: {exc}")
    return rows, problems


def number(value: int | None) -> int:
    """A step, rank or replica as it sorts and is drawn: an unknown one (None) as -1, first."""
    return -1 if value is None else value


def json_traces(rows: Iterable[Artifact]) -> list[Artifact]:
    """The artifacts the trace readers read: a ``.json``/``.json.gz`` file recorded ``ok``, or
    kept though it holds less than asked (``incomplete`` or ``truncated`` with a path: read like
    the others, reported by ``check``); a path listed twice is read once (its first record)."""
    chosen: dict[str, Artifact] = {}
    for artifact in rows:
        readable = artifact.status == "ok" or (artifact.record is not None and artifact.record.readable)
        if readable and artifact.path is not None and is_json_trace(artifact.path):
            chosen.setdefault(artifact.path, artifact)
    return list(chosen.values())


def trace_header(folder: str | os.PathLike[str], artifact: Artifact) -> dict[str, Any]:
    """The checked header of an artifact's JSON trace (:func:`~profdsl.analysis._reader.header`),
    with its metadata when :attr:`Artifact.needs_metadata`.

    Raises:
        TraceError: the trace cannot be read, its metadata is malformed or missing.
    """
    path = os.path.join(folder, str(artifact.path))
    meta = header(path)
    if artifact.needs_metadata and not (META_KEY in meta and DISTRIBUTED_KEY in meta):
        raise TraceError(f"{path}: no profdsl / distributedInfo metadata")
    return meta
