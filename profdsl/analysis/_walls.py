"""Each role's step wall time per rank, from the metrics logs (``Metrics(log=True)``): the
``wall_s`` of the role's step, ``start()`` to ``stop()``. ``profdsl summary`` measures its step
rows and shares against it; where no log has a (role, step, rank), its outermost stages stand
for it. A wall time beyond any clock (over 1e12 s: :func:`~profdsl.analysis._fleet.to_ns` gives it
no number) is no step time: :func:`clocked_walls` leaves it out and names its line, while the
step ledger (:func:`step_walls`) says per rank why such a step has no ledger.

Both are computed from one read of the logs (:func:`read_walls`), which also holds the lines that
are not valid: what a command shows from the logs and the bad lines it names come from the same
read, so a log appended to meanwhile cannot make them disagree.

Examples:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     log = read_walls(folder)
    ...     step_walls(log), clocked_walls(log, []), log.problems
    ({}, {}, [])
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple

from profdsl.analysis._fleet import to_ns
from profdsl.collect.metrics_log import read_log_lines
from profdsl.records.metrics_log import MetricsLine

__all__ = ["LogRead", "clocked_walls", "read_walls", "step_walls"]

Key = tuple[str, "int | None", "int | None"]  # role, step, rank
#: Why a metrics log line's wall time is not shown (after its file and line number).
BEYOND_ANY_CLOCK = (
    "wall_s {wall:g} s is beyond any clock (over 1e12 s): {role} step {step} rank {rank} shows no step time"
)


class LogRead(NamedTuple):
    """One read of a folder's metrics logs (:func:`~profdsl.collect.metrics_log.read_log_lines`)."""

    #: Every valid line, with its file and line number.
    lines: list[tuple[str, int, MetricsLine]]
    #: Each file or line that is not valid, named (its file and line number, and why).
    problems: list[str]


def read_walls(folder: str | os.PathLike[str]) -> LogRead:
    """The one read of ``folder``'s metrics logs that a command's step walls, ledger and bad
    lines all come from."""
    return LogRead(*read_log_lines(folder))


def step_walls(log: LogRead) -> dict[Key, float]:
    """(role, step, rank) → the step's wall time in µs (the longest, when several processes of
    one rank logged it); lines that are not valid are left out."""
    best = longest(((line.role, line.step, line.rank), line) for _, _, line in log.lines if line.role is not None)
    return {key: (line.wall_s or 0.0) * 1e6 for key, line in best.items()}


def clocked_walls(log: LogRead, skipped: list[str]) -> dict[Key, float]:
    """:func:`step_walls` less the (role, step, rank)s whose longest wall time is beyond any
    clock, each of their lines named in ``skipped``."""
    walls = step_walls(log)
    for path, number, line in log.lines:
        if line.role is not None and line.wall_s is not None and to_ns(line.wall_s) is None:
            walls.pop((line.role, line.step, line.rank), None)
            why = BEYOND_ANY_CLOCK.format(wall=line.wall_s, role=line.role, step=line.step, rank=line.rank)
            skipped.append(f"{path} line {number}: {why}")
    return walls


def longest(lines: Iterable[tuple[Key, MetricsLine]]) -> dict[Key, MetricsLine]:
    """Per (role, step, rank), its line with the longest wall time: several processes of one
    rank may each log the step (the first of equal ones; a line with no wall time left out)."""
    best: dict[Key, MetricsLine] = {}
    for key, line in lines:
        if line.wall_s is not None and (key not in best or line.wall_s > (best[key].wall_s or 0.0)):
            best[key] = line
    return best
