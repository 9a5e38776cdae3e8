"""Writing events of several Chrome traces into one file: on one clock, flows kept apart,
profdsl's region names decoded, streamed one event at a time.

The rules are those of ``profdsl merge`` (see :mod:`profdsl.analysis.merge`): torch (kineto) writes an
event's ``ts`` in microseconds after its trace's ``baseTimeNanoseconds``, so an input's events move
by ``(its base - the common base) / 1000`` (:func:`shift_us`) and the output carries the common
base; integer flow ids (``ph`` s/t/f) of input ``i`` become ``(i << FLOW_SHIFT) + id``, since
every trace numbers its flows from the same start; a profdsl region is named by its label, a
mini-batch's followed by its index (:func:`region_title`).

Examples:
    >>> event = {"ph": "s", "id": 7, "ts": 10.0}
    >>> move(event, shift_us=shift_us(3_000, 1_000), flow_base=1 << FLOW_SHIFT)["ts"], event["id"] - (1 << 40)
    (12.0, 7)
    >>> region_title(("update_actor", None)), region_title(("mini_batch", 3))
    ('update_actor', 'mini_batch3')
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from decimal import Decimal
from typing import IO, Any

__all__ = ["FLOW_SHIFT", "ArrayWriter", "json_value", "move", "region_title", "shift_us"]

Event = dict[str, Any]

#: Flow ids of input i are moved by i << FLOW_SHIFT (ranks and windows number their flows alike).
FLOW_SHIFT = 40
_FLOW_PHASES = frozenset({"s", "t", "f"})


def shift_us(base_ns: int, common_ns: int) -> float:
    """Microseconds added to the ``ts`` of a trace whose base is ``base_ns`` to put it on the
    clock of ``common_ns`` (the smallest base of the traces written together)."""
    return (base_ns - common_ns) / 1000


def region_title(found: tuple[str, int | None]) -> str:
    """The name a region is written under: its label, a mini-batch's followed by its index
    (``found`` as :meth:`~profdsl.analysis.regions.RegionNames.label` gives it)."""
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
        self.empty = True
        self.count = 0

    def write_all(self, items: Iterable[Event]) -> int:
        """Write ``items``; returns how many."""
        count = 0
        for item in items:
            if not self.empty:
                self._stream.write(b",\n")
            self._stream.write(json.dumps(item, separators=(",", ":"), default=json_value).encode())
            self.empty = False
            count += 1
        self.count += count
        return count

    def append(self, items: IO[bytes], *, empty: bool) -> None:
        """Copy the items another writer wrote to ``items`` (read from its current position)."""
        if empty:
            return
        if not self.empty:
            self._stream.write(b",\n")
        shutil.copyfileobj(items, self._stream)
        self.empty = False

    def mark(self) -> tuple[int, bool, int]:
        """Where the next item goes (a seekable stream only), for :meth:`undo`."""
        return self._stream.tell(), self.empty, self.count

    def undo(self, mark: tuple[int, bool, int]) -> None:
        """Cut off everything written since ``mark``."""
        self._stream.seek(mark[0])
        self._stream.truncate()
        _, self.empty, self.count = mark
