"""Reading a trace file name back into :class:`~profdsl.core._naming.TraceName` fields.

Splitting only: the fields are validated (and the spelling checked to be canonical) by
``TraceName.parse``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Final

__all__ = ["EPOCH", "MAX_NAME_BYTES", "NotANameError", "fields_of"]

MAX_NAME_BYTES: Final = 255
"""Longest name any ``TraceName`` formats to (the usual file-system limit on a name)."""

_TIME_AND_EXT = re.compile(
    r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{3})(\..*)", re.ASCII | re.DOTALL
)
_PID = re.compile(r"pid([0-9]+)", re.ASCII)
_STEP = re.compile(r"step([0-9]+)", re.ASCII)
_RANK = re.compile(r"rank([0-9]+)(?:-of-([0-9]+))?|world([0-9]+)", re.ASCII)
_COORD = re.compile(r"(tp|pp|dp|cp|ep)([0-9]+)", re.ASCII)
_COORDS = re.compile(r"(?:tp|pp|dp|cp|ep)[0-9]+(?:-(?:tp|pp|dp|cp|ep)[0-9]+)*", re.ASCII)
_REPLICA = re.compile(r"replica([0-9]+)", re.ASCII)
_WINDOW = re.compile(r"mb([0-9]+)(?:-([0-9]+))?", re.ASCII)
_PART = re.compile(r"part([0-9]+)", re.ASCII)
EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


class NotANameError(Exception):
    """Why a string is not a trace name."""


def fields_of(name: str) -> dict[str, Any]:
    """Splits a would-be name into TraceName keyword arguments, without validating them."""
    if len(name) > MAX_NAME_BYTES:
        raise NotANameError(f"longer than {MAX_NAME_BYTES} characters")
    if "/" in name or "\\" in name:
        raise NotANameError("a bare file name is expected, not a path")
    segments = name.split("_")
    if len(segments) < 4:
        raise NotANameError("expected <role>[.<stage>]_[fields_]<host>_pid<P>_<time><ext>")
    head, *middle, host, pid, time_and_ext = segments
    time_match = _TIME_AND_EXT.fullmatch(time_and_ext)
    if time_match is None:
        raise NotANameError(f"expected <YYYYMMDD>T<HHMMSSmmm><ext> last, got {time_and_ext!r}")
    pid_match = _PID.fullmatch(pid)
    if pid_match is None:
        raise NotANameError(f"expected pid<P> before the time, got {pid!r}")
    role, dot, stage = head.partition(".")
    fields: dict[str, Any] = {
        "role": role,
        "stage": stage if dot else None,
        "host": host,
        "pid": int(pid_match[1]),
        "time_ms": _parse_time(time_match),
        "ext": time_match[8],
    }
    readers: list[Callable[[str, dict[str, Any]], bool]] = [
        functools.partial(_read_index, _STEP, "step"),
        _read_rank,
        _read_coords,
        functools.partial(_read_index, _REPLICA, "replica"),
        _read_window,
        functools.partial(_read_index, _PART, "part"),
    ]
    for segment in middle:
        while readers and not readers[0](segment, fields):
            readers.pop(0)
        if not readers:
            raise NotANameError(f"unexpected or misplaced segment {segment!r}")
        readers.pop(0)
    return fields


def _parse_time(match: re.Match[str]) -> int:
    year, month, day, hour, minute, second, milli = (int(g) for g in match.groups()[:7])
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except ValueError as exc:
        raise NotANameError(f"bad time {match[0][:18]!r}: {exc}") from exc
    return (moment - EPOCH) // timedelta(milliseconds=1) + milli


def _read_index(pattern: re.Pattern[str], key: str, segment: str, fields: dict[str, Any]) -> bool:
    """A segment of one index (``step5``, ``replica1``, ``part2``: ``pattern``) as ``fields[key]``."""
    match = pattern.fullmatch(segment)
    if match:
        fields[key] = int(match[1])
    return match is not None


def _read_rank(segment: str, fields: dict[str, Any]) -> bool:
    match = _RANK.fullmatch(segment)
    if match:
        rank, of, world = match.groups()
        world_size = of if world is None else world
        fields["rank"] = None if rank is None else int(rank)
        fields["world_size"] = None if world_size is None else int(world_size)
    return match is not None


def _read_coords(segment: str, fields: dict[str, Any]) -> bool:
    if not _COORDS.fullmatch(segment):
        return False
    for coord, digits in _COORD.findall(segment):
        fields[coord] = int(digits)
    return True


def _read_window(segment: str, fields: dict[str, Any]) -> bool:
    match = _WINDOW.fullmatch(segment)
    if match:
        first = int(match[1])
        fields["window"] = (first, first if match[2] is None else int(match[2]))
    return match is not None
