"""The one trace rewriter of ``profdsl merge`` and ``profdsl export --hta``: events of several
traces, read one at a time, written into one Chrome trace on one clock.

Each event of an input is named by its region's label (:func:`~profdsl.analysis.chrome.region_title`),
moved onto the clock of the smallest ``baseTimeNanoseconds`` with its flows kept apart
(:func:`~profdsl.analysis.chrome.move`) and spooled; an input that turns out malformed or cut
short is cut off the spool again (:meth:`Rewriter.whole`). :meth:`Rewriter.finish` writes the
header, the spool and the command's own events as a partial file beside the output, which the
command renames into place. No trace is ever held whole in memory.

Examples:
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
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from profdsl.analysis import reader
from profdsl.analysis.chrome import FLOW_SHIFT, ArrayWriter, json_value, move, region_title, shift_us
from profdsl.analysis.regions import RegionNames
from profdsl.records.meta import BASE_TIME_KEY

__all__ = ["Edit", "Rewriter", "open_output", "partial_of"]

Event = dict[str, Any]
#: What a command does to an event before it is moved (the region's label, or None): the event
#: (changed or not), or None to leave it out.
Edit = Callable[[Event, "tuple[str, int | None] | None"], "Event | None"]


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
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Rewriter:
        self._spool = self._stack.enter_context(tempfile.TemporaryFile(dir=self.folder))
        self.body = ArrayWriter(self._spool)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def whole(self) -> Iterator[None]:
        """An input copied inside is kept whole or not at all: a :class:`~profdsl.analysis.reader.TraceError`
        raised inside (by the reader or by whoever consumes :meth:`events`) cuts off what was
        spooled since, and goes on."""
        mark = self.body.mark()
        try:
            yield
        except reader.TraceError:
            self.body.undo(mark)
            raise

    def events(
        self, path: str, header: dict[str, Any], base_ns: int, index: int, edit: Edit | None = None
    ) -> Iterator[Event]:
        """Spool the events of the trace at ``path`` (input number ``index``, with its header and
        base), yielding each as read before it is rewritten, so that a scan can see it too.
        ``edit`` may change or leave out each event first. Use inside :meth:`whole`."""
        names = RegionNames.from_header(header)
        shift, flow_base = shift_us(base_ns, self.base_ns), index << FLOW_SHIFT
        for event in reader.events(path):
            yield event
            label = names.label(str(event.get("name", ""))) if event.get("ph") == "X" and not names.empty else None
            if label is not None:
                event["name"] = region_title(label)
            kept = event if edit is None else edit(event, label)
            if kept is not None:
                self.body.write_all([move(kept, shift_us=shift, flow_base=flow_base)])

    def copy(self, path: str, header: dict[str, Any], base_ns: int, index: int, edit: Edit | None = None) -> int:
        """:meth:`events` read to the end, whole or not at all: how many events were written.

        Raises:
            TraceError: the trace is unreadable or malformed; nothing of it is kept.
        """
        with self.whole():
            written = self.body.count
            for _ in self.events(path, header, base_ns, index, edit):
                pass
            return self.body.count - written

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
                out.append(self._spool, empty=self.body.empty)
                out.write_all(after)
                stream.write(b"\n]}\n")
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return partial
