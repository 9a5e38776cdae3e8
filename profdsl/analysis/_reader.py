"""Streaming reads of Chrome trace files (``.json`` or ``.json.gz``) in bounded memory.

Real traces reach hundreds of MB to GB, so nothing here loads a whole trace: events come one at a
time from ijson's C parser, and the top-level metadata (``profdsl``, ``distributedInfo``,
``baseTimeNanoseconds``), which torch writes before ``traceEvents``, is read from the file's head.

This is the one place that decides a trace is malformed: :func:`header` refuses metadata of the
wrong shape, :func:`events` yields only well-formed events and, once the stream ends, raises
:class:`TraceError` naming the first malformed one (:func:`event_problem`). ``profdsl check``
and ``merge`` read every event through them; the fast reader of ``summary`` and ``plot``
(:mod:`profdsl.analysis._scan`) checks the events it uses by the same rule and hands any file it
doubts to :func:`events`, so every command skips a trace for the same reason, and ``check`` also
fails on a malformed event the fast reader skipped over unread.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import zlib
from collections.abc import Iterator
from typing import IO, Any

from profdsl.config._checks import brief
from profdsl.core._files import file_kind, open_regular
from profdsl.records.fields import RecordError
from profdsl.records.meta import DISTRIBUTED_KEY, base_time_ns, header_meta

__all__ = [
    "MAX_TIME_US",
    "TraceError",
    "event_problem",
    "events",
    "file_kind",
    "header",
    "open_trace",
]

#: Read buffer for streaming events; the header is read with a small one (it is near the start,
#: and ijson's C backend builds a whole buffer's parse events at once).
CHUNK = 1 << 20
HEADER_CHUNK = 1 << 16
#: Largest ``ts`` magnitude and ``dur`` accepted, in microseconds (about 31,700 years): beyond it
#: sums of times stop being finite numbers a plot can draw.
MAX_TIME_US = 1e18
#: ijson's parse events that end a top-level value of the header.
_VALUE_ENDS = frozenset({"end_map", "end_array", "string", "number", "boolean", "null", "integer", "double"})
_NUMBERS = frozenset({int, float})
_IDS = frozenset({int, str})


class TraceError(Exception):
    """A file that is not a readable Chrome trace."""


def open_trace(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a trace for reading, decompressing ``.gz`` on the fly; closing it closes the file.

    Only a regular file is read (:func:`~profdsl.core._files.open_regular`): a link is refused
    unfollowed, and the file is opened without blocking and checked with ``fstat`` before anything
    is read, so a FIFO, a device or a folder named like a trace is refused at once (a FIFO opened
    for reading would otherwise wait for a writer forever).

    Raises:
        TraceError: the file is missing, a link, not a regular file, empty or cannot be opened.
    """
    path = os.fspath(path)
    try:
        raw: IO[bytes] = open_regular(path)
    except FileNotFoundError as exc:
        raise TraceError(f"{path}: missing") from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):  # a link, not a regular file (its kind named)
            raise TraceError(f"{path}: {exc.strerror}") from None
        raise TraceError(f"{path}: unreadable: {exc.strerror or exc}") from exc
    if os.fstat(raw.fileno()).st_size == 0:
        raw.close()
        raise TraceError(f"{path}: empty")
    if path.endswith(".gz"):
        return _Gzip(raw)  # type: ignore[return-value]
    return raw


class _Gzip(gzip.GzipFile):
    """A ``GzipFile`` over a file it owns: closing it closes the file too (a plain ``GzipFile``
    given ``fileobj`` leaves it open, and an unclosed file warns)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        try:
            super().__init__(fileobj=raw, mode="rb")
        except BaseException:
            raw.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _unreadable(path: str | os.PathLike[str], exc: BaseException) -> TraceError:
    """A one-line error (ijson's messages go on to draw the spot over several lines)."""
    first = next(iter(str(exc).splitlines()), "") or type(exc).__name__
    return TraceError(f"{os.fspath(path)}: unreadable: {first}")


def header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level keys written before ``traceEvents`` (where torch puts its metadata).

    Raises:
        TraceError: the file cannot be read, or metadata profdsl reads has the wrong shape: the
            ``profdsl`` metadata must fit the schema (:func:`~profdsl.records.meta.parse_meta`),
            ``distributedInfo`` be an object and ``baseTimeNanoseconds`` a whole number of
            nanoseconds >= 0.
    """
    import ijson

    meta: dict[str, Any] = {}
    try:
        with open_trace(path) as stream:
            builder: Any = None
            key = None
            for prefix, event, value in ijson.parse(stream, buf_size=HEADER_CHUNK):
                if builder is None:
                    if prefix == "" and event == "map_key":
                        if value == "traceEvents":
                            break
                        key, builder = value, ijson.ObjectBuilder()
                    elif prefix == "" and event not in ("start_map", "end_map"):
                        raise TraceError(f"{os.fspath(path)}: not a JSON object")
                    continue
                builder.event(event, value)
                if prefix == key and event in _VALUE_ENDS:
                    meta[key] = builder.value
                    builder = None
    except (ijson.JSONError, EOFError, OSError, ValueError, zlib.error, io.UnsupportedOperation) as exc:
        raise _unreadable(path, exc) from exc
    try:
        header_meta(meta)
        base_time_ns(meta)
    except RecordError as exc:
        raise TraceError(f"{os.fspath(path)}: {exc}") from None
    info = meta.get(DISTRIBUTED_KEY, {})
    if not isinstance(info, dict):
        raise TraceError(f"{os.fspath(path)}: {DISTRIBUTED_KEY} metadata is {brief(info)}, not an object")
    return meta


def event_problem(event: object) -> str | None:
    """What makes one trace event malformed, or None: an event is an object; ``ts`` and ``dur``,
    when present, are numbers of microseconds (``dur`` >= 0) within :data:`MAX_TIME_US`;
    ``name``, ``cat`` and ``ph`` strings; ``pid`` and ``tid`` integers or strings."""
    if type(event) is not dict:
        return f"is {brief(event)}, not an object"
    get = event.get  # every event passes here: one straight test first, the reason only when it fails
    ts, dur, pid, tid = get("ts", 0), get("dur", 0), get("pid", 0), get("tid", 0)
    if (
        type(ts) in _NUMBERS
        and type(dur) in _NUMBERS
        and -MAX_TIME_US <= ts <= MAX_TIME_US
        and 0 <= dur <= MAX_TIME_US
        and type(get("name", "")) is str
        and type(get("ph", "")) is str
        and type(get("cat", "")) is str
        and type(pid) in _IDS
        and type(tid) in _IDS
    ):
        return None
    for key, low in (("ts", -MAX_TIME_US), ("dur", 0.0)):
        value = get(key, 0)
        if type(value) not in _NUMBERS or not low <= value <= MAX_TIME_US:
            return f"has {key} {brief(value)}, not a time in microseconds"
    for key in ("name", "cat", "ph"):
        if type(get(key, "")) is not str:
            return f"has {key} {brief(event[key])}, not a string"
    key = "pid" if type(pid) not in _IDS else "tid"
    return f"has {key} {brief(event[key])}, not an integer or a string"


def events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every well-formed event of ``traceEvents``, one at a time (see :func:`event_problem`).

    Malformed events are not yielded; once the stream ends, the first is named in a TraceError.
    A caller that keeps what it read must therefore drop it when TraceError comes.

    Raises:
        TraceError: the file is missing, empty, not gzip, not JSON or cut short, holds no event,
            or holds a malformed event.
    """
    import ijson

    count, bad, first = 0, 0, ""
    try:
        with open_trace(path) as stream:
            for event in ijson.items(stream, "traceEvents.item", use_float=True, buf_size=CHUNK):
                count += 1
                problem = event_problem(event)
                if problem is None:
                    yield event
                    continue
                bad += 1
                first = first or f"traceEvents[{count - 1}] {problem}"
    except (ijson.JSONError, EOFError, OSError, ValueError, zlib.error) as exc:
        raise _unreadable(path, exc) from exc
    if bad:
        more = f" (and {bad - 1} more malformed events)" if bad > 1 else ""
        raise TraceError(f"{os.fspath(path)}: {first}{more}")
    if count == 0:
        raise TraceError(f"{os.fspath(path)}: no trace events")
