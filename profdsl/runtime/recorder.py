"""The recorder: what the DSL may do during one profiled step of one role.

A :class:`~profdsl.runtime.profiler.Profiler` hands out one :class:`Recorder` per profiled step
(and the :data:`NULL_RECORDER` otherwise), as OpenTelemetry's tracer hands out spans. The DSL
calls :meth:`Recorder.stage` and :meth:`Recorder.mini_batch`, passing the innermost open entry of
its context, and gets back a :class:`~profdsl.runtime.handles.Handle` for that entry alone.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import attrs

from profdsl.capture.annotators import Annotator
from profdsl.capture.base import Backend
from profdsl.collect.export import TraceLabel
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.core.schedule import no_window
from profdsl.records.manifest import TraceRecord
from profdsl.runtime.context import Entry, top, walk
from profdsl.runtime.handles import Batches, Handle, OwningHandle, opaque
from profdsl.runtime.slot.claims import Claim
from profdsl.runtime.slot.slot import Busy, CaptureSlot, holder
from profdsl.runtime.writer.jobs import RecordJob

if TYPE_CHECKING:
    from profdsl.metrics.tree import Root
    from profdsl.runtime.slot.session import Session

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


def _unseen_thread(switched: bool) -> str:
    then = (
        "this role's next sessions capture every thread"
        if switched
        else "this torch cannot capture every thread (torch >= 2.7 can)"
    )
    return (
        f"ran on thread {threading.current_thread().name!r}, which the step's session does "
        f"not capture (it records only the thread that started it); {then}"
    )


def _elsewhere(current: Session | None, ended: bool) -> str | None:
    """Why a region of a continuous step is not in its session, or None: the thread is unseen."""
    if current is not None:
        return f"ran while the capture was held by {holder(current)}; one capture runs per process at a time"
    if ended:
        return "ran after the thread that began its step ended (its session stopped with it)"
    return None


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
        "_backend",
        "_batches",
        "_claim",
        "_slot",
        "_discrete",
        "_label",
        "_on_unseen",
        "_first_miss",
        "_schedule",
        "_sessions",
        "_stepped_in",
        "active",
        "role",
        "step",
        "tree",
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
        on_unseen: Callable[[], bool] = lambda: False,
    ) -> None:
        self.role, self.step, self._label = label.role, label.step, label
        self._annotator, self._backend, self._slot = annotator, backend, slot
        self._discrete, self._schedule, self._claim = discrete, schedule, claim
        self._on_unseen = on_unseen  # the role switches to capturing every thread; False: it cannot
        self._sessions: list[Session] = []
        self._stepped_in: list[str] = []  # continuous: the regions its mini-batches ran in
        # A thread-safe once-flag (next() of an itertools.count is atomic, and 0 only the first
        # time): the first region of this step its session missed is said and recorded, no other.
        self._first_miss = itertools.count()
        self.active = True
        find = None if claim is None else functools.partial(slot.step_session, claim)
        # Continuous: the step's mini-batches follow the role's schedule in the shared session
        # (a capture that cannot pause records them all: see Batches.begin).
        self._batches = Batches(None if discrete else schedule, find=find)
        #: The step's metrics tree, when it is timed (set by its StepContext): a stage
        #: capture's start and stop are the step's profiling waits in its ledger.
        self.tree: Root | None = None

    def stage(
        self, name: str, scheduled: bool, color: int | None, context: Entry | None, kind: str | None = None
    ) -> Handle:
        """Open stage ``name`` (of ``kind``, when it declares one): a region and, for a discrete
        outermost stage, its own capture."""
        owner = None if context is None else _owner(context)
        if owner is not None and owner.opaque:  # inside a stage refused its capture: nothing
            return opaque()
        if self._discrete and owner is None:
            return self._stage_capture(name, scheduled, color, kind)
        self._seen(name, kind)
        return Handle(self._annotator, name, color, self)

    def _seen(self, name: str, kind: str | None = None) -> None:
        """A region ``name`` opens in this step's session (listed among its stages, with its
        declared ``kind``), or is said missed when the session cannot record it."""
        current = self._slot.current
        claim = self._claim
        if claim is None:  # a stage nested in a discrete stage's own capture
            if current is not None:
                current.stages.add(name)
                current.book.declare(name, kind)
            return
        if current is None:
            current = self._slot.step_session(claim)  # a step that waited for its thread
        if current is not None and current.kind == "step" and self.role in current.roles:
            current.stages.add(name)
            current.book.declare(name, kind)
            if not current.owned_here():
                current.missed = True  # its trace may hold nothing: this record says why
                self._missed(name, None)
        elif claim not in self._slot.claims.refused:  # a refused capture is recorded already
            self._missed(name, _elsewhere(current, claim in self._slot.claims.ended))

    def region(self, name: str, context: Entry | None, make: Callable[..., H], kind: str | None = None) -> H | None:
        """Open a region ``name`` (of ``kind``) in what this step records, never a capture of its
        own: the handle ``make(annotator, name, color, recorder)`` (a :class:`Handle` subclass); in
        discrete mode outside every stage, or inside a stage refused its capture, nothing
        (``rollout_window``: generation shows in the trainer's trace where it ran; its engines
        record themselves)."""
        owner = None if context is None else _owner(context)
        if (self._discrete and owner is None) or (owner is not None and owner.opaque):
            return None
        self._seen(name, kind)
        return make(self._annotator, name, None, self)

    def _missed(self, name: str, why: str | None) -> None:
        """A region of this continuous step that its session cannot record (``why`` None: it
        runs on a thread the session does not see, and the role switches to capturing every
        thread): said and recorded (an ``incomplete`` trace record) once per step."""
        if next(self._first_miss):  # not the first: said already
            return
        reason = f"{name!r} {why or _unseen_thread(self._on_unseen())}"
        once(
            f"missed:{self.role}",
            logging.ERROR,
            "[profdsl rank %s] %s step %s: %s",
            self._label.rank,
            self.role,
            self.step,
            reason,
        )
        self._record(self._label.loss("incomplete", reason, stage=name))

    def _record(self, record: TraceRecord) -> None:
        self._slot.writer.submit(RecordJob(self._label.save_path, record))

    def _stage_capture(self, name: str, scheduled: bool, color: int | None, kind: str | None) -> Handle:
        schedule = self._schedule if scheduled else None
        label = attrs.evolve(self._label, stage=name)
        began = time.perf_counter()
        session = self._slot.begin_stage(label, self._backend, schedule)
        self._waited(began)
        if isinstance(session, Busy):
            self._refused(name, scheduled, session)
            if scheduled:  # its mini-batches must not drive (or mislabel) another stage's windows
                return opaque()
        elif session is not None:
            session.book.declare(name, kind)
            self._sessions.append(session)
            batches = Batches(schedule, session=session)
            finish = functools.partial(self._stage_ended, session, batches, name)
            return OwningHandle(self._annotator, name, color, self, batches=batches, finish=finish)
        self._note(name, mini_batch=False, kind=kind)
        return Handle(self._annotator, name, color, self)

    def _stage_ended(self, session: Session, batches: Batches, name: str) -> None:
        began = time.perf_counter()
        self._slot.end_stage(session)
        self._waited(began)
        self._windowless(batches, name)

    def _waited(self, began: float) -> None:
        """A stage capture's start or stop held the step up since ``began``: its ledger's
        overhead, when the step is timed."""
        tree = self.tree
        if tree is not None:
            tree.wait(time.perf_counter() - began)

    def _windowless(self, batches: Batches, stage: str | None) -> None:
        """Say (once per role and stage), and record, a schedule that recorded no window over
        the mini-batches of a discrete stage or of a continuous step (``stage`` None)."""
        schedule = batches.schedule
        if schedule is None or (stage is None and batches.seen == 0):
            return  # a continuous step without mini-batches records the step whole
        why = no_window(schedule, batches.seen)
        if why is None:
            return
        inside = stage if stage is not None else ", ".join(map(repr, self._stepped_in)) or None
        where = f"stage {stage!r}" if stage is not None else f"step (mini-batches in {inside})"
        once(
            f"no-window:{self.role}:{stage}",
            logging.WARNING,
            "[profdsl rank %s] %s %s, step %s: %s",
            self._label.rank,
            self.role,
            where,
            self.step,
            why,
        )
        self._record(self._label.loss("empty", why, stage=stage if stage is not None else inside))

    def _refused(self, name: str, scheduled: bool, busy: Busy) -> None:
        reason = (
            f"began while the capture was held by {busy.holder} in another thread or task; "
            "one capture runs per process at a time"
        )
        once(
            f"stage-busy:{self.role}:{name}",
            logging.ERROR if scheduled else logging.WARNING,
            "[profdsl rank %s] %s stage %r %s: it gets no trace of its own%s",
            self._label.rank,
            self.role,
            name,
            reason,
            " and records no mini-batches" if scheduled else "",
        )
        self._record(self._label.loss("skipped", reason, stage=name))

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
            self._foreign(base)  # torch's session must not be stepped or paused from here
            if self._claim is not None:
                self._missed(base, None)
            return None
        index, recorded = batches.begin(session)
        name = f"{base}{index}"
        if session is None:  # outside any capture this role drives: a plain region
            self._note(base, mini_batch=True)
            return Handle(annotator, name, None, self)
        if session.kind == "stage":
            session.note(base, mini_batch=True)
            if batches.schedule is None:  # its end is counted by the stage's trace-size budget
                return OwningHandle(annotator, name, None, self, finish=session.batch_recorded)
            return OwningHandle(
                annotator, name, None, self, finish=functools.partial(_advance_outside, session, index, context, owner)
            )
        session.mini_batch_began(recorded)
        parent = getattr(getattr(context, "key", None), "name", None)
        if isinstance(parent, str) and parent not in self._stepped_in:
            self._stepped_in.append(parent)
        if recorded:
            session.note(base, mini_batch=True)
        schedule = batches.schedule if session.capture is not None and session.capture.pausable else None
        finish = functools.partial(session.mini_batch_ended, self.role, self.step, schedule, index, recorded)
        # A left-out mini-batch opens no region: the trace holds exactly the windows it lists.
        return OwningHandle(
            annotator if recorded else None,
            name,
            None,
            self,
            finish=finish,
            unfinish=functools.partial(session.mini_batch_withdrawn, recorded),
        )

    def _foreign(self, base: str) -> None:
        once(
            f"mini-batch-thread:{self.role}",
            logging.ERROR,
            "[profdsl rank %s] %s: a %r mini-batch ran on thread %r, but its capture runs on "
            "another thread, from which it cannot be driven; it is not recorded. Run "
            "mini-batches on the thread of their stage (or of start), or set "
            "TorchOptions(all_threads=True)",
            self._label.rank,
            self.role,
            base,
            threading.current_thread().name,
        )

    def continued(self, handle: Handle) -> None:
        """A region of this step was reopened (``handle``'s): the capture recording it counts a
        piece of an earlier entry, not an entry, at the path it sits at."""
        current = self._slot.current
        if current is not None:
            current.continued(handle.name, _path(handle))

    def _note(self, name: str, *, mini_batch: bool, kind: str | None = None) -> None:
        current = self._slot.current
        if current is not None:
            current.note(name, mini_batch=mini_batch)
            current.book.declare(name, kind)

    def close(self) -> None:
        """The step is over: end the stage captures it opened that are still open here."""
        self.active = False
        sessions, self._sessions = self._sessions, []
        for session in sessions:
            if self._slot.current is session and session.owned_here() and session.cut_short is None:
                session.cut_short = f"step {self.step} ended while stage {session.label.stage!r} was still open"
            self._slot.end_stage(session)
        if not self._discrete:
            self._windowless(self._batches, None)


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
