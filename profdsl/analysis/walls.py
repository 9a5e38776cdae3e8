"""Each role's step wall time per rank, from the metrics logs (``Metrics(log=True)``): the
``wall_s`` of the role's step, ``start()`` to ``stop()``. ``profdsl summary`` measures its step
rows and shares against it; where no log has a (role, step, rank), its outermost stages stand
for it.

Examples:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     step_walls(folder)
    {}
"""

from __future__ import annotations

import os

from profdsl.collect.metrics_log import read_log

__all__ = ["step_walls"]

Key = tuple[str, "int | None", "int | None"]  # role, step, rank


def step_walls(folder: str | os.PathLike[str]) -> dict[Key, float]:
    """(role, step, rank) → the step's wall time in µs (the longest, when several processes of
    one rank logged it); lines that are not valid are left out."""
    walls: dict[Key, float] = {}
    for line in read_log(folder)[0]:
        if line.role is None or line.wall_s is None:
            continue
        key: Key = (line.role, line.step, line.rank)
        walls[key] = max(walls.get(key, 0.0), line.wall_s * 1e6)
    return walls
