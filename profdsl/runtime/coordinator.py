"""The one capture session a process may have open, and whom it belongs to.

torch allows one profiler session per process, so every role of the process shares one slot:

- Continuous roles *claim* the slot for their profiled steps. The first claim opens a step
  segment; fused roles' claims join it; it stops when the last claim is released.
- A discrete stage opens a stage segment when the slot is free. When a continuous step segment
  holds it (mixed modes: ref continuous, actor discrete), the step segment is cut: written as a
  part, the stage gets its own trace, and the step resumes as the next part afterwards, so that
  each trace carries exactly its own role's and stage's name.
- A discrete stage that starts while another stage's segment is open elsewhere (another thread or
  asyncio task, not nested in it) gets no trace of its own: the caller decides what it becomes.

Decisions are taken under a lock; sessions are started and stopped outside it, on the thread
that owns them.
"""

from __future__ import annotations

import logging
import threading

import attrs

from profdsl.capture.base import Backend, Runner
from profdsl.capture.runner import Inline, ProfilerThread
from profdsl.collect.export import TraceLabel
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.runtime.segment import Segment

__all__ = ["Busy", "Claim", "Coordinator"]


@attrs.frozen(eq=False)
class Claim:
    """A continuous role's hold on the slot: the label of its step trace, and its backend."""

    label: TraceLabel
    backend: Backend


@attrs.frozen
class Busy:
    """The slot is held by ``holder`` (e.g. ``"actor stage 'update_actor'"``) elsewhere."""

    holder: str


def _holder(segment: Segment) -> str:
    label = segment.label
    what = f"stage {label.stage!r}" if segment.kind == "stage" else f"step {label.step}"
    return f"{label.role} {what}"


class Coordinator:
    """The process's capture slot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: Segment | None = None
        self._claims: list[Claim] = []
        self._pieces = 0  # parts already written of the step session being cut
        self._thread: ProfilerThread | None = None

    # -- continuous steps -------------------------------------------------------------------
    def claim(self, claim: Claim) -> None:
        """A continuous role's profiled step (or run of steps) begins."""
        to_start = to_refresh = None
        with self._lock:
            self._claims.append(claim)
            current = self.current
            if current is None:
                self._pieces = 0
                to_start = self.current = self._step_segment(part=None)
            elif current.kind == "step":
                to_refresh = current
        if to_start is not None:
            self._start(to_start)
        elif to_refresh is not None:
            to_refresh.join(claim.label.role)

    def release(self, claim: Claim) -> None:
        """A continuous role's session ends: the step segment stops with its last claim."""
        with self._lock:
            if claim in self._claims:
                self._claims.remove(claim)
            if self._claims:
                return
            self._pieces = 0
            current = self.current
            if current is None or current.kind != "step":
                return
            if not current.owned_here():
                _foreign(current, "stopping it")
                return
            self.current = None
        current.stop()

    def step_segment(self, claim: Claim) -> Segment | None:
        """The step segment ``claim`` records into right now, if any."""
        current = self.current
        if current is not None and current.kind == "step" and claim in self._claims:
            return current
        return None

    # -- discrete stages --------------------------------------------------------------------
    def begin_stage(self, label: TraceLabel, backend: Backend, schedule: Schedule | None, *,
                    cut: bool = True) -> Segment | Busy | None:
        """Open a stage segment, cutting a step segment this thread owns (unless ``cut`` is
        False). :class:`Busy` when the slot is held by a stage elsewhere (or by a step segment
        that cannot be cut); None when the session could not start."""
        to_cut = None
        with self._lock:
            current = self.current
            if current is not None:
                if not cut or current.kind != "step" or not current.owned_here():
                    return Busy(_holder(current))
                to_cut = current
                to_cut.label = attrs.evolve(to_cut.label, part=self._pieces)
                self._pieces += 1
            segment = self.current = Segment("stage", label, backend, schedule)
        if to_cut is not None:
            to_cut.stop()
        if not self._start(segment):
            return None
        return segment

    def end_stage(self, segment: Segment) -> None:
        """A stage segment ends; a step segment it cut resumes as the next part."""
        resume = None
        with self._lock:
            if self.current is not segment:
                return
            if not segment.owned_here():
                _foreign(segment, "stopping it")
                return
            self.current = None
            if self._claims:  # numbered only if it was cut before
                resume = self.current = self._step_segment(part=self._pieces or None)
        segment.stop()
        if resume is not None:
            self._start(resume)

    # -- helpers ----------------------------------------------------------------------------
    def _step_segment(self, *, part: int | None) -> Segment:
        first = self._claims[0]
        segment = Segment("step", attrs.evolve(first.label, part=part), first.backend)
        for claim in self._claims[1:]:
            segment.join(claim.label.role)
        return segment

    def _start(self, segment: Segment) -> bool:
        if segment.start(self._runner(segment.backend)):
            return True
        with self._lock:
            if self.current is segment:
                self.current = None
        return False

    def _runner(self, backend: Backend) -> Runner:
        if not getattr(backend, "all_threads", False):
            return Inline()
        with self._lock:  # never called with the lock held
            if self._thread is None:
                self._thread = ProfilerThread()
            return self._thread

    def reset(self) -> None:
        """Stop the open session (when this thread may) and forget every claim (tests)."""
        with self._lock:
            current, self.current = self.current, None
            self._claims, self._pieces = [], 0
        if current is not None and current.owned_here():
            current.stop()

    def forget(self) -> None:
        """Forget the slot without touching torch (a forked child: the session is not here)."""
        self._lock = threading.Lock()
        self.current, self._claims, self._pieces, self._thread = None, [], 0, None


def _foreign(segment: Segment, what: str) -> None:
    once(f"torch-thread:{what}", logging.ERROR,
         "[profdsl rank %s] the profiler session was started on another thread; %s from this "
         "thread is skipped (torch crashes otherwise). Call start/stop and run stages on one "
         "thread, or set TorchOptions(all_threads=True)", segment.label.rank, what)
