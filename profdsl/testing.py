"""Helpers for testing code that uses profdsl.

:func:`reset` returns profdsl to the state of a fresh process: call it before and after each
test (for example from an autouse pytest fixture) so that a profiler one test left open cannot
leak into the next.

Examples:
    >>> import profdsl, profdsl.testing
    >>> profiler = profdsl.Profiler(profdsl.ProfilerConfig(), role="actor", rank=0, world_size=1)
    >>> profdsl.testing.reset()       # the profiler is forgotten: not closed at exit
"""

from __future__ import annotations

from profdsl._runtime import context
from profdsl._runtime.process import PROCESS

__all__ = ["reset"]


def reset() -> None:
    """Forget every profiler, recorder, open DSL entry of this context, step being timed,
    finish-hook rendezvous and logged-once key, and stop a capture session left open (when this
    thread owns it) and the metrics' Prometheus endpoints. A ``with`` block still open on
    another thread or task ends what it opened at its exit (a stage's capture, on its thread)
    and times nothing of a later step."""
    PROCESS.reset()
    context.clear()
