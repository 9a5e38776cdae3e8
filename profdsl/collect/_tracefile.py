"""Finishing a trace file: torch's plain JSON export, with profdsl's metadata spliced in as its
first top-level keys, gzip-compressed in 1 MB blocks (or, at level 0, written plain in 1 MB
blocks), and checked on disk.

Everything happens in the folder of the files given (``save_path``): nothing goes through
``TMPDIR``. The check is cheap and needs no second read of the trace. While streaming it sees
that the export is a JSON object holding ``"traceEvents"`` (its first non-blank byte is ``{``
and its last ``}``: an empty or cut-short export fails). After writing it sees that the file on
disk is exactly what was written: its size is what was written and, for gzip, its trailer holds
the CRC-32 and length of what went in (a plain file is checked by its size alone: a checksum
would mean reading it all back). It does not parse every event: that would cost a full JSON
parse of a trace that can reach gigabytes; ``profdsl check`` does it.

While streaming, a :class:`Census` can also look at what the events hold (any event, any profdsl
region, any device activity: :mod:`profdsl.core._completeness` names a window lost by them). Each
of its searches stops at its first hit, so a trace costs one pass of ``bytes.find`` per search at
most, and usually a few kilobytes.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Mapping

from profdsl.config._checks import require_int
from profdsl.core._completeness import Seen

__all__ = ["BLOCK", "COMPRESS_LEVEL", "Census", "InvalidTraceError", "check_size", "check_written", "compress_trace"]

#: Bytes read, compressed and written at a time.
BLOCK = 1 << 20
#: Default gzip level of the traces profdsl writes (``TorchOptions.compress_level``, whose
#: default it is; 0: plain JSON). Why level 1: the measurements in docs/configuration.md.
COMPRESS_LEVEL = 1
_EVENTS_KEY = b'"traceEvents"'


class InvalidTraceError(Exception):
    """A trace that failed its check; the message says why."""


#: How kineto writes an event's category (``export_chrome_trace``'s layout, torch 2.1-2.13).
_CAT = b'"cat": "'
#: kineto's own span of every capture (``"cat": "Trace"``): no event of the window.
_KINETO_SPAN = b"Trace"
#: A profdsl region (``record_function``: a user annotation on the CPU side).
_REGION = _CAT + b'user_annotation"'
#: Device activity (CUPTI's records): kernels, memcpy, memset, GPU annotations, runtime and
#: driver calls.
_DEVICE = (_CAT + b'kernel"', _CAT + b"gpu_", _CAT + b"cuda_")
_LONGEST = max(len(p) for p in (_REGION, *_DEVICE)) + len(_KINETO_SPAN)


class Census:
    """What a trace's events hold, seen block by block while it streams (:func:`compress_trace`):
    any event but kineto's own span and, where a device's activity is expected (``device``), any
    region and any device activity (the regions only matter beside it). Every search stops at
    its first hit; a pattern cut by a block boundary is found across it."""

    def __init__(self, *, device: bool = False) -> None:
        self.events = False
        self.regions = self.device = not device  # nothing to look for: counted as seen
        self.json_bytes = 0
        self._carry = b""

    def feed(self, block: bytes) -> None:
        """The next block of the events file, as read (searched in place: a pattern across the
        boundary with the block before is looked for in a short piece around it)."""
        if not (self.events and self.regions and self.device):
            head = self._carry + block[:_LONGEST]
            self.events = self.events or _any_event(head) or _any_event(block)
            self.regions = self.regions or _REGION in head or _REGION in block
            self.device = self.device or any(p in head or p in block for p in _DEVICE)
            self._carry = (self._carry + block[-_LONGEST:])[-_LONGEST:]

    def seen(self) -> Seen:
        """What it saw (once the trace is written: ``json_bytes`` set)."""
        return Seen(events=self.events, regions=self.regions, device=self.device, json_bytes=self.json_bytes)


def _any_event(data: bytes) -> bool:
    """Whether ``data`` holds an event category other than kineto's span."""
    at = data.find(_CAT)
    while at >= 0:
        end = at + len(_CAT)
        if len(data) - end >= len(_KINETO_SPAN) + 1 and data[end : end + len(_KINETO_SPAN) + 1] != _KINETO_SPAN + b'"':
            return True
        at = data.find(_CAT, end)
    return False


def compress_trace(
    source: str,
    destination: str,
    header: Mapping[str, object] | None = None,
    *,
    level: int = COMPRESS_LEVEL,
    census: Census | None = None,
) -> int:
    """Write ``destination`` (created exclusively): the JSON object of ``source`` with the keys
    of ``header`` first, gzip-compressed at ``level`` (1..9), or plain JSON at level 0. Returns
    its size in bytes. ``census`` sees every block of ``source`` and learns the size of the
    JSON written (its ``json_bytes``).

    Raises:
        ConfigError: ``level`` is not an integer in 0..9.
        InvalidTraceError: ``source`` is empty, not a JSON object, cut short, holds no
            ``traceEvents``, or ``destination`` is not on disk as written.
        OSError: reading or writing failed.
    """
    require_int("compress_trace level", level, 0, 9)
    members = json.dumps(dict(header), default=str)[1:-1].encode() if header else b""
    out = _Packer(level)
    opened = found = False
    last, previous = b"", b""
    with open(source, "rb") as src, open(destination, "xb") as dst:
        while block := src.read(BLOCK):  # each block is searched and packed in place (no copy of it)
            key = len(_EVENTS_KEY)
            found = found or _EVENTS_KEY in block or _EVENTS_KEY in previous + block[: key - 1]
            previous = (previous + block[-key:])[-key:]  # the stream's last bytes, across blocks
            if census is not None:
                census.feed(block)
            last = _last_byte(block) or last
            if opened:
                dst.write(out.pack(block))
                continue
            start = _FIRST.search(block)
            if start is None:
                continue
            if block[start.start() : start.start() + 1] != b"{":
                raise InvalidTraceError(f"not a JSON object: it starts with {block[start.start() :][:16]!r}")
            opened = True
            view = memoryview(block)[start.start() :]
            if members:
                dst.write(out.pack(b"{" + members + b","))
                view = view[1:]
            dst.write(out.pack(view))
        if not opened:
            raise InvalidTraceError("empty trace: the export wrote no JSON")
        if last != b"}":
            raise InvalidTraceError(f"cut short: the export does not end with '}}' but {last!r}")
        if not found:
            raise InvalidTraceError("no traceEvents in the export")
        dst.write(out.finish())
    if out.deflate is None:
        check_size(destination, out.written)
    else:
        check_written(destination, compressed=out.written, crc=out.crc, size=out.size)
    if census is not None:
        census.json_bytes = out.size
    return out.written


#: The first byte that is not ASCII whitespace (what ``bytes.lstrip`` strips).
_FIRST = re.compile(rb"[^ \t\n\r\x0b\x0c]")


def _last_byte(block: bytes) -> bytes:
    """The last byte of ``block`` that is not whitespace (b"" when there is none), read from its
    end without copying it."""
    tail = block[-64:].rstrip()
    return tail[-1:] if tail else block.rstrip()[-1:]


class _Packer:
    """Packs the pieces of a trace: gzip at ``level`` (1..9, its CRC-32 and length kept for the
    check), or as they are at level 0; counts the bytes that go in (``size``) and out
    (``written``)."""

    def __init__(self, level: int) -> None:
        self.deflate = zlib.compressobj(level, zlib.DEFLATED, 31) if level else None  # wbits 31: gzip
        self.crc = self.size = self.written = 0

    def pack(self, piece: bytes | memoryview) -> bytes | memoryview:
        self.size += len(piece)
        if self.deflate is not None:
            self.crc = zlib.crc32(piece, self.crc)
            piece = self.deflate.compress(piece)
        self.written += len(piece)
        return piece

    def finish(self) -> bytes:
        packed = self.deflate.flush() if self.deflate is not None else b""
        self.written += len(packed)
        return packed


def check_size(path: str, written: int) -> None:
    """Check that ``path`` holds exactly the ``written`` bytes (a plain trace's check).

    Raises:
        InvalidTraceError: it does not.
    """
    actual = os.path.getsize(path)
    if actual != written:
        raise InvalidTraceError(f"the file is cut short or padded on disk: {actual} bytes, {written} written")


def check_written(path: str, *, compressed: int, crc: int, size: int) -> None:
    """Check that ``path`` holds the ``compressed`` bytes of a gzip stream of ``size`` bytes
    with CRC-32 ``crc`` (its size and its trailer), reading only its last 8 bytes.

    Raises:
        InvalidTraceError: it does not.
    """
    check_size(path, compressed)
    with open(path, "rb") as file:
        file.seek(max(compressed - 8, 0))
        trailer = file.read(8)
    if trailer != struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF):
        raise InvalidTraceError("the gzip trailer on disk does not match the data compressed")
