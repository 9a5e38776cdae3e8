"""Streaming reads of Chrome trace files (``.json`` or ``.json.gz``) in bounded memory.

Real traces reach hundreds of MB to GB, so nothing here loads a whole trace: events come one at a
time from ijson's C parser, and the top-level metadata (``profdsl``, ``distributedInfo``,
``baseTimeNanoseconds``), which torch writes before ``traceEvents``, is read from the file's head.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["TraceError", "events", "header", "open_trace"]

#: Read buffer for streaming events; the header is read with a small one (it is near the start,
#: and ijson's C backend builds a whole buffer's parse events at once).
CHUNK = 1 << 20
HEADER_CHUNK = 1 << 16


class TraceError(Exception):
    """A file that is not a readable Chrome trace."""


def open_trace(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a trace for reading, decompressing ``.gz`` on the fly."""
    path = os.fspath(path)
    try:
        raw: IO[bytes] = open(path, "rb")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from exc
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def _ijson() -> Any:
    try:
        import ijson
    except ImportError as exc:  # pragma: no cover - ijson is a dependency
        raise TraceError("reading traces needs the ijson package (pip install ijson)") from exc
    return ijson


def header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level keys written before ``traceEvents`` (where torch puts its metadata)."""
    ijson = _ijson()
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
                if prefix == key and event in ("end_map", "end_array", "string", "number",
                                               "boolean", "null", "integer", "double"):
                    meta[key] = builder.value
                    builder = None
    except (ijson.JSONError, EOFError, OSError, zlib.error, gzip.BadGzipFile, io.UnsupportedOperation) as exc:
        raise TraceError(f"{os.fspath(path)}: {exc}") from exc
    return meta


def events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every event of ``traceEvents``, one at a time.

    Raises:
        TraceError: the file is missing, not gzip, not JSON, or cut short.
    """
    ijson = _ijson()
    try:
        with open_trace(path) as stream:
            yield from ijson.items(stream, "traceEvents.item", use_float=True, buf_size=CHUNK)
    except (ijson.JSONError, ijson.IncompleteJSONError, EOFError, OSError, zlib.error) as exc:
        raise TraceError(f"{os.fspath(path)}: {exc}") from exc
