"""The recorder: what the DSL may do during one profiled step of one role.

A :class:`~profdsl.runtime.profiler.Profiler` hands out one :class:`Recorder` per profiled step
(and the :data:`NULL_RECORDER` otherwise), as OpenTelemetry's tracer hands out spans. The DSL
calls :meth:`Recorder.stage` and :meth:`Recorder.mini_batch`, passing the innermost open entry of
its context, and gets back a :class:`~profdsl.runtime.handles.Handle` for that entry alone.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import attrs

from profdsl.capture.annotators import Annotator
from profdsl.capture.base import Backend
from profdsl.collect.export import TraceLabel
from profdsl.collect.manifest import append_record, make_record
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.runtime.context import Entry, walk
from profdsl.runtime.coordinator import Busy, Claim, Coordinator
from profdsl.runtime.handles import Batches, Handle, opaque

if TYPE_CHECKING:
    from profdsl.runtime.segment import Segment

__all__ = ["NULL_RECORDER", "NullRecorder", "Recorder"]


def _owner(context: Entry | None) -> Handle | None:
    """The innermost open entry of the context that numbers mini-batches (a stage with its own
    capture) or refuses them."""
    for entry in walk(context):
        handle = entry.value
        if isinstance(handle, Handle) and not handle.closed and (
                handle.batches is not None or handle.opaque):
            return handle
    return None


class Recorder:
    """One role's profiled step: opens stage and mini-batch regions and, in discrete mode,
    stage captures."""

    __slots__ = ("_annotator", "_backend", "_batches", "_coordinator", "_discrete", "_label",
                 "_schedule", "_segments", "role", "step")

    def __init__(self, label: TraceLabel, *, annotator: Annotator | None, backend: Backend,
                 coordinator: Coordinator, discrete: bool, schedule: Schedule | None,
                 claim: Claim | None) -> None:
        self.role, self.step, self._label = label.role, label.step, label
        self._annotator, self._backend, self._coordinator = annotator, backend, coordinator
        self._discrete, self._schedule = discrete, schedule
        self._segments: list[Segment] = []
        find = None if claim is None else functools.partial(coordinator.step_segment, claim)
        # Continuous: the step's mini-batches follow the role's schedule in the shared session.
        self._batches = Batches(None if discrete else schedule, role=self.role, step=self.step,
                                find=find)

    def stage(self, name: str, scheduled: bool, color: int | None, context: Entry | None) -> Handle:
        """Open stage ``name``: a region and, for a discrete outermost stage, its own capture."""
        if self._discrete and _owner(context) is None:
            return self._stage_capture(name, scheduled, color)
        current = self._coordinator.current
        if current is not None:
            current.stages.add(name)
        return Handle(self._annotator, name, color)

    def _stage_capture(self, name: str, scheduled: bool, color: int | None) -> Handle:
        schedule = self._schedule if scheduled else None
        label = attrs.evolve(self._label, stage=name)
        segment = self._coordinator.begin_stage(label, self._backend, schedule)
        if isinstance(segment, Busy):
            self._refused(name, scheduled, segment)
            if scheduled:  # its mini-batches must not drive (or mislabel) another stage's windows
                return opaque()
        elif segment is not None:
            self._segments.append(segment)
            batches = Batches(schedule, role=self.role, step=self.step, segment=segment)
            finish = functools.partial(self._coordinator.end_stage, segment)
            return Handle(self._annotator, name, color, batches=batches, finish=finish)
        self._note(name, mini_batch=False)
        return Handle(self._annotator, name, color)

    def _refused(self, name: str, scheduled: bool, busy: Busy) -> None:
        reason = (f"began while the capture was held by {busy.holder} in another thread or task; "
                  "one capture runs per process at a time")
        once(f"stage-busy:{self.role}:{name}", logging.ERROR if scheduled else logging.WARNING,
             "[profdsl rank %s] %s stage %r %s: it gets no trace of its own%s",
             self._label.rank, self.role, name, reason,
             " and records no mini-batches" if scheduled else "")
        label = self._label
        append_record(label.save_path, make_record(
            "trace", None, status="skipped", reason=reason, role=self.role, stage=name,
            step=self.step, rank=label.rank, world_size=label.world_size, host=label.host,
            pid=label.pid))

    def mini_batch(self, base: str, context: Entry | None) -> Handle:
        """Open the next update mini-batch (a region ``f"{base}{i}"``)."""
        owner = _owner(context)
        if owner is not None and owner.opaque:
            return opaque()
        batches = self._batches if owner is None else owner.batches
        assert batches is not None
        index, recorded, segment = batches.begin()
        name = f"{base}{index}"
        if segment is None:  # discrete, outside any stage capture: a plain region
            self._note(base, mini_batch=True)
            return Handle(self._annotator, name)
        if segment.kind == "stage":
            segment.note(base, mini_batch=True)
            finish = functools.partial(segment.advance, index) if batches.schedule else None
            return Handle(self._annotator, name, finish=finish)
        segment.mini_batch_began(recorded)
        if recorded:
            segment.note(base, mini_batch=True)
        finish = functools.partial(segment.mini_batch_ended, self.role, self.step,
                                   batches.schedule, index, recorded)
        # A left-out mini-batch opens no region: the trace holds exactly the windows it lists.
        return Handle(self._annotator if recorded else None, name, finish=finish)

    def _note(self, name: str, *, mini_batch: bool) -> None:
        current = self._coordinator.current
        if current is not None:
            current.note(name, mini_batch=mini_batch)

    def close(self) -> None:
        """The step is over: end the stage captures it opened that are still open here."""
        segments, self._segments = self._segments, []
        for segment in segments:
            self._coordinator.end_stage(segment)


class NullRecorder:
    """The recorder of a step, rank or config that is not profiled: opens nothing."""

    __slots__ = ()
    role: str | None = None

    def stage(self, name: str, scheduled: bool, color: int | None, context: Entry | None) -> None:
        """Open nothing."""
        return None

    def mini_batch(self, base: str, context: Entry | None) -> None:
        """Open nothing."""
        return None

    def close(self) -> None:
        """Nothing to close."""


NULL_RECORDER = NullRecorder()
