"""Schedule arithmetic over update mini-batches (pure: no torch import).

A :class:`~profdsl.config.Schedule` advances once per update mini-batch. :func:`action_at` says
what ``torch.profiler.schedule`` does at mini-batch ``i``; :func:`recorded_windows` says which
mini-batches a scheduled stage records, grouped into the windows (trace files) it writes.

Examples:
    >>> from profdsl.config import Schedule
    >>> recorded_windows(Schedule(wait=1, warmup=1, active=2), 9)
    [(2, 3), (6, 7)]
"""

from profdsl.core._schedule import Action, action_at, recorded_windows

__all__ = ["Action", "action_at", "recorded_windows"]
