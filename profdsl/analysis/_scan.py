"""Reading one trace for stage times: its profdsl region events and, where needed, its span.

Two readers give the same :class:`TraceScan`, exact to the bit:

- the **fast** one (:func:`scan_file`) relies on the layout torch's kineto writes, one event per
  block (``\\n  {`` … ``\\n  }``, each key on its own line). It decompresses in large blocks and
  only parses the blocks whose own ``"name"`` is one of the trace's region names, skipping
  everything else by a byte search; the span of an engine's trace comes from its ``"ts"`` /
  ``"dur"`` lines, checked to be one per complete event;
- the **streaming** one (:func:`scan_events`) reads every event through
  :func:`profdsl.analysis._reader.events`. The fast reader falls back to it whenever a file
  does not follow the layout, or anything about it looks wrong, so a malformed trace gets the
  one reader's errors (:class:`~profdsl.analysis._reader.TraceError`).

What counts: a region is a complete event (``ph`` ``X``) named as one of the trace's regions
(:class:`~profdsl.analysis._regions.RegionNames`), except GPU-side copies of annotations
(``gpu_user_annotation``), which would count a region twice; a span is the first start to the
last end of the trace's complete events.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import IO, Any

import attrs

from profdsl.analysis._reader import TraceError, event_problem, events, open_trace
from profdsl.analysis._regions import RegionNames
from profdsl.records.meta import META_KEY, base_time_ns

__all__ = ["Piece", "TraceScan", "piece", "scan_events", "scan_file", "spans_whole"]

#: Decompressed bytes read at a time by the fast reader (its memory is about twice this).
CHUNK = 8 << 20
#: The header (metadata, then ``"traceEvents": [``) must end within this many bytes.
HEAD_LIMIT = 16 << 20
_GPU_COPY = "gpu_user_annotation"
_START, _END = b"\n  {", b"\n  }"
_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPAN = re.compile(rb'\n    "ts": (-?[0-9][0-9.eE+-]*),\n    "dur": ([0-9][0-9.eE+-]*)')
_COMPLETE = b'\n    "ph": "X",'
_TAIL = re.compile(rb'\A\s*\][^\[\]{}]*(?:"[^"]*"[^\[\]{}]*)*\}\s*\Z')


@attrs.frozen
class Piece:
    """One region event: its label, its mini-batch index (None for a stage), the thread it ran
    on, and its start and duration in the trace's microseconds."""

    label: str
    index: int | None
    tid: str
    ts: float
    dur: float


@attrs.frozen
class TraceScan:
    """What one trace holds for stage times: its region events in file order, the span of its
    complete events (None when not asked for, or when it has none), its clock origin
    (``baseTimeNanoseconds``), and its region names (which say how many events continue an
    earlier entry, and the kinds its stages declared)."""

    pieces: tuple[Piece, ...]
    span: tuple[float, float] | None
    base_ns: int
    names: RegionNames


def spans_whole(kind: str, meta: Mapping[str, Any]) -> bool:
    """Whether a trace's span is read (``span``): a rollout engine's trace, or one without profdsl
    metadata, stands for one region over its whole span (the stage-time model's root)."""
    return kind == "rollout" or META_KEY not in meta


def piece(event: Mapping[str, Any], found: tuple[str, int | None] | None) -> Piece | None:
    """The complete event ``event`` as a region event, ``found`` its label and index
    (:meth:`RegionNames.label`); None when it is none, or a GPU-side copy of one."""
    if found is None or event.get("cat") == _GPU_COPY:
        return None
    return Piece(found[0], found[1], str(event.get("tid")), float(event.get("ts", 0)), float(event.get("dur", 0)))


def _piece(names: RegionNames, event: Mapping[str, Any]) -> Piece | None:
    return piece(event, names.label(str(event.get("name", "")))) if event.get("ph") == "X" else None


def scan_events(meta: Mapping[str, Any], stream: Iterable[Mapping[str, Any]], *, span: bool) -> TraceScan:
    """The scan of a trace whose header is ``meta`` from its (well-formed) events ``stream``;
    with ``span``, also the span of its complete events."""
    names = RegionNames.from_header(meta)
    pieces: list[Piece] = []
    first, last = float("inf"), float("-inf")
    for event in stream:
        if span and event.get("ph") == "X":
            ts = float(event.get("ts", 0))
            first, last = min(first, ts), max(last, ts + float(event.get("dur", 0)))
        if not names.empty:
            piece = _piece(names, event)
            if piece is not None:
                pieces.append(piece)
    extent = (first, last) if first <= last else None
    return TraceScan(tuple(pieces), extent, base_time_ns(meta), names)


def scan_file(path: str | os.PathLike[str], meta: Mapping[str, Any], *, span: bool) -> TraceScan:
    """The scan of the trace file ``path`` (header ``meta``, already read and checked): the fast
    reader, or the streaming one where the file does not follow kineto's layout.

    Raises:
        TraceError: the trace cannot be read or is malformed (the streaming reader's reasons).
    """
    try:
        found = _fast(path, meta, span=span)
    except (OSError, EOFError, zlib.error, ValueError, TraceError):
        found = None
    return scan_events(meta, events(path), span=span) if found is None else found


class _LayoutError(Exception):
    """The file does not follow the layout the fast reader relies on."""


def _fast(path: str | os.PathLike[str], meta: Mapping[str, Any], *, span: bool) -> TraceScan | None:
    """The scan by the fast reader; None when the file does not follow the layout."""
    names = RegionNames.from_header(meta)
    prefixes = names.prefixes()
    wanted = (
        re.compile(rb'\n    "name": "((?:' + b"|".join(re.escape(p.encode()) for p in prefixes) + rb')[0-9]*)"')
        if prefixes
        else None
    )
    state = _State(names, wanted, span)
    try:
        with open_trace(path) as stream:
            data = _skip_header(stream)
            while True:
                block = stream.read(CHUNK)
                data += block
                cut = data.rfind(_END)
                if cut >= 0:  # the complete event blocks so far; the rest waits for more
                    state.body(data, cut + len(_END))
                    data = data[cut + len(_END) :]
                elif len(data) > HEAD_LIMIT:
                    return None  # no event boundary for this long: not kineto's layout
                if not block:
                    break
        state.tail(data)
    except _LayoutError:
        return None
    extent = (state.first, state.last) if span and state.first <= state.last else None
    return TraceScan(tuple(state.pieces), extent, base_time_ns(meta), names)


def _skip_header(stream: IO[bytes]) -> bytes:
    """Read up to the start of the events array; what was read beyond it."""
    head = b""
    while len(head) <= HEAD_LIMIT:
        block = stream.read(1 << 16)
        head += block
        match = _EVENTS.search(head)
        if match is not None:
            return head[match.end() :]
        if not block:
            break
    raise _LayoutError


class _State:
    """What the fast reader has found so far."""

    def __init__(self, names: RegionNames, wanted: re.Pattern[bytes] | None, span: bool) -> None:
        self.names, self.wanted, self.span = names, wanted, span
        self.pieces: list[Piece] = []
        self.first, self.last = float("inf"), float("-inf")
        self.blocks = 0

    def body(self, data: bytes, end: int) -> None:
        """The complete event blocks of ``data[:end]``."""
        if not data[:4096].lstrip(b", \t\r\n").startswith(b"{"):
            raise _LayoutError
        self.blocks += data.count(_START, 0, end)
        if self.wanted is not None:
            for match in self.wanted.finditer(data, 0, end):
                self._region(data, match)
        if self.span:
            complete = data.count(_COMPLETE, 0, end)
            spans = _SPAN.findall(data, 0, end)
            if len(spans) != complete:
                raise _LayoutError  # a complete event whose ts and dur are not where expected
            for ts_text, dur_text in spans:
                ts = float(ts_text)
                if ts < self.first:
                    self.first = ts
                end_us = ts + float(dur_text)
                if end_us > self.last:
                    self.last = end_us

    def _region(self, data: bytes, match: re.Match[bytes]) -> None:
        if self.names.label(match[1].decode()) is None:
            return  # a longer name that only starts like a region's
        start = data.rfind(_START, 0, match.start() + 1)
        end = data.find(_END, match.end())
        if start < 0 or end < 0:
            raise _LayoutError
        event = json.loads(data[start + 1 : end + len(_END)])
        if event_problem(event) is not None:
            raise _LayoutError  # the streaming reader names it
        piece = _piece(self.names, event)
        if piece is not None:
            self.pieces.append(piece)

    def tail(self, rest: bytes) -> None:
        """After the last event block: the array and the object close, and nothing else."""
        if self.blocks == 0 or not _TAIL.match(rest):
            raise _LayoutError
