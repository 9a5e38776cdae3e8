"""Kineto's own log lines (torch's profiler library) in processes profdsl owns.

torch's kineto prints ``USDT: ... profiler_start`` and ``profiler_stop`` lines to stderr for
every profiler session, on any thread. ``KINETO_LOG_LEVEL`` controls them (torch 2.13): at 5 or
below they show; at 6 and above kineto logs nothing, its errors included. It takes effect when
set before the process's first profiler session. The ``profdsl`` command line (and so the demo)
sets it to :data:`QUIET` unless the user has set it; a library user's process is left alone
(set it in your launcher to quiet your own runs).
"""

from __future__ import annotations

import os

__all__ = ["QUIET", "VARIABLE", "quiet_kineto"]

VARIABLE = "KINETO_LOG_LEVEL"
#: The lowest level at which kineto prints nothing (its errors included).
QUIET = "6"


def quiet_kineto() -> None:
    """Set :data:`VARIABLE` to :data:`QUIET` in ``os.environ`` unless it is set already."""
    os.environ.setdefault(VARIABLE, QUIET)
