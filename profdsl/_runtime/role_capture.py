"""What one role of one process captures with: its backend and annotator (none when it is not
traced here), the claim of a continuous step, and the recorder each profiled step hands the DSL.

A role whose work was seen on threads its own-thread session could not see switches, from its
next session on, to capturing every thread (where torch can: see
:mod:`profdsl._runtime.slot.owner`). A rank the plan does not trace gets its tools when a capture
request first traces it (:meth:`RoleCapture.enable`).
"""

from __future__ import annotations

import logging

import attrs

from profdsl._capture.factory import make_annotator, make_backend
from profdsl._runtime.plan import RolePlan
from profdsl._runtime.recorder import NULL_RECORDER, NullRecorder, Recorder
from profdsl._runtime.slot.claims import Claim
from profdsl._runtime.slot.owner import comes_back
from profdsl._runtime.slot.slot import CaptureSlot
from profdsl.collect._export import TraceLabel
from profdsl.records.requests import CaptureNote

__all__ = ["RoleCapture"]


class RoleCapture:
    """One role's capture tools (``selected``: a backend exists) and its current recorder."""

    def __init__(self, plan: RolePlan, slot: CaptureSlot) -> None:
        self.plan, self._slot = plan, slot
        self.backend = make_backend(plan.capture) if plan.traced else None
        self.annotator = make_annotator(plan.capture, plan.role) if self.backend is not None else None
        self.recorder: Recorder | NullRecorder = NULL_RECORDER
        self.every_thread = False  # switched: its work was seen on threads its session could not see

    @property
    def selected(self) -> bool:
        """Whether this role captures anything (its rank is traced and a backend exists)."""
        return self.backend is not None

    def enable(self) -> bool:
        """A capture request traces this rank: make the backend and annotator the plan did not
        (on the step's thread, at a step boundary). False when none can be made."""
        if self.backend is None and self.plan.member:
            self.backend = make_backend(self.plan.capture)
            self.annotator = make_annotator(self.plan.capture, self.plan.role) if self.backend is not None else None
        return self.backend is not None

    def label(self, step: int | None, note: CaptureNote | None = None) -> TraceLabel:
        """Who and what a trace of ``step`` records (``note``: why, when a request asked)."""
        return attrs.evolve(self.plan.label, step=step, capture=note)

    def claim(self, step: int, note: CaptureNote | None = None) -> Claim:
        """The hold of this role's continuous step ``step`` on the slot, made on the thread that
        begins the step: it asks for a capture of every thread when the role switched, when
        ``TorchOptions.all_threads`` says so, or when this thread may never come back to stop
        the step (a pool thread)."""
        backend = self.backend
        assert backend is not None
        wanted = backend.tool == "torch" and (backend.all_threads or self.every_thread or not comes_back())
        if wanted and not backend.every_thread_possible:
            self.plan.say(
                logging.WARNING,
                "the step's work may run on other threads, but this torch cannot capture every "
                "thread (torch >= 2.7 can): its sessions record the thread that starts them",
                key="every-thread-impossible",
            )
            wanted = False
        return Claim(self.label(step, note), backend, every_thread=wanted)

    def switch_to_every_thread(self) -> bool:
        """The role's work was seen on a thread its session could not see: its next sessions
        capture every thread. False when this torch cannot."""
        if self.backend is None or not self.backend.every_thread_possible:
            return False
        self.every_thread = True
        return True

    def open(self, step: int, claim: Claim | None, note: CaptureNote | None = None) -> Recorder:
        """A profiled step begins: its recorder (which the profiler registers with the step)."""
        assert self.backend is not None
        config = self.plan.capture
        self.recorder = Recorder(
            self.label(step, note),
            annotator=self.annotator,
            backend=self.backend,
            slot=self._slot,
            discrete=config.discrete,
            schedule=config.torch.schedule,
            claim=claim,
            on_unseen=self.switch_to_every_thread,
        )
        return self.recorder

    def end(self) -> None:
        """The step is over (and no longer registered): its recorder closes what it opened."""
        recorder, self.recorder = self.recorder, NULL_RECORDER
        if isinstance(recorder, Recorder):
            recorder.close()
