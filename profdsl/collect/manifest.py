"""The manifest: one JSON line per artifact (the public face is :mod:`profdsl.manifest`).

Appends are one ``write`` on a file opened with ``O_APPEND`` while holding an exclusive ``flock``,
so concurrent writers never interleave or tear each other's lines; readers skip a torn last line.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from profdsl.core.log import logger, once

__all__ = ["MANIFEST_NAME", "RECORD_KEYS", "append_record", "make_record", "read_manifest"]

MANIFEST_NAME = "profdsl-manifest.jsonl"
#: Keys every record carries (None when not applicable); hook records add ``exit_code``.
RECORD_KEYS = (
    "kind", "path", "role", "stage", "step", "rank", "world_size", "replica", "window",
    "host", "pid", "bytes", "status",
)
KINDS = ("trace", "rollout", "nsys", "hook")


def make_record(kind: str, path: str | None, **fields: Any) -> dict[str, Any]:
    """A record with every key of :data:`RECORD_KEYS`; ``fields`` may add more.

    ``path`` must be relative to ``save_path`` (a bare file name for flat artifacts).
    """
    if kind not in KINDS:
        raise ValueError(f"manifest kind must be one of {KINDS}, got {kind!r}")
    if path is not None and (os.path.isabs(path) or ".." in Path(path).parts):
        raise ValueError(f"manifest path must be relative to save_path, got {path!r}")
    record: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    record.update(fields, kind=kind, path=path)
    if record["status"] is None:
        record["status"] = "ok"
    if isinstance(record["window"], tuple):
        record["window"] = list(record["window"])
    return record


def append_record(save_path: str | os.PathLike[str], record: dict[str, Any]) -> bool:
    """Append ``record`` as one line; never raises. Returns False (and logs once) on failure."""
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    target = os.path.join(save_path, MANIFEST_NAME)
    try:
        os.makedirs(save_path, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _lock(fd)
            view = memoryview(line)
            while view:  # a short write on a full disk must not leave half a line behind silently
                written = os.write(fd, view)
                view = view[written:]
        finally:
            os.close(fd)  # closing releases the lock
    except OSError as exc:
        once(f"manifest:{target}", logging.ERROR,
             "profdsl: cannot append to the manifest %s: %s", target, exc)
        return False
    return True


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # not POSIX: O_APPEND alone keeps single writes whole on local disks
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a filesystem without flock (Lustre -o noflock): O_APPEND keeps lines whole
        pass


def read_manifest(save_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every readable record of ``save_path``'s manifest, in file order ([] when there is none)."""
    target = os.path.join(save_path, MANIFEST_NAME)
    try:
        with open(target, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return []
    records = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            if number < len(lines):  # the torn last line has no newline yet: expected, quiet
                logger.warning("profdsl: skipping unreadable line %d of %s", number, target)
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
