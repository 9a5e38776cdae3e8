"""A profiled step's stage captures (discrete mode): each outermost stage opens a stage session on
the process's slot and ends it there; a capture's start and stop, and a scheduled stage's
schedule steps between its mini-batches (inside the stage), hold the step up, and are placed
profiling waits of its ledger when it is timed (charged to ``overhead``, not to the stage they
ran in); those still open when the step ends are ended with it (their traces say they were cut
short).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from profdsl._capture.base import Backend
from profdsl._runtime.slot.slot import Busy, CaptureSlot
from profdsl.collect._export import TraceLabel
from profdsl.config import Schedule
from profdsl.metrics._tree import clock

if TYPE_CHECKING:
    from profdsl._runtime.slot.session import Session
    from profdsl.metrics._tree import Root

__all__ = ["StageCaptures"]

T = TypeVar("T")


class StageCaptures:
    """The stage captures of one role's profiled step (``label``), with ``backend`` on ``slot``;
    a scheduled stage follows ``schedule``."""

    __slots__ = ("_backend", "_label", "_schedule", "_sessions", "_slot", "tree")

    def __init__(self, label: TraceLabel, backend: Backend, slot: CaptureSlot, schedule: Schedule | None) -> None:
        self._label, self._backend, self._slot, self._schedule = label, backend, slot, schedule
        self._sessions: list[Session] = []
        #: The step's metrics tree, when it is timed (set by its StepContext): a stage
        #: capture's start and stop are the step's profiling waits in its ledger.
        self.tree: Root | None = None

    def begin(self, name: str, scheduled: bool) -> Session | Busy | None:
        """Open stage ``name``'s capture (following the step's schedule when ``scheduled``):
        :class:`Busy` when the slot is held elsewhere, None when the capture could not start."""
        label = attrs.evolve(self._label, stage=name)
        session = self.timed(self._slot.begin_stage, label, self._backend, self._schedule if scheduled else None)
        if session is not None and not isinstance(session, Busy):
            self._sessions.append(session)
        return session

    def end(self, session: Session) -> None:
        """A stage's capture ends (a step session it cut resumes)."""
        self.timed(self._slot.end_stage, session)

    def timed(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, one of profdsl's own calls at a stage (its capture's start or stop, a
        scheduled stage's schedule step: torch's step, handing its trace to the writer): a placed
        profiling wait of the step's ledger, when it is timed."""
        began = clock()
        try:
            return call(*args)
        finally:
            tree = self.tree
            if tree is not None:
                tree.wait_at(began, clock())

    def close(self) -> None:
        """The step is over: end the stage captures it opened that are still open here."""
        sessions, self._sessions = self._sessions, []
        for session in sessions:
            if self._slot.current is session and session.owned_here() and session.cut_short is None:
                session.cut_short = f"step {self._label.step} ended while stage {session.label.stage!r} was still open"
            self._slot.end_stage(session)
