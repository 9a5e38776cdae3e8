"""The one trace rewriter of ``profdsl merge`` and ``profdsl export --hta``: events of several
Chrome traces, read one at a time, written into one trace on one clock.

The rules: torch (kineto) writes an event's ``ts`` in microseconds after its trace's
``baseTimeNanoseconds``, so an input's events move by ``(its base - the common base) / 1000``
(:func:`shift_us`) and the output carries the common base (the smallest); integer flow ids
(``ph`` s/t/f) of input ``i`` become ``(i << FLOW_SHIFT) + id``, since every trace numbers its
flows from the same start (:func:`move`); a profdsl region is named by its label, a mini-batch's
followed by its index (:func:`region_title`).

:class:`Rewriter` spools each input's events so rewritten; an input that turns out malformed or
cut short is cut off the spool again (:meth:`Rewriter.whole`). :meth:`Rewriter.finish` writes
the header, the spool and the command's own events as a partial file beside the output, which
the command renames into place. No trace is ever held whole in memory.

Examples:
    >>> event = {"ph": "s", "id": 7, "ts": 10.0}
    >>> move(event, shift_us=shift_us(3_000, 1_000), flow_base=1 << FLOW_SHIFT)["ts"], event["id"] - (1 << 40)
    (12.0, 7)
    >>> region_title(("update_actor", None)), region_title(("mini_batch", 3))
    ('update_actor', 'mini_batch3')
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with Rewriter(folder, base_ns=1_000) as out:
    ...     partial = out.finish(folder / "one.json", [("displayTimeUnit", "ms")], after=[{"ph": "i", "ts": 1}])
    >>> partial.name, json.loads(partial.read_text())["baseTimeNanoseconds"]
    ('.one.json.partial', 1000)
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from profdsl.analysis import _reader as reader
from profdsl.analysis._regions import RegionNames
from profdsl.records.meta import BASE_TIME_KEY

__all__ = ["FLOW_SHIFT", "Rewriter", "move", "open_output", "partial_of", "region_title", "shift_us"]

Event = dict[str, Any]
#: What a command does to an event before it is moved (the region's label, or None): the event
#: (changed or not), or None to leave it out.
Edit = Callable[[Event, "tuple[str, int | None] | None"], "Event | None"]


#: Flow ids of input i are moved by i << FLOW_SHIFT (ranks and windows number their flows alike).
FLOW_SHIFT = 40
_FLOW_PHASES = frozenset({"s", "t", "f"})


def shift_us(base_ns: int, common_ns: int) -> float:
    """Microseconds added to the ``ts`` of a trace whose base is ``base_ns`` to put it on the
    clock of ``common_ns`` (the smallest base of the traces written together)."""
    return (base_ns - common_ns) / 1000


def region_title(found: tuple[str, int | None]) -> str:
    """The name a region is written under: its label, a mini-batch's followed by its index
    (``found`` as :meth:`~profdsl.analysis._regions.RegionNames.label` gives it)."""
    label, index = found
    return label if index is None else f"{label}{index}"


def move(event: Event, *, shift_us: float, flow_base: int) -> Event:
    """``event`` (changed in place) with ``shift_us`` added to its ``ts`` and ``flow_base`` to
    an integer flow id (ids beyond :data:`FLOW_SHIFT` bits are kept as they are)."""
    ts = event.get("ts")
    if shift_us and isinstance(ts, (int, float)) and not isinstance(ts, bool):
        event["ts"] = ts + shift_us
    flow_id = event.get("id")
    if (
        event.get("ph") in _FLOW_PHASES
        and isinstance(flow_id, int)
        and not isinstance(flow_id, bool)
        and 0 <= flow_id < 1 << FLOW_SHIFT
    ):
        event["id"] = flow_base + flow_id
    return event


def json_value(value: object) -> object:
    """``json.dumps``'s ``default``: the numbers ijson reads as :class:`~decimal.Decimal`."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class ArrayWriter:
    """Writes JSON array items one at a time, with the commas between them (``count``: how many
    it wrote)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.count = 0

    def write_all(self, items: Iterable[Event]) -> None:
        """Write ``items``."""
        for item in items:
            if self.count:
                self._stream.write(b",\n")
            self._stream.write(json.dumps(item, separators=(",", ":"), default=json_value).encode())
            self.count += 1

    def append(self, items: IO[bytes], count: int) -> None:
        """Copy the ``count`` items another writer wrote to ``items`` (read from its current position)."""
        if count and self.count:
            self._stream.write(b",\n")
        shutil.copyfileobj(items, self._stream)
        self.count += count

    def mark(self) -> tuple[int, int]:
        """Where the next item goes (a seekable stream only), for :meth:`undo`."""
        return self._stream.tell(), self.count

    def undo(self, mark: tuple[int, int]) -> None:
        """Cut off everything written since ``mark``."""
        self._stream.seek(mark[0])
        self._stream.truncate()
        self.count = mark[1]


def partial_of(path: Path) -> Path:
    """The hidden file an output is written as before it is renamed into place."""
    return path.with_name(f".{path.name}.partial")


def open_output(path: Path, level: int | None) -> IO[bytes]:
    """``path`` opened for writing, gzipped at ``level`` (None: plain)."""
    if level is None:
        return open(path, "wb")
    return gzip.open(path, "wb", compresslevel=level)  # type: ignore[return-value]


class Rewriter:
    """Writes events of several traces, on the clock of ``base_ns``, into a spool in ``folder``
    (the output's, so that the final file is renamed on one file system); a context manager."""

    def __init__(self, folder: Path, base_ns: int) -> None:
        self.folder, self.base_ns = folder, base_ns

    def __enter__(self) -> Rewriter:
        self._spool = tempfile.TemporaryFile(dir=self.folder)
        self.body = ArrayWriter(self._spool)
        return self

    def __exit__(self, *exc: object) -> None:
        self._spool.close()

    @contextlib.contextmanager
    def whole(self) -> Iterator[None]:
        """An input copied inside is kept whole or not at all: a :class:`~profdsl.analysis._reader.TraceError`
        raised inside (by the reader or by whoever consumes :meth:`events`) cuts off what was
        spooled since, and goes on."""
        mark = self.body.mark()
        try:
            yield
        except reader.TraceError:
            self.body.undo(mark)
            raise

    def events(self, path: str, header: dict[str, Any], base_ns: int, index: int, edit: Edit) -> Iterator[Event]:
        """Spool the events of the trace at ``path`` (input number ``index``, with its header and
        base), yielding each as read before it is rewritten, so that a scan can see it too.
        ``edit`` changes or leaves out each event first. Use inside :meth:`whole`."""
        names = RegionNames.from_header(header)
        shift, flow_base = shift_us(base_ns, self.base_ns), index << FLOW_SHIFT
        for event in reader.events(path):
            yield event
            label = names.label(str(event.get("name", ""))) if event.get("ph") == "X" and not names.empty else None
            if label is not None:
                event["name"] = region_title(label)
            kept = edit(event, label)
            if kept is not None:
                self.body.write_all([move(kept, shift_us=shift, flow_base=flow_base)])

    def copy(self, path: str, header: dict[str, Any], base_ns: int, index: int, edit: Edit) -> None:
        """:meth:`events` read to the end, whole or not at all.

        Raises:
            TraceError: the trace is unreadable or malformed; nothing of it is kept.
        """
        with self.whole():
            for _ in self.events(path, header, base_ns, index, edit):
                pass

    def finish(
        self,
        output: Path,
        header: Sequence[tuple[str, Any]],
        *,
        before: Iterable[Event] = (),
        after: Iterable[Event] = (),
        level: int | None = None,
    ) -> Path:
        """Write the trace as :func:`partial_of` ``output`` (gzipped at ``level``) and return it:
        the ``header`` items in order (each on its own line; ``baseTimeNanoseconds`` last), then
        ``before``, the spooled events and ``after``. Nothing is left behind when it fails.
        """
        partial = partial_of(output)
        lines = [f"{json.dumps(key)}: {json.dumps(value, default=json_value)}" for key, value in header]
        lines += [f"{json.dumps(BASE_TIME_KEY)}: {self.base_ns}", '"traceEvents": [\n']
        self._spool.seek(0)
        try:
            with open_output(partial, level) as stream:
                stream.write(("{" + ",\n".join(lines)).encode())
                out = ArrayWriter(stream)
                out.write_all(before)
                out.append(self._spool, self.body.count)
                out.write_all(after)
                stream.write(b"\n]}\n")
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return partial
