"""Writing one trace file into ``save_path``: collision-free, never overwriting, recorded.

The trace is first written to a hidden temporary name in ``save_path``; then its final name is
reserved with an exclusive create (bumping ``part`` while the name is taken, by this or any other
process) and the temporary file is renamed over the reservation. A failure is logged once and
recorded in the manifest; it never reaches the training loop.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable

import attrs

from profdsl.collect.manifest import append_record, make_record
from profdsl.collect.relocate import reserve
from profdsl.core.log import once
from profdsl.core.naming import TraceName

__all__ = ["TraceLabel", "export_trace"]


@attrs.frozen(kw_only=True)
class TraceLabel:
    """Who and what a trace records: everything its name and manifest record need."""

    role: str
    stage: str | None
    step: int | None
    rank: int
    world_size: int
    save_path: str
    host: str
    pid: int
    config_hash: str
    roles: tuple[str, ...] = ()
    part: int | None = None
    manifest: bool = True  # False for files that are moved (and recorded) elsewhere later


def export_trace(
    write: Callable[[str], object],
    label: TraceLabel,
    *,
    window: tuple[int, int] | None,
    time_ms: int,
    extra: dict[str, object] | None = None,
) -> str | None:
    """Write a trace with ``write(path)`` and move it under its final name; None on failure."""
    tmp = os.path.join(label.save_path, f".profdsl-tmp-{label.pid}-{uuid.uuid4().hex}.json.gz")
    final: str | None = None
    fields: dict[str, object] = dict(
        role=label.role, stage=label.stage, step=label.step, rank=label.rank,
        world_size=label.world_size, window=window, part=label.part, host=label.host,
        pid=label.pid, roles=list(label.roles or (label.role,)), config_hash=label.config_hash,
        time_ms=time_ms,
    )
    fields.update(extra or {})
    name: TraceName | None = None
    try:
        name = TraceName(
            role=label.role, stage=label.stage, step=label.step, rank=label.rank,
            world_size=label.world_size, window=window, part=label.part, host=label.host,
            pid=label.pid, time_ms=time_ms,
        )
        os.makedirs(label.save_path, exist_ok=True)
        write(tmp)
        final = reserve(label.save_path, name).format()
        os.replace(tmp, os.path.join(label.save_path, final))
        size = os.path.getsize(os.path.join(label.save_path, final))
    except Exception as exc:
        once(f"export:{label.save_path}", logging.ERROR,
             "[profdsl rank %s] could not write a %s trace into %s: %s",
             label.rank, label.role, label.save_path, exc)
        _remove_quietly(tmp)
        if final is not None:  # reserved but not filled: an empty file would pose as a trace
            _remove_quietly(os.path.join(label.save_path, final))
        if label.manifest:
            append_record(label.save_path, make_record(
                "trace", final or (name.format() if name else None), status="failed",
                error=f"{type(exc).__name__}: {exc}", bytes=None,
                **fields))
        return None
    if label.manifest:
        append_record(label.save_path, make_record("trace", final, bytes=size, **fields))
    return os.path.join(label.save_path, final)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
