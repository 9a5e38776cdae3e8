"""Schedule arithmetic over update mini-batches (the public face is :mod:`profdsl.schedule`)."""

from __future__ import annotations

import enum

from profdsl.config import Schedule
from profdsl.config._checks import require_int

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
    firsts = range(first_recorded(schedule), n, schedule.cycle_len)[: schedule.repeat or None]
    return [(first, min(first + schedule.active, n) - 1) for first in firsts]


def first_recorded(schedule: Schedule) -> int:
    """The first mini-batch ``schedule`` records: a stage of fewer mini-batches records none.

    Examples:
        >>> from profdsl.config import Schedule
        >>> first_recorded(Schedule(wait=1, warmup=1, active=2))
        2
    """
    return schedule.skip_first + schedule.wait + schedule.warmup


def no_window(schedule: Schedule, n: int) -> str | None:
    """Why ``schedule`` records nothing over ``n`` mini-batches, or None when it records a window
    (the one sentence the log, the manifest and ``check`` carry).

    Examples:
        >>> from profdsl.config import Schedule
        >>> print(no_window(Schedule(wait=1, warmup=1, active=2), 2))  # doctest: +NORMALIZE_WHITESPACE
        Schedule(skip_first=0, wait=1, warmup=1, active=2, repeat=0) recorded no window over 2
        mini-batches (the first it records is mini-batch 2, counting from 0): no trace
        >>> no_window(Schedule(active=1), 1) is None
        True
    """
    if recorded_windows(schedule, n):
        return None
    return (
        f"{schedule!r} recorded no window over {n} mini-batch{'es' if n != 1 else ''} "
        f"(the first it records is mini-batch {first_recorded(schedule)}, counting from 0): no trace"
    )
