"""Schedule arithmetic over update mini-batches (the public face is :mod:`profdsl.schedule`)."""

from __future__ import annotations

import enum

from profdsl.config import Schedule
from profdsl.config.validate import require_int

__all__ = ["Action", "action_at", "cycle_of", "recorded_windows"]


class Action(enum.Enum):
    """What the profiler does during one mini-batch; mirrors ``torch.profiler.ProfilerAction``."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3

    @property
    def records(self) -> bool:
        """Whether the mini-batch's events end up in a trace file."""
        return self in (Action.RECORD, Action.RECORD_AND_SAVE)


def cycle_of(schedule: Schedule, i: int) -> int | None:
    """The schedule cycle mini-batch ``i`` belongs to, or None (skipped, or past ``repeat``)."""
    i = require_int("mini-batch index", i)
    if i < schedule.skip_first:
        return None
    cycle = (i - schedule.skip_first) // schedule.cycle_len
    if schedule.repeat and cycle >= schedule.repeat:
        return None
    return cycle


def action_at(schedule: Schedule, i: int) -> Action:
    """The action ``torch.profiler.schedule`` takes at mini-batch ``i`` (0-based).

    Examples:
        >>> from profdsl.config import Schedule
        >>> [action_at(Schedule(wait=1, active=2), i).name for i in range(3)]
        ['NONE', 'RECORD', 'RECORD_AND_SAVE']
    """
    cycle = cycle_of(schedule, i)
    if cycle is None:
        return Action.NONE
    position = i - schedule.skip_first - cycle * schedule.cycle_len
    if position < schedule.wait:
        return Action.NONE
    if position < schedule.wait + schedule.warmup:
        return Action.WARMUP
    if position < schedule.cycle_len - 1:
        return Action.RECORD
    return Action.RECORD_AND_SAVE


def recorded_windows(schedule: Schedule, n: int) -> list[tuple[int, int]]:
    """Inclusive ``(first, last)`` mini-batch ranges, one per trace a stage of ``n`` writes.

    Exactly the mini-batches whose action records, grouped by schedule cycle; a cycle cut short by
    the end of the stage gives a shorter window, and a cycle that recorded nothing gives none (no
    empty or duplicate trace, unlike verl's bugs B1 and B2).

    Examples:
        >>> from profdsl.config import Schedule
        >>> recorded_windows(Schedule(active=2), 4)
        [(0, 1), (2, 3)]
        >>> recorded_windows(Schedule(skip_first=1, wait=1, warmup=1, active=2), 3)
        []
    """
    n = require_int("number of mini-batches", n)
    windows = []
    cycle = 0
    while not schedule.repeat or cycle < schedule.repeat:
        start = schedule.skip_first + cycle * schedule.cycle_len
        first = start + schedule.wait + schedule.warmup
        if first >= n:
            break
        windows.append((first, min(start + schedule.cycle_len, n) - 1))
        cycle += 1
    return windows
