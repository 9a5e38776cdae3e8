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

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

from profdsl.core.log import logger, once

__all__ = [
    "KINDS", "MANIFEST_NAME", "RECORD_KEYS", "ManifestLine", "append_record", "is_relative", "make_record",
    "read_lines", "read_manifest",
]

MANIFEST_NAME = "profdsl-manifest.jsonl"
#: Keys every record carries (None when not applicable); hook records add ``exit_code``.
RECORD_KEYS = (
    "kind", "path", "role", "stage", "step", "rank", "world_size", "replica", "window",
    "host", "pid", "bytes", "status",
)
KINDS = ("trace", "rollout", "nsys", "hook")


def is_relative(path: str) -> bool:
    """True for a path inside ``save_path``: not empty, not absolute, no ``..``, no NUL."""
    return bool(path) and "\0" not in path and not os.path.isabs(path) and ".." not in Path(path).parts


def make_record(kind: str, path: str | None, **fields: Any) -> dict[str, Any]:
    """A record with every key of :data:`RECORD_KEYS`; ``fields`` may add more.

    ``path`` must be relative to ``save_path`` (a bare file name for flat artifacts).
    """
    if kind not in KINDS:
        raise ValueError(f"manifest kind must be one of {KINDS}, got {kind!r}")
    if path is not None and not is_relative(path):
        raise ValueError(f"manifest path must be relative to save_path, got {path!r}")
    record: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    record.update(fields, kind=kind, path=path)
    if record["status"] is None:
        record["status"] = "ok"
    if isinstance(record["window"], tuple):
        record["window"] = list(record["window"])
    return record


def append_record(save_path: str | os.PathLike[str], record: dict[str, Any]) -> bool:
    """Append ``record`` as one line; never raises. Returns False (and logs once) on failure,
    a short write included.

    The record always starts on a fresh line: after a torn line (a writer that died or hit a
    full disk mid-line) it is written behind a newline, so the half line cannot swallow it.
    """
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    target = os.path.join(save_path, MANIFEST_NAME)
    try:
        os.makedirs(save_path, exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _lock(fd)
            if not _ends_a_line(fd):
                line = b"\n" + line
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # no progress: as short as a write gets
                    raise OSError(errno.ENOSPC, "short write: no bytes written")
                view = view[written:]
        finally:
            os.close(fd)  # closing releases the lock
    except OSError as exc:
        once(f"manifest:{target}", logging.ERROR,
             "profdsl: cannot append to the manifest %s: %s", target, exc)
        return False
    return True


def _ends_a_line(fd: int) -> bool:
    """Whether the file is empty or ends with a newline (read under the writers' lock)."""
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


def _lock(fd: int) -> None:
    """An exclusive record lock of this process on the whole file (released by the close)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: O_APPEND alone keeps single writes whole on local disks
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
    except OSError:  # a filesystem without record locks: O_APPEND keeps lines whole
        pass


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
        OSError: the manifest exists but cannot be read.
    """
    target = os.path.join(save_path, MANIFEST_NAME)
    try:
        with open(target, "rb") as file:
            _read_lock(file.fileno())
            data = file.read()
    except FileNotFoundError:
        return []
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


def _read_lock(fd: int) -> None:
    """A shared record lock: waits for an append in progress (best effort, like the writers')."""
    try:
        import fcntl

        fcntl.lockf(fd, fcntl.LOCK_SH)
    except (ImportError, OSError):
        pass


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
