"""A session: one capture of the process's slot, and what its traces are named and described by.

A *step* session records one or more continuous roles' profiled steps (fused roles share it; it
is named by the first of them and lists them all). A *stage* session records one discrete stage
(or, scheduled, one trace per recorded mini-batch window). The session keeps the region names it
saw and, in a step session, which mini-batches of which role and step it recorded, and writes
them into the trace's ``profdsl`` metadata. Each trace it ends is handed to the writer; a session
that cannot be ended has its loss recorded there instead (:mod:`profdsl._runtime.slot.traces`).
Its trace-size budget (:mod:`profdsl._runtime.slot.budget`) counts the mini-batches each trace
records and pauses collection for the rest of a window whose estimate passes
``TorchOptions.max_trace_mb``; what it collects meanwhile is :mod:`profdsl._runtime.slot.recording`.
"""

from __future__ import annotations

import threading

import attrs

from profdsl._capture.base import Backend, Capture, CaptureRefusedError, Runner
from profdsl._runtime.slot.budget import Budget
from profdsl._runtime.slot.interrupts import Signals
from profdsl._runtime.slot.owner import comes_back
from profdsl._runtime.slot.recording import Recording
from profdsl._runtime.slot.region_book import RegionBook
from profdsl._runtime.slot.traces import Traces
from profdsl._runtime.writer.jobs import RecordJob
from profdsl._runtime.writer.writer import Writer
from profdsl.collect._export import TraceLabel
from profdsl.config import Schedule
from profdsl.core._log import ONCE

__all__ = ["Session"]


class Session:
    """One capture session of this process; ``kind`` is ``"step"`` or ``"stage"`` (only a stage
    session has a ``schedule``)."""

    def __init__(
        self,
        kind: str,
        label: TraceLabel,
        backend: Backend,
        writer: Writer,
        schedule: Schedule | None = None,
        *,
        signals: Signals,
        thread: int | None = None,
    ) -> None:
        self.kind, self.label, self.backend, self.schedule = kind, label, backend, schedule
        self.writer, self.signals = writer, signals
        self.save_paths: list[str] = [label.save_path]  # its trace goes into the first; the others record where
        self.capture: Capture | None = None
        self.thread = threading.get_ident() if thread is None else thread  # where it starts
        self.stop_wanted = False  # asked to stop from another thread: its owner stops it
        self.returns = True  # its owner keeps coming back to profdsl (see slot.owner.comes_back)
        self.cut_short: str | None = None  # why it was stopped before its stage ended, if it was
        self.book = RegionBook(label.stage, schedule)
        self.budget = Budget(label, backend)
        self.recording = Recording(kind, schedule, self.book, self.budget, lambda: self.capture)
        self.traces = Traces(kind, self.book, writer, self.budget, self.recording)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, runner: Runner, *, every_thread: bool) -> None:
        """Open the capture (signals held meanwhile); when the backend could not start one (its
        ``capture`` stays None), that is recorded (``failed``, with the reason) for the trace it
        would have been."""
        self.returns = every_thread or comes_back()
        # The process's first session of a tool pays its one-time set-up (torch: 0.7-1.3 s).
        self.traces.first = ONCE.first(f"session-started:{self.backend.tool}")
        try:
            with self.signals.held():
                self.capture = self.backend.open(
                    rank=self.label.rank,
                    schedule=self.schedule,
                    describe=lambda window: self.traces.describe(self.label, self.roles, window),  # its label then
                    sink=self.traces.sink,
                    runner=runner,
                    every_thread=every_thread,
                )
        except CaptureRefusedError as exc:
            self.traces.dropped = True
            self.traces.record_loss(self.label, "failed", str(exc))
            return
        self.budget.ahead(None if self.schedule is None else self.schedule.active)

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles whose steps it records, the first naming it (its label's, once fused)."""
        return self.label.roles or (self.label.role,)

    @property
    def every_thread(self) -> bool:
        """Whether its capture records every thread (and may be driven from any)."""
        return self.capture is not None and self.capture.every_thread

    def owned_here(self) -> bool:
        """Whether the calling thread may drive this session's capture (start it, step it,
        pause it, stop it)."""
        capture = self.capture
        if capture is not None:
            return capture.owned_here()
        return threading.get_ident() == self.thread

    def stop(self) -> None:
        """Stop the capture and hand its trace to the writer (named by the current label).
        Ctrl-C is held while torch stops (:mod:`~profdsl._runtime.slot.interrupts`)."""
        capture, self.capture = self.capture, None
        if capture is None:
            return
        ready = self.traces.pending()
        try:
            with self.signals.held():
                capture.stop()
        except BaseException as exc:
            if self.traces.pending() == ready:  # torch stopped without handing its last trace over
                self.traces.record_loss(
                    self.label,
                    "incomplete",
                    f"interrupted ({type(exc).__name__}) while torch stopped the capture: its last events are lost",
                )
            raise
        finally:
            self.traces.hand_over(self.label, self.cut_short)

    def join(self, label: TraceLabel, *, told: bool = False) -> bool:
        """Another role's step (``label``) shares this session; True when that role writes into
        another save_path (its trace is this session's, written into the first role's: that
        save_path gets a record saying where, unless an earlier part of the step ``told`` it,
        and its hook waits for this session too)."""
        if label.role not in self.roles:
            self.label = attrs.evolve(self.label, roles=(*self.roles, label.role))
        if label.save_path in self.save_paths:
            return False
        self.save_paths.append(label.save_path)
        if told:
            return True
        where = (
            f"recorded in the capture it shares with role {self.label.role!r} (one capture per "
            f"process), written into {self.label.save_path}"
        )
        self.writer.submit(RecordJob(label.save_path, label.loss("skipped", where)))
        return True

    # -- what the DSL tells it (and its .book, its .recording) ------------------------------
    def advance(self, index: int) -> None:
        """A scheduled stage's mini-batch ``index`` ended (on the owner thread): step the
        capture's schedule."""
        capture = self.capture
        if capture is not None and capture.owned_here():
            try:
                self.recording.budget_step(index)
                with self.signals.held():
                    capture.advance(index)
            finally:
                self.recording.stepped(index)
                self.traces.hand_over(self.label, self.cut_short)

    # -- what the capture asks --------------------------------------------------------------
    def lost(self, reason: str) -> None:
        """The session cannot be ended here: record that its trace is lost, and why; what its
        owner still ends later is not written."""
        self.traces.dropped = True
        self.traces.record_loss(self.label, "failed", f"lost: {reason}")
