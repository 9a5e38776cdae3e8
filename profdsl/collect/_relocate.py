"""Relocating artifacts that other tools wrote (nsys reports, engine traces) into ``save_path``.

Plan, then apply. Planning is pure: file names in, :class:`Move` and :class:`Skip` (with its
reason) out. Applying is best effort and never raises: it waits (bounded) until each source is
complete, reserves the destination name with an exclusive create (never overwriting anything),
renames within a filesystem or copies, fsyncs and renames across filesystems, and returns one
manifest record per file, ``incomplete`` ones included. A source recorded incomplete stays
dead until it changes: later passes neither wait for it nor record it again.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import stat
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs

from profdsl.collect._manifest import append_record, make_record, read_records
from profdsl.config._parallel import known_coords
from profdsl.core._files import open_regular
from profdsl.core._log import described
from profdsl.core._naming import MAX_INDEX, NSYS_EXT, TEMP_PREFIX, TraceName
from profdsl.records.manifest import MovedRecord, NsysRecord

__all__ = [
    "Move",
    "Skip",
    "apply",
    "default_nsys_dir",
    "direct",
    "gzip_complete",
    "plan_nsys",
    "reserve",
    "wait_complete",
    "wait_converted",
]

T = TypeVar("T")

#: Poll interval while waiting for files to stop growing.
POLL_S = 0.2
#: Why a source that is a link (or a FIFO, a device, a folder) is left where it is.
NOT_REGULAR = "not a regular file (symlinks are not followed)"


def direct(action: Callable[[], T]) -> T:
    """The commit of a caller that never refuses."""
    return action()


@attrs.frozen
class Move:
    """Move ``source`` into ``save_path`` as ``name``; ``fields`` go into its manifest record."""

    source: str
    name: TraceName
    kind: str
    fields: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Skip:
    """Leave ``source`` where it is, for ``reason``. ``status`` None: never recorded (left on
    purpose); ``"incomplete"``: recorded at the last pass; ``"skipped"``: always recorded."""

    source: str
    reason: str
    kind: str = "nsys"
    status: str | None = None
    fields: dict[str, Any] = attrs.field(factory=dict)


def reserve(save_path: str, name: TraceName) -> TraceName:
    """Create an empty file under ``name`` (or the next free ``part``); return the name used."""
    candidate = name
    while True:
        path = os.path.join(save_path, candidate.format())
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return candidate
        except FileExistsError:
            part = (candidate.part or 0) + 1
            if part > MAX_INDEX:
                raise
            candidate = attrs.evolve(candidate, part=part)


def gzip_complete(path: str) -> bool:
    """Whether ``path`` is a whole gzip stream (decompressed in chunks: bounded memory). A link
    or no regular file is not: it is opened by its own name, never followed, never blocked on
    (a FIFO: :func:`~profdsl.core._files.open_regular`)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        with open_regular(path) as file:
            while block := file.read(1 << 20):
                inflater.decompress(block, 0)
                if inflater.eof:
                    return True
    except (OSError, zlib.error):
        return False
    return inflater.eof


def wait_complete(paths: Sequence[str], timeout_s: float, poll_s: float = POLL_S) -> list[str]:
    """Wait until each file's size and mtime hold still over one poll (and a ``.gz`` is a whole
    stream), at most ``timeout_s``; return the paths still incomplete then. A ``.gz`` that is a
    whole stream already is complete at once: its writer wrote its trailer last, and a caller
    waits on this (tests/test_artifacts.py). A path that is there but no regular file is
    :func:`_no_trace`: never waited on, so never incomplete (its move records it skipped)."""
    deadline = time.monotonic() + timeout_s
    pending = {p: _signature(p) for p in paths if not (_no_trace(p) or (p.endswith(".gz") and gzip_complete(p)))}
    while pending:
        time.sleep(poll_s)
        for path, before in list(pending.items()):
            now = _signature(path)
            if _no_trace(path) or (
                now is not None and now == before and now[0] > 0 and (not path.endswith(".gz") or gzip_complete(path))
            ):
                del pending[path]
            else:
                pending[path] = now
        if time.monotonic() >= deadline:
            break
    return sorted(pending)


def _signature(path: str) -> tuple[int, int] | None:
    """The size and mtime of ``path`` when it is a regular file (``lstat``: a link is never
    followed, its target's size never reported); None otherwise."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def _no_trace(path: str) -> bool:
    """Whether ``path`` is there but no regular file (:func:`_is_regular`: a link, a FIFO, a
    folder): no trace, neither followed nor waited on; its move leaves it where it is, recorded
    ``skipped`` (:func:`_take`, :data:`NOT_REGULAR`). One missing is waited on (as before)."""
    return not _is_regular(path) and os.path.lexists(path)


def default_nsys_dir() -> str:
    """Where Ray's nsight plugin writes reports: ``<session dir>/logs/nsight``."""
    ray = sys.modules.get("ray")
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    session = getattr(node, "get_session_dir_path", None)
    base = session() if callable(session) else os.path.join("/tmp", "ray", "session_latest")
    return os.path.join(base, "logs", "nsight")


_NSYS = re.compile(r"worker_process_(?P<pid>[0-9]+)(?P<index>\.[0-9]+)?\.(?P<ext>nsys-rep|qdstrm)")


def _ours(names: Iterable[str], pid: int) -> dict[str, re.Match[str]]:
    """This process's nsys files among ``names``."""
    return {name: match for name in names if (match := _NSYS.fullmatch(name)) and int(match["pid"]) == pid}


def wait_converted(source_dir: str, pid: int, timeout_s: float) -> bool:
    """Wait until no ``.qdstrm`` of process ``pid`` is left in ``source_dir`` (nsys has written
    every report), at most ``timeout_s``; False when some is still converting then."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            names = os.listdir(source_dir)
        except OSError:
            return True
        if not any(m["ext"] == "qdstrm" for m in _ours(names, pid).values()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def plan_nsys(
    names: Iterable[str], *, source_dir: str, pid: int, label: dict[str, Any], time_ms: int
) -> list[Move | Skip]:
    """Which of ``names`` (a listing of ``source_dir``) to move: this process's ``.nsys-rep``
    reports whose ``.qdstrm`` conversion is over. A report still converting (its ``.qdstrm``
    there, its ``.nsys-rep`` being written or not yet begun) is a :class:`Skip` of the report it
    will be. ``label`` holds role, rank, world_size, host."""
    ours = _ours(names, pid)
    converting = {m["index"] for m in ours.values() if m["ext"] == "qdstrm"}
    known = NsysRecord(**label)  # the record fields the label gives (a field no record has: TypeError)
    plan: list[Move | Skip] = []
    for name, match in sorted(ours.items()):
        if match["ext"] == "qdstrm":
            report = f"worker_process_{pid}{match['index'] or ''}.nsys-rep"
            plan.append(
                Skip(
                    os.path.join(source_dir, report),
                    "nsys is still converting its .qdstrm",
                    status="incomplete",
                    fields=dict(label),
                )
            )
            continue
        source = os.path.join(source_dir, name)
        if match["index"] in converting:
            continue  # its Skip comes with its .qdstrm
        part = int(match["index"][1:]) if match["index"] else None
        coords: dict[str, Any] = dict(known_coords(known))
        trace = TraceName(
            role=str(known.role),
            rank=known.rank,
            world_size=known.world_size,
            host=str(known.host),
            pid=pid,
            time_ms=time_ms,
            part=part,
            ext=NSYS_EXT,
            **coords,
        )
        plan.append(Move(source, trace, "nsys", dict(label)))
    return plan


def apply(
    plan: Sequence[Move | Skip],
    save_path: str,
    *,
    wait_s: float,
    record_incomplete: bool,
    commit: Callable[[Callable[[], Any]], Any] = direct,
) -> list[dict[str, Any]]:
    """Carry out ``plan``; returns (and appends to the manifest) one record per file handled.

    Sources still incomplete after ``wait_s`` (one deadline for them all) stay where they are;
    with ``record_incomplete`` they are recorded as ``incomplete``, with the size and mtime they
    had. A source already recorded so and unchanged since is dead: it is neither waited for nor
    recorded again. Each move and each record goes through ``commit``, which may refuse (the
    runtime's writer was given up): what was not moved then stays where it was.
    """
    dead = _recorded_incomplete(save_path) if plan else {}
    plan = [item for item in plan if not (item.source in dead and _signature(item.source) == dead[item.source])]
    moves = [m for m in plan if isinstance(m, Move) and _is_regular(m.source)]
    incomplete = set(wait_complete([m.source for m in moves], wait_s)) if moves else set()
    records = []
    for item in plan:
        if isinstance(item, Skip):
            if item.status != "skipped" and not (item.status == "incomplete" and record_incomplete):
                continue
            make = functools.partial(_unmoved, item, item.status, item.reason)
        elif item not in moves:
            make = functools.partial(_unmoved, item, "skipped", NOT_REGULAR)
        elif item.source in incomplete:
            if not record_incomplete:
                continue
            make = functools.partial(_unmoved, item, "incomplete", "still being written")
        else:
            make = functools.partial(_move, item, save_path)
        record = commit(functools.partial(_recorded, save_path, make))
        if record is not None:
            records.append(record)
    return records


def _recorded(save_path: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Make one record and append it, in one commit (a move's: no file without its record)."""
    record = make()
    append_record(save_path, record)
    return record


def _record(item: Move | Skip, path: str | None, **happened: Any) -> dict[str, Any]:
    """The record of ``item``'s source: what happened to it overrides its planned fields (a
    ``stray`` file that could not be moved is recorded for that, not as stray)."""
    return make_record(item.kind, path, **dict(item.fields, source=item.source, **happened))


def _unmoved(item: Move | Skip, status: str, reason: str) -> dict[str, Any]:
    """The record of a source left where it is; an incomplete one keeps its size and mtime."""
    signature = _signature(item.source) if status == "incomplete" else None
    sizes = {} if signature is None else dict(source_bytes=signature[0], source_mtime_ns=signature[1])
    return _record(item, None, status=status, reason=reason, **sizes)


def _recorded_incomplete(save_path: str) -> dict[str, tuple[int, int]]:
    """The sources ``save_path``'s manifest records as incomplete, with their size and mtime then."""
    try:
        records = read_records(save_path)
    except (OSError, ValueError):
        return {}
    dead = {}
    for record in records:
        if (
            isinstance(record, MovedRecord)
            and record.status == "incomplete"
            and record.source is not None
            and record.source_bytes is not None
            and record.source_mtime_ns is not None
        ):
            dead[record.source] = (record.source_bytes, record.source_mtime_ns)
    return dead


def _is_regular(path: str) -> bool:
    return _signature(path) is not None  # lstat: a symlink is never followed out


def _move(move: Move, save_path: str) -> dict[str, Any]:
    """Move one source in under its reserved name; the record of what happened. A source that is
    no regular file when moved (swapped for a link since :func:`apply` checked it) is left where
    it is and recorded as :func:`apply` records one found so at its check."""
    reserved: str | None = None
    try:
        os.makedirs(save_path, exist_ok=True)
        name = reserve(save_path, move.name).format()
        reserved = os.path.join(save_path, name)
        if not _take(move.source, save_path, reserved):
            os.remove(reserved)  # the empty reservation
            return _unmoved(move, "skipped", NOT_REGULAR)
        size = os.lstat(reserved).st_size
    except Exception as exc:
        if reserved is not None and os.path.exists(reserved) and os.path.getsize(reserved) == 0:
            os.remove(reserved)
        return _record(move, None, status="failed", intended=move.name.format(), error=described(exc))
    return _record(move, name, bytes=size)


def _take(source: str, save_path: str, destination: str) -> bool:
    """Move ``source`` in as ``destination`` when it is a regular file as it is moved; False,
    nothing moved, when it is not. :func:`apply` checked it (``lstat``) before waiting for it,
    and it may have been swapped for a link since: it is renamed into a private staging name
    first, what was moved is checked there, and a link goes back where it was, so that no trace
    name ever holds one. Across filesystems, the copy opens the source itself (never through a
    link, never blocked by a FIFO: :func:`~profdsl.core._files.open_regular`)."""
    staging = _temporary(save_path)
    try:
        os.replace(source, staging)  # atomic within a filesystem
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return _copy_across(source, save_path, destination)
    regular = False
    try:
        regular = stat.S_ISREG(os.lstat(staging).st_mode)
        if regular:
            os.replace(staging, destination)
    except BaseException:
        _put_back(staging, source, regular)
        raise
    if not regular:
        _put_back(staging, source, regular)
    return regular


def _put_back(staging: str, source: str, regular: bool) -> None:
    """Move what was staged back where it came from, best effort. Where that fails, a link (or
    anything but a regular file) is removed, never left in save_path; a regular file stays
    under its staging name (a leftover the readers name), never lost."""
    try:
        os.replace(staging, source)
    except OSError:
        if not regular:
            os.remove(staging)


def _temporary(save_path: str) -> str:
    """A private name in save_path, unguessable, that readers leave alone (``TEMP_PREFIX``)."""
    return os.path.join(save_path, f"{TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}")


def _copy_across(source: str, save_path: str, destination: str) -> bool:
    """Copy to a temporary name beside ``destination``, fsync, rename, then drop the source;
    False, nothing copied, when ``source`` is a link or no regular file. A source that cannot be
    dropped (its folder not writable) was not moved: its copy goes, so that no trace stays in
    save_path without its record, nor is copied in again at every later pass; the error is
    raised."""
    tmp = _temporary(save_path)
    try:
        src = open_regular(source)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):  # a link, or no regular file: left where it is
            return False
        raise
    try:
        with src, open(tmp, "xb") as dst:  # O_EXCL: never through a planted link
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, destination)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    try:
        os.remove(source)
    except FileNotFoundError:  # gone meanwhile: the copy is all there is
        pass
    except BaseException:
        os.remove(destination)
        raise
    return True
