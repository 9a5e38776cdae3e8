"""What a folder holds: one row per artifact, from the manifest, or from file names when a
folder has no manifest (traces copied by hand, an older run).

This is the one place that decides a manifest record is valid (:func:`from_record`) and which
artifacts the trace-reading commands read (:func:`json_traces`, :func:`trace_header`): every
command lists, checks, sums, merges and plots through it, so they all skip the same bad input
with the same reason, and ``profdsl check`` fails on that input (and on malformed events the
fast reader of ``summary`` and ``plot`` skips over unread: :mod:`profdsl.analysis.reader`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from profdsl.analysis.reader import TraceError, brief, header
from profdsl.collect.manifest import KINDS, MANIFEST_NAME, is_relative, read_lines
from profdsl.config.parallel import DIMS
from profdsl.config.validate import require_int
from profdsl.core.naming import ARTIFACT_SUFFIXES, NSYS_EXT, TEMP_PREFIX, TraceName, is_json_trace
from profdsl.errors import ConfigError

__all__ = ["Artifact", "Catalog", "FolderError", "RecordError", "artifacts", "catalog", "from_record",
           "json_traces", "trace_header"]



class FolderError(Exception):
    """The folder is missing, not a folder, or holds nothing profdsl can read."""


class RecordError(ValueError):
    """A manifest record that does not describe an artifact (the message says which field)."""


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
    #: the session, and the background export (milliseconds; ``profdsl.analysis.cost`` sums them).
    blocked_ms: float | None = None
    export_ms: float | None = None
    host: str | None = None  # the host that wrote it (whose clock its timestamps follow)
    record: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: The writer's known parallel coordinates, ``(("tp", 1), ("pp", 0), ...)`` in the order
    #: tp, pp, dp, cp, ep (the record's ``tp`` ... ``ep`` keys, or the file name's).
    parallel: tuple[tuple[str, int], ...] = ()

    @property
    def needs_metadata(self) -> bool:
        """A training trace profdsl recorded in the manifest carries ``profdsl`` and
        ``distributedInfo`` metadata (traces known by their file name only may predate it)."""
        return self.kind == "trace" and bool(self.record)

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
    """A folder's valid artifacts, one line per manifest line that is not a valid record, and
    the hidden files profdsl left there (a write or an export cut short: ``check`` names them)."""

    artifacts: list[Artifact]
    problems: list[str]
    leftovers: list[str] = attrs.field(factory=list)


#: Integer fields of a record and their smallest value; ``bytes`` is also a file size.
_COUNTS = {"step": 0, "rank": 0, "world_size": 1, "replica": 0}
_TEXTS = ("role", "stage", "status", "error", "reason", "source", "host")
_MAX_BYTES = 2**63 - 1
#: Durations of a record, in milliseconds: finite numbers >= 0 (or null).
_DURATIONS = ("blocked_ms", "export_ms")


def _duration(key: str, value: object) -> float | None:
    """``value`` as a float of milliseconds, or None; refuses bools, NaN, inf and ints too large for a float."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= sys.float_info.max:
        raise RecordError(f"{key} must be a finite number of milliseconds >= 0 or null, got {brief(value)}")
    return float(value)


def from_record(record: object) -> Artifact:
    """The artifact a manifest record describes.

    Raises:
        RecordError: ``record`` is not an object, or a field the commands read has the wrong type
            or value (the message names the first such field).
    """
    if not isinstance(record, dict):
        raise RecordError(f"{brief(record)} is not a JSON object")
    kind = record.get("kind", "trace")
    if not isinstance(kind, str) or kind not in KINDS:
        raise RecordError(f"kind must be one of {', '.join(KINDS)}, got {brief(kind)}")
    path = record.get("path")
    if path is not None and not (isinstance(path, str) and is_relative(path)):
        raise RecordError(f"path must be a file name relative to the folder or null, got {brief(path)}")
    for key in _TEXTS:
        if not isinstance(record.get(key), (str, type(None))):
            raise RecordError(f"{key} must be a string or null, got {brief(record[key])}")
    window = record.get("window")
    if window is not None and not (isinstance(window, list) and len(window) == 2):
        raise RecordError(f"window must be [first, last] or null, got {brief(window)}")
    try:
        counts = {key: require_int(key, record.get(key), low, optional=True) for key, low in _COUNTS.items()}
        size = require_int("bytes", record.get("bytes"), 0, _MAX_BYTES, optional=True)
        first, last = (require_int("window", v, 0) for v in window) if window else (None, None)
    except ConfigError as exc:
        raise RecordError(str(exc)) from None
    blocked, export = (_duration(key, record.get(key)) for key in _DURATIONS)
    try:
        parallel = tuple((d, require_int(d, record[d], 0)) for d in DIMS if record.get(d) is not None)
    except ConfigError as exc:
        raise RecordError(str(exc)) from None
    return Artifact(parallel=parallel, kind=kind, path=path, role=record.get("role"), stage=record.get("stage"),
                    window=None if first is None or last is None else (first, last), bytes=size,
                    status=record.get("status") or "ok", blocked_ms=blocked, export_ms=export,
                    host=record.get("host"), record=record, **counts)


def _from_name(folder: Path, name: str) -> Artifact | None:
    parsed = TraceName.try_parse(name)
    if parsed is None:
        return None
    kind = "nsys" if parsed.ext == NSYS_EXT else "rollout" if parsed.role == "rollout" else "trace"
    coords = tuple((d, v) for d in DIMS if (v := getattr(parsed, d)) is not None)
    return Artifact(parallel=coords, kind=kind, path=name, role=parsed.role, stage=parsed.stage, step=parsed.step,
                    rank=parsed.rank, world_size=parsed.world_size, replica=parsed.replica,
                    window=parsed.window, bytes=_size(folder / name), host=parsed.host)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:  # gone since listed, or a dangling link: check names it missing
        return None


def catalog(folder: str | os.PathLike[str]) -> Catalog:
    """Every artifact of ``folder`` (the manifest's valid records, or parsed trace names when it
    has none), and one problem per manifest line that is not a valid record.

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
    if not rows:  # no manifest, or no valid record in it: read the file names
        rows = [a for n in names if n.endswith(ARTIFACT_SUFFIXES) for a in [_from_name(path, n)] if a is not None]
    leftovers = [n for n in names if n.startswith(TEMP_PREFIX)]
    if not rows and not problems and not leftovers:
        raise FolderError(f"{folder}: no profdsl manifest and no profdsl trace files")
    return Catalog(rows, problems, leftovers)


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


def artifacts(folder: str | os.PathLike[str]) -> list[Artifact]:
    """The valid artifacts of ``folder`` (:func:`catalog` without the problems).

    Raises:
        FolderError: as :func:`catalog`.
    """
    return catalog(folder).artifacts


def json_traces(rows: Iterable[Artifact]) -> list[Artifact]:
    """The artifacts the trace readers read: status ok, a ``.json``/``.json.gz`` file; a path
    listed twice is read once (its first record)."""
    chosen: dict[str, Artifact] = {}
    for artifact in rows:
        if artifact.status == "ok" and artifact.path is not None and is_json_trace(artifact.path):
            chosen.setdefault(artifact.path, artifact)
    return list(chosen.values())


def trace_header(folder: str | os.PathLike[str], artifact: Artifact) -> dict[str, Any]:
    """The checked header of an artifact's JSON trace (:func:`~profdsl.analysis.reader.header`),
    with its metadata when :attr:`Artifact.needs_metadata`.

    Raises:
        TraceError: the trace cannot be read, its metadata is malformed or missing.
    """
    path = os.path.join(folder, str(artifact.path))
    meta = header(path)
    if artifact.needs_metadata and not ("profdsl" in meta and "distributedInfo" in meta):
        raise TraceError(f"{os.fspath(path)}: no profdsl / distributedInfo metadata")
    return meta
