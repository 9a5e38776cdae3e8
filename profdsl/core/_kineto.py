"""Kineto's own log lines (torch's profiler library) in processes profdsl owns.

torch's kineto prints ``USDT: ... profiler_start`` and ``profiler_stop`` lines to stderr for
every profiler session, on any thread. ``KINETO_LOG_LEVEL`` controls them (torch 2.13): at 5 or
below they show; at 6 and above kineto logs nothing, its errors included. It takes effect when
set before the process's first profiler session. The ``profdsl`` command line (and so the demo)
sets it to :data:`QUIET` unless the user has set it; a library user's process is left alone
(set it in your launcher to quiet your own runs).

Examples:
    >>> env = {}
    >>> quiet_kineto(env)
    True
    >>> env
    {'KINETO_LOG_LEVEL': '6'}
    >>> quiet_kineto({"KINETO_LOG_LEVEL": "3"})
    False
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = ["QUIET", "VARIABLE", "quiet_kineto"]

VARIABLE = "KINETO_LOG_LEVEL"
#: The lowest level at which kineto prints nothing (its errors included).
QUIET = "6"


def quiet_kineto(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set :data:`VARIABLE` to :data:`QUIET` in ``environ`` (``os.environ`` by default) unless it
    is set already; whether it was set here."""
    env = os.environ if environ is None else environ
    if VARIABLE in env:
        return False
    env[VARIABLE] = QUIET
    return True
