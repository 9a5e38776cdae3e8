"""The manifest: one JSON line per artifact (the public face is :mod:`profdsl.manifest`).

Appends are one ``write`` of one whole line on a file opened with ``O_APPEND`` (placed atomically
at the end), under an exclusive POSIX record lock (``fcntl.lockf``) that orders the processes
appending to one manifest: a lock of the process, which a forked child does not inherit (a
``flock`` belongs to the open file, which a child forked during an append shares, and would keep
the parent waiting until the child exits). Within a process, one thread appends: the runtime's
writer. A record always starts on a fresh line, so a line torn by a writer that died or hit a
full disk loses that record only; readers skip a torn last line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from profdsl.core._files import append_lines, open_append, open_regular, read_within
from profdsl.core._log import logger, once, printable
from profdsl.core._naming import is_relative
from profdsl.records.fields import RecordError, to_json
from profdsl.records.manifest import KINDS, RECORD_CLASSES, RECORD_KEYS, Record, parse_record

__all__ = [
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "RECORD_KEYS",
    "ManifestLine",
    "append_record",
    "append_whole",
    "json_lines",
    "make_record",
    "read_lines",
    "read_manifest",
    "read_records",
]

MANIFEST_NAME = "profdsl-manifest.jsonl"
#: The most bytes read of a manifest (4 GiB: millions of records, one per artifact or event, far
#: more than a run writes); a larger file, or one that grows past it while read, is refused.
MAX_MANIFEST_BYTES = 4 * 1024**3


def make_record(kind: str, path: str | None, **fields: Any) -> dict[str, Any]:
    """The JSON object of a record of ``kind`` (:data:`~profdsl.records.manifest.RECORD_CLASSES`):
    every key of :data:`RECORD_KEYS`, and the ``fields`` given (each a field of that kind's class).

    ``path`` must be relative to ``save_path`` (a bare file name for flat artifacts).

    Raises:
        ValueError: an unknown kind, or a path outside ``save_path``.
        TypeError: a field the kind's record does not have.
    """
    if kind not in RECORD_CLASSES:
        raise ValueError(f"manifest kind must be one of {KINDS}, got {kind!r}")
    if path is not None and not is_relative(path):
        raise ValueError(f"manifest path must be relative to save_path, got {path!r}")
    return to_json(RECORD_CLASSES[kind](path=path, **fields))


def append_record(save_path: str | os.PathLike[str], record: Record | Mapping[str, Any]) -> bool:
    """Append ``record`` (a schema record, or its JSON object) as one line, under the lock;
    :func:`append_whole` says the rest."""
    data = to_json(record) if isinstance(record, Record) else record
    line = (json.dumps(data, sort_keys=True, default=str) + "\n").encode()
    return append_whole(os.path.join(save_path, MANIFEST_NAME), line, "manifest", lock=True)


def append_whole(path: str, data: bytes, what: str, *, lock: bool = False) -> bool:
    """Append ``data`` (whole lines) to ``path`` (its folder made by the first write into it;
    ``lock``: under an exclusive record lock); never raises. Returns False (and logs once, naming
    ``what``) on failure, a short write included. The data always starts on a fresh line: after
    a torn line (a writer that died or hit a full disk mid-line) it is written behind a newline,
    so the half line cannot swallow it."""
    try:
        try:
            fd = open_append(path, read=True)  # never through a link planted in save_path
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = open_append(path, read=True)
        try:
            if lock:
                _lock(fd)
            append_lines(fd, data)  # under the lock: the torn-line check and the write
        finally:
            os.close(fd)  # closing releases the lock
    except OSError as exc:
        once(
            f"{what}:{path}",
            logging.ERROR,
            "profdsl: cannot append to the %s %s: %s",
            what,
            printable(path),
            printable(str(exc.strerror or exc)),
        )
        return False
    return True


def _lock(fd: int, shared: bool = False) -> None:
    """A record lock of this process on the whole file, exclusive (an append) or ``shared`` (a
    read: it waits for an append in progress); released by the close. Best effort: without
    POSIX or on a filesystem without record locks, ``O_APPEND`` alone keeps single writes
    whole."""
    with contextlib.suppress(ImportError, OSError):
        import fcntl

        fcntl.lockf(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)


#: Why a last line that does not parse and has no newline is unreadable.
CUT_SHORT = "cut short (no newline: its write never finished)"


class ManifestLine(NamedTuple):
    """One non-blank line of a manifest: its number (from 1), and its JSON value or why it has none."""

    number: int
    value: Any
    error: str | None


def read_lines(save_path: str | os.PathLike[str]) -> list[ManifestLine]:
    """Every non-blank line of ``save_path``'s manifest, parsed, in file order ([] when there is none).

    The file is read under a shared lock, so a record a writer is appending is seen whole or not at
    all. A line that is not JSON has ``error`` set; a last line that does not parse and lacks its
    newline was cut short (its write never finished).

    Raises:
        OSError: the manifest exists but cannot be read, or is larger than
            :data:`MAX_MANIFEST_BYTES` (``errno.EFBIG``), when opened or as read.
    """
    target = os.path.join(save_path, MANIFEST_NAME)
    try:
        data = _read_regular(target)
    except FileNotFoundError:
        return []
    return json_lines(data)


def json_lines(data: bytes) -> list[ManifestLine]:
    """Every non-blank line of a JSON-lines file's ``data``, parsed (a last line that does not
    parse and lacks its newline: :data:`CUT_SHORT`)."""
    lines = data.split(b"\n")
    found = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            found.append(ManifestLine(number, json.loads(raw), None))
        except (ValueError, RecursionError) as exc:
            unfinished = number == len(lines)  # the last line has no newline yet
            why = CUT_SHORT if unfinished else f"not JSON ({exc})"
            found.append(ManifestLine(number, None, why))
    return found


def _read_regular(target: str) -> bytes:
    """The whole file, read under a shared lock, within :data:`MAX_MANIFEST_BYTES`; a link, FIFO,
    device or folder is refused unread (:func:`~profdsl.core._files.open_regular`)."""
    with open_regular(target, limit=MAX_MANIFEST_BYTES, holds="a manifest") as file:
        _lock(file.fileno(), shared=True)
        return read_within(file, limit=MAX_MANIFEST_BYTES, holds="a manifest")


def read_manifest(save_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every readable record of ``save_path``'s manifest, in file order ([] when there is none).

    Lines that are not JSON objects are left out: a torn last line quietly (a writer may still be
    appending it), any other with a warning. ``profdsl check`` names them all.
    """
    target = os.path.join(save_path, MANIFEST_NAME)
    records = []
    for line in read_lines(save_path):
        if line.error is not None:
            if line.error != CUT_SHORT:
                logger.warning("profdsl: skipping unreadable line %d of %s", line.number, target)
            continue
        if isinstance(line.value, dict):
            records.append(line.value)
    return records


def read_records(save_path: str | os.PathLike[str]) -> list[Record]:
    """Every valid record of ``save_path``'s manifest, as schema records, in file order (lines
    that are not valid records are left out; ``profdsl check`` names them).

    Raises:
        OSError: the manifest exists but cannot be read.
    """
    found = []
    for line in read_lines(save_path):
        try:
            found.append(parse_record(line.value))
        except RecordError:
            continue
    return found
