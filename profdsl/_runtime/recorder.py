"""The recorder: what the DSL may do during one profiled step of one role.

A :class:`~profdsl._runtime.profiler.Profiler` hands out one :class:`Recorder` per profiled step
(and the :data:`NULL_RECORDER` otherwise), as OpenTelemetry's tracer hands out spans. The DSL
calls :meth:`Recorder.stage` and :meth:`Recorder.mini_batch`, passing the innermost open entry of
its context, and gets back a :class:`~profdsl._runtime.handles.Handle` for that entry alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from profdsl._capture.annotators import Annotator
from profdsl._capture.base import Backend
from profdsl._runtime.context import Entry, top, walk
from profdsl._runtime.handles import Batches, Handle, OwningHandle, opaque
from profdsl._runtime.slot.claims import Claim
from profdsl._runtime.slot.slot import Busy, CaptureSlot
from profdsl._runtime.stage_captures import StageCaptures
from profdsl._runtime.step_report import StepReport
from profdsl.collect._export import TraceLabel
from profdsl.config import Schedule

if TYPE_CHECKING:
    from profdsl._runtime.slot.session import Session

H = TypeVar("H", bound=Handle)

__all__ = ["NULL_RECORDER", "NullRecorder", "Recorder"]


def _owner(entry: Entry | None) -> Handle | None:
    """The innermost open entry of the context that numbers mini-batches (a stage with its own
    capture) or refuses them."""
    while entry is not None:
        handle = entry.handle
        if (
            entry.live
            and isinstance(handle, Handle)
            and not handle.closed
            and (handle.batches is not None or handle.opaque)
        ):
            return handle
        entry = entry.below
    return None


def _path(handle: Handle) -> tuple[str, ...] | None:
    """The labels of the open regions of the current context up to ``handle``'s, outermost
    first (the path readers place its region at); None when it is not on this context's stack."""
    labels: list[str] = []
    found = False
    for entry in walk(top()):
        held = entry.handle
        if held is handle:
            found = True
        if found and isinstance(held, Handle) and held.pushed:
            labels.append(entry.key.name)  # type: ignore[attr-defined]
    return tuple(reversed(labels)) if found else None


def _advance_outside(session: Session, index: int, context: Entry | None, owner: Handle | None) -> None:
    """Step a scheduled stage's schedule with the regions around the mini-batch closed, up to
    the stage's own: a torch region entered under one window's profiler and exited under the
    next corrupts torch's heap (the process crashes later, anywhere). They reopen right after."""
    # tests/test_lifecycle_faults.py::test_scheduled_stage_region_never_spans_a_window_boundary
    closed: list[Handle] = []
    for entry in walk(context):
        handle = entry.handle
        if isinstance(handle, Handle) and handle.pushed:
            handle.suspend()
            closed.append(handle)
        if handle is owner:
            break
    try:
        session.advance(index)
    finally:
        for handle in reversed(closed):
            handle.resume()


class Recorder:
    """One role's profiled step: opens stage and mini-batch regions and, in discrete mode,
    stage captures. ``active`` until the step ends."""

    __slots__ = (
        "_annotator",
        "_batches",
        "_slot",
        "_discrete",
        "_report",
        "active",
        "role",
        "stages",
        "step",
    )

    def __init__(
        self,
        label: TraceLabel,
        *,
        annotator: Annotator | None,
        backend: Backend,
        slot: CaptureSlot,
        discrete: bool,
        schedule: Schedule | None,
        claim: Claim | None,
        on_unseen: Callable[[], bool],
    ) -> None:
        self.role, self.step = label.role, label.step
        self._annotator, self._slot, self._discrete = annotator, slot, discrete
        #: Its stage captures (discrete mode); their ``tree`` is the step's, when it is timed.
        self.stages = StageCaptures(label, backend, slot, schedule)
        # on_unseen(): the role switches to capturing every thread; False: it cannot
        self._report = StepReport(label, slot, claim, on_unseen)
        self.active = True
        find = None if claim is None else functools.partial(slot.step_session, claim)
        # Continuous: the step's mini-batches follow the role's schedule in the shared session
        # (a capture that cannot pause records them all: see Batches.begin).
        self._batches = Batches(None if discrete else schedule, find=find)

    def stage(
        self, name: str, scheduled: bool, color: int | None, context: Entry | None, kind: str | None = None
    ) -> Handle:
        """Open stage ``name`` (of ``kind``, when it declares one): a region and, for a discrete
        outermost stage, its own capture."""
        owner = _owner(context)
        if owner is not None and owner.opaque:  # inside a stage refused its capture: nothing
            return opaque()
        if self._discrete and owner is None:
            return self._stage_capture(name, scheduled, color, kind)
        self._report.seen(name, kind)
        return Handle(self._annotator, name, color, self)

    def region(self, name: str, context: Entry | None, make: Callable[..., H], kind: str | None = None) -> H | None:
        """Open a region ``name`` (of ``kind``) in what this step records, never a capture of its
        own: the handle ``make(annotator, name, color, recorder)`` (a :class:`Handle` subclass); in
        discrete mode outside every stage, or inside a stage refused its capture, nothing
        (``rollout_window``: generation shows in the trainer's trace where it ran; its engines
        record themselves)."""
        owner = _owner(context)
        if (self._discrete and owner is None) or (owner is not None and owner.opaque):
            return None
        self._report.seen(name, kind)
        return make(self._annotator, name, None, self)

    def _stage_capture(self, name: str, scheduled: bool, color: int | None, kind: str | None) -> Handle:
        session = self.stages.begin(name, scheduled)
        if isinstance(session, Busy):
            self._report.refused(name, scheduled, session)
            if scheduled:  # its mini-batches must not drive (or mislabel) another stage's windows
                return opaque()
        elif session is not None:
            session.book.note(name, kind=kind)
            batches = Batches(session.schedule, session=session)
            finish = functools.partial(self._stage_ended, session, batches, name)
            return OwningHandle(self._annotator, name, color, self, batches=batches, finish=finish)
        self._report.note(name, mini_batch=False, kind=kind)
        return Handle(self._annotator, name, color, self)

    def _stage_ended(self, session: Session, batches: Batches, name: str) -> None:
        self.stages.end(session)
        self._report.windowless(batches, name)

    def mini_batch(self, base: str, context: Entry | None, *, region: bool = True) -> Handle | None:
        """Open the next update mini-batch (a region ``f"{base}{i}"``; none with ``region=False``,
        for callers whose code marks its mini-batches itself, such as verl's workers)."""
        annotator = self._annotator if region else None
        owner = _owner(context)
        if owner is not None and owner.opaque:
            return opaque()
        batches = self._batches if owner is None else owner.batches
        assert batches is not None
        session = batches.capture()
        if session is not None and not session.owned_here():
            self._report.foreign(base)  # torch's session must not be stepped or paused from here
            return None
        index, recorded = batches.begin(session)
        name = f"{base}{index}"
        if session is None:  # outside any capture this role drives: a plain region
            self._report.note(base, mini_batch=True)
            return Handle(annotator, name, None, self)
        if session.kind == "stage":
            session.book.note(base, mini_batch=True)
            if batches.schedule is None:  # its end is counted by the stage's trace-size budget
                return OwningHandle(annotator, name, None, self, finish=session.recording.batch_recorded)
            # the schedule step runs inside the stage: a placed profiling wait of the step's ledger
            advance = functools.partial(self.stages.timed, _advance_outside, session, index, context, owner)
            return OwningHandle(annotator, name, None, self, finish=advance)
        session.recording.mini_batch_began(recorded)
        self._report.stepped(context)
        if recorded:
            session.book.note(base, mini_batch=True)
        schedule = batches.schedule if session.capture is not None and session.capture.pausable else None
        finish = functools.partial(session.recording.mini_batch_ended, self.role, self.step, schedule, index, recorded)
        # A left-out mini-batch opens no region: the trace holds exactly the windows it lists.
        return OwningHandle(
            annotator if recorded else None,
            name,
            None,
            self,
            finish=finish,
            unfinish=functools.partial(session.recording.mini_batch_withdrawn, recorded),
        )

    def continued(self, handle: Handle) -> None:
        """A region of this step was reopened (``handle``'s): the capture recording it counts a
        piece of an earlier entry, not an entry, at the path it sits at."""
        current = self._slot.current
        if current is not None:
            current.recording.continued(handle.name, _path(handle))

    def close(self) -> None:
        """The step is over: end the stage captures it opened that are still open here."""
        self.active = False
        self.stages.close()
        if not self._discrete:
            self._report.windowless(self._batches, None)


class NullRecorder:
    """The recorder of a step, rank or config that is not profiled: opens nothing."""

    __slots__ = ()
    role: str | None = None
    active = False

    def stage(
        self, name: str, scheduled: bool, color: int | None, context: Entry | None, kind: str | None = None
    ) -> None:
        """Open nothing."""
        return None

    def mini_batch(self, base: str, context: Entry | None, *, region: bool = True) -> None:
        """Open nothing."""
        return None

    def region(self, name: str, context: Entry | None, make: Callable[..., object], kind: str | None = None) -> None:
        """Open nothing."""
        return None

    def close(self) -> None:
        """Nothing to close."""


NULL_RECORDER = NullRecorder()
