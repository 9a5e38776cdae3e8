"""The capture protocols: a backend opens captures; a capture records until it is stopped.

A capture knows nothing of roles or steps: the runtime hands it ``describe`` (the metadata to
write into the trace for a mini-batch window, or for the whole capture) and ``sink`` (where a
finished trace goes: ``sink(write, window, time_ms, held, expect)``, ``write(path)`` writing
the trace file, on whichever thread the runtime chooses; ``held``: how long the capture's calls
held up their caller for it; ``expect``: what the capture knows of the trace's completeness,
:class:`~profdsl.core._completeness.Expect`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from profdsl.config import Schedule
from profdsl.core._completeness import Expect
from profdsl.core._trace_size import SizeBook

__all__ = ["Backend", "Capture", "CaptureRefusedError", "Describe", "Held", "Runner", "Sink"]

#: ``describe(window)``: the ``profdsl`` metadata of the trace (``window`` None: whole session).
Describe = Callable[[tuple[int, int] | None], dict[str, Any]]


@attrs.frozen
class Held:
    """How long a capture's calls held up their caller for one trace, in seconds: ``total_s``,
    every call since the previous trace (its start, schedule steps, pauses) and the call that
    ended this trace's recording up to the moment the trace was ready; of which ``start_s``, the
    capture's start (on its first trace only, else None), and ``end_s``, that last call (its
    stop, or the schedule step that closed a window). Both lie inside ``total_s``."""

    total_s: float
    start_s: float | None = None
    end_s: float = 0.0


#: ``sink(write, window, time_ms, held, expect)``: a trace is ready (see the module docstring);
#: ``write(path)`` writes its events (plain JSON) and returns the metadata to add to it.
Sink = Callable[[Callable[[str], object], tuple[int, int] | None, int, Held, Expect], None]


class CaptureRefusedError(Exception):
    """A backend could not start a capture; the message says why (logged once already)."""


class Runner(Protocol):
    """Where a session's calls run: the calling thread, or one dedicated thread (the only one
    whose calls can time out)."""

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """Run ``fn(*args)`` there and return its result."""


class Capture(Protocol):
    """One open capture. Only the thread that owns it (:meth:`owned_here`) drives it.

    Attributes:
        every_thread: it records every thread (and any thread may drive it).
        pausable: it can pause collection (``set_collecting``), so a continuous step's schedule
            can leave mini-batches out.
        collecting: whether it collects now (False while paused).
    """

    every_thread: bool
    pausable: bool
    collecting: bool

    def owned_here(self) -> bool:
        """Whether the calling thread may drive the session (torch crashes otherwise)."""

    def advance(self, index: int) -> None:
        """A scheduled session: update mini-batch ``index`` ended; step the schedule."""

    def set_collecting(self, on: bool) -> None:
        """Pause (``False``) or resume collection, for mini-batches the schedule leaves out."""

    def stop(self) -> None:
        """Stop recording and hand what is left to the sink."""


class Backend(Protocol):
    """Opens captures of one tool.

    Attributes:
        tool: ``"torch"`` or ``"nsys"``.
        all_threads: every capture is to record every thread (``TorchOptions.all_threads``).
        sizes: the sizes of the role's traces measured so far (None: its tool writes none).
        max_trace_bytes: the bound on one trace's size as plain JSON (None: none).
    """

    tool: str
    all_threads: bool
    sizes: SizeBook | None
    max_trace_bytes: int | None

    @property
    def every_thread_possible(self) -> bool:
        """Whether captures of every thread can be had."""

    def open(
        self,
        *,
        rank: int,
        schedule: Schedule | None,
        describe: Describe,
        sink: Sink,
        runner: Runner,
        every_thread: bool = False,
    ) -> Capture:
        """Start a capture on ``runner`` (recording every thread with ``every_thread``).

        Raises:
            CaptureRefusedError: it cannot start (logged once).
        """
