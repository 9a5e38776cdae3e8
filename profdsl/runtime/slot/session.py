"""A session: one capture of the process's slot, and what its traces are named and described by.

A *step* session records one or more continuous roles' profiled steps (fused roles share it; it
is named by the first of them and lists them all). A *stage* session records one discrete stage
(or, scheduled, one trace per recorded mini-batch window). The session keeps the region names it
saw and, in a step session, which mini-batches of which role and step it recorded, and writes
them into the trace's ``profdsl`` metadata. Each trace it ends is handed to the writer; a session
that cannot be ended has its loss recorded there instead. Its trace-size budget
(:mod:`profdsl.runtime.slot.budget`) counts the mini-batches each trace records and pauses
collection for the rest of a window whose estimate passes ``TorchOptions.max_trace_mb``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import attrs

from profdsl.capture.base import Backend, Capture, CaptureRefusedError, Held, Runner
from profdsl.collect.export import TraceLabel, pending_trace
from profdsl.config import Schedule
from profdsl.core.completeness import Expect
from profdsl.core.log import ONCE, once
from profdsl.core.schedule import Action, action_at, cycle_of
from profdsl.records.fields import to_json
from profdsl.records.meta import TraceMeta
from profdsl.runtime.slot.budget import Budget
from profdsl.runtime.slot.interrupts import Signals
from profdsl.runtime.slot.owner import comes_back
from profdsl.runtime.slot.region_book import RegionBook
from profdsl.runtime.writer.jobs import ExportJob, RecordJob
from profdsl.runtime.writer.writer import Writer

__all__ = ["Session"]


class _Ready(NamedTuple):
    """A trace torch handed over, not yet given to the writer."""

    write: Callable[[str], object]
    window: tuple[int, int] | None
    time_ms: int
    held: Held
    noted: float
    expect: Expect
    measured: Callable[[int], object] | None


class Session:
    """One capture session of this process; ``kind`` is ``"step"`` or ``"stage"``."""

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
        self.roles: list[str] = [label.role]
        self.save_paths: list[str] = [label.save_path]  # its trace goes into the first; the others record where
        self.capture: Capture | None = None
        self.thread = threading.get_ident() if thread is None else thread  # where it starts
        self.stop_wanted = False  # asked to stop from another thread: its owner stops it
        self.returns = True  # its owner keeps coming back to profdsl (see slot.owner.comes_back)
        self.dropped = False  # its loss is recorded: what it still ends is not written
        self.cut_short: str | None = None  # why it was stopped before its stage ended, if it was
        self._collecting = True
        self.book = RegionBook(label.stage, schedule)
        self.stages = self.book.stages  # the stage names seen (the recorder adds nested ones)
        self._muted = 0
        self._open_recorded = 0
        self._position = 0  # a scheduled stage: the mini-batch torch's schedule is at
        self.budget = Budget(label, backend)
        self.missed = False  # work of its window ran on a thread it cannot see (recorded apart)
        self._paused = False  # collection was paused at some point (left-out mini-batches)
        self._ready: list[_Ready] = []
        self._first = False  # the process's first session of its tool (its start pays the set-up)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, runner: Runner, *, every_thread: bool) -> bool:
        """Open the capture (signals held meanwhile); False when the backend could not start
        one: that is recorded (``failed``, with the reason) for the trace it would have been."""
        self.returns = every_thread or comes_back()
        # The process's first session of a tool pays its one-time set-up (torch: 0.7-1.3 s).
        self._first = ONCE.first(f"session-started:{self.backend.tool}")
        try:
            with self.signals.held():
                self.capture = self.backend.open(
                    rank=self.label.rank,
                    schedule=self.schedule,
                    describe=self.describe,
                    sink=self.sink,
                    runner=runner,
                    every_thread=every_thread,
                )
        except CaptureRefusedError as exc:
            self.dropped = True
            self._record_loss("failed", str(exc))
            return False
        scheduled = self.kind == "stage" and self.schedule is not None
        self.budget.ahead(self.schedule.active if scheduled and self.schedule is not None else None)
        return True

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
        Ctrl-C is held while torch stops (:mod:`~profdsl.runtime.slot.interrupts`)."""
        capture, self.capture = self.capture, None
        if capture is None:
            return
        ready = len(self._ready)
        try:
            with self.signals.held():
                capture.stop()
        except BaseException as exc:
            if len(self._ready) == ready:  # torch stopped without handing its last trace over
                self._record_loss(
                    "incomplete",
                    f"interrupted ({type(exc).__name__}) while torch stopped the capture: its last events are lost",
                )
            raise
        finally:
            self.hand_over()

    def join(self, label: TraceLabel) -> bool:
        """Another role's step (``label``) shares this session; True when that role writes into
        another save_path (its trace is this session's, written into the first role's: that
        save_path gets a record saying where, and its hook waits for this session too)."""
        if label.role not in self.roles:
            self.roles.append(label.role)
            self.label = attrs.evolve(self.label, roles=tuple(self.roles))
        if label.save_path in self.save_paths:
            return False
        self.save_paths.append(label.save_path)
        where = (
            f"recorded in the capture it shares with role {self.label.role!r} (one capture per "
            f"process), written into {self.label.save_path}"
        )
        self.writer.submit(RecordJob(label.save_path, label.loss("skipped", where)))
        return True

    # -- what the DSL tells it --------------------------------------------------------------
    def note(self, name: str, *, mini_batch: bool) -> None:
        """A region opened while this session recorded (a stage, or a mini-batch base name)."""
        self.book.note(name, mini_batch=mini_batch)

    def mini_batch_began(self, recorded: bool) -> None:
        """A mini-batch of a continuous role began, on the session's owner thread; collection
        pauses for a left-out one (unless a recorded one is open meanwhile, e.g. on another
        asyncio task)."""
        if recorded:
            self._open_recorded += 1
        else:
            self._muted += 1
        self._apply_collecting()

    def mini_batch_ended(
        self, role: str, step: int | None, schedule: Schedule | None, index: int, recorded: bool
    ) -> None:
        """A mini-batch of a continuous role ended."""
        if recorded:
            self._open_recorded -= 1
            if self.budget.cut is None:  # after a cut, the mini-batches are not in the trace
                self.book.recorded(role, step, schedule, index)
                self.budget.recorded(pausable=self._can_pause())
        else:
            self._muted -= 1
        self._apply_collecting()

    def batch_recorded(self) -> None:
        """A mini-batch of an unscheduled stage session ended (on its owner thread): the budget
        counts it, and may end the trace here."""
        if self.budget.cut is None and self.budget.recorded(pausable=self._can_pause()):
            self._apply_collecting()

    def mini_batch_withdrawn(self, recorded: bool) -> None:
        """A mini-batch of a continuous role that began was withdrawn (it held nothing): its
        pause, if it paused collection, ends, and no window lists it."""
        if recorded:
            self._open_recorded -= 1
        else:
            self._muted -= 1
        self._apply_collecting()

    def advance(self, index: int) -> None:
        """A scheduled stage's mini-batch ``index`` ended (on the owner thread): step the
        capture's schedule."""
        capture = self.capture
        if capture is not None and capture.owned_here():
            try:
                self._budget_step(index)
                with self.signals.held():
                    capture.advance(index)
            finally:
                self._position = index + 1
                self.hand_over()

    def _budget_step(self, index: int) -> None:
        """Before a scheduled stage's schedule steps past mini-batch ``index``: the budget counts
        a recorded one; a window cut earlier resumes collection as it ends (torch starts the next
        with collection on), and one that passes the budget before its last mini-batch pauses."""
        if self.schedule is None:
            return
        action = action_at(self.schedule, index)
        if action is Action.RECORD_AND_SAVE:
            if self.budget.cut is None:
                self.budget.count()  # the window ends here anyway
            else:
                self._resume_for_window()
        elif action is Action.RECORD and self.budget.cut is None and self.budget.recorded(pausable=self._can_pause()):
            self._apply_collecting()

    def _resume_for_window(self) -> None:
        """Collection back on for the schedule step that ends a cut window."""
        capture = self.capture
        if capture is not None and capture.pausable and not self._collecting:
            self._collecting = True
            capture.set_collecting(True)

    def _can_pause(self) -> bool:
        capture = self.capture
        return capture is not None and capture.pausable and capture.owned_here()

    def continued(self, name: str, path: tuple[str, ...] | None = None) -> None:
        """A region named ``name`` was reopened (closed around a schedule step, a ``yield`` or
        an ``await``): when the session records it, the trace's ``regions.continued`` counts it
        (and ``regions.continued_at`` at its ``path``, the labels of the regions it is nested
        in and its own), so that readers count one entry, not one per piece."""
        if self.kind == "step":
            recording, cycle = self._collecting, None
        elif self.schedule is None:
            recording, cycle = True, None
        else:
            recording = action_at(self.schedule, self._position).records
            cycle = cycle_of(self.schedule, self._position)
        if recording:
            self.book.continued(name, cycle, path)

    def _apply_collecting(self) -> None:
        capture = self.capture
        want = not (self._muted > 0 and self._open_recorded == 0) and self.budget.cut is None
        if capture is not None and capture.pausable and want != self._collecting and capture.owned_here():
            self._collecting = want
            self._paused = self._paused or not want
            capture.set_collecting(want)

    # -- what the capture asks --------------------------------------------------------------
    def describe(self, window: tuple[int, int] | None) -> dict[str, Any]:
        """The trace's ``profdsl`` metadata."""
        label = self.label
        return to_json(
            TraceMeta(
                role=label.role,
                roles=tuple(self.roles),
                stage=label.stage,
                step=label.step,
                rank=label.rank,
                world_size=label.world_size,
                window=window,
                windows=self.book.windows(),
                config_hash=label.config_hash,
                host=label.host,
                pid=label.pid,
                regions=self.book.regions(window),
                parallel=label.parallel.coords(),
                parallel_sizes=label.parallel.sizes(),
                capture=label.capture,
            )
        )

    def sink(
        self,
        write: Callable[[str], object],
        window: tuple[int, int] | None,
        time_ms: int,
        held: Held,
        expect: Expect | None = None,
    ) -> None:
        """A trace is ready (called inside the capture's stop or schedule step): noted, to be
        handed to the writer once torch is done (:meth:`hand_over`). ``write(path)`` has torch
        write its events; ``held``: how long the capture held up its thread for it;
        ``expect``: what the capture knows of its completeness (the budget adds whether it was
        cut)."""
        cut, measured = self.budget.handed()
        expect = attrs.evolve(
            expect or Expect(), truncated=cut, regions=self._opened_regions(window), missed=self.missed
        )
        self._ready.append(_Ready(write, window, time_ms, held, time.perf_counter(), expect, measured))

    def _opened_regions(self, window: tuple[int, int] | None) -> bool:
        """Whether profdsl opened regions in the trace's window while it recorded: a stage
        session's own stage or recorded mini-batches, a step session's recorded mini-batches or
        the stages of a step that never paused (a paused one's stages may all be left out)."""
        if self.kind == "stage":
            return True
        return bool(self.book.windows()) or (bool(self.stages) and not self._paused)

    def hand_over(self) -> None:
        """Hand the ready traces to the writer, each after waiting for an export slot (at most
        ``export_timeout_s``; the trace goes when the wait runs out, and the rest without
        waiting when an interrupt cuts it short, then the interrupt goes on). Each record says
        how long the training thread was blocked for its trace, and of that: the session's
        start (on its first trace; ``init_ms`` for the process's first session), the call that
        ended its recording up to this hand-over, and the wait for an export slot."""
        ready, self._ready = self._ready, []
        label, interrupt = self.label, None
        for write, window, time_ms, held, noted, expect, measured in ready:
            if self.dropped:
                break  # recorded lost already (its owner came back after close() or exit)
            slot_wait = time.perf_counter()
            parts = dict(stop_ms=_ms(held.end_s + slot_wait - noted))
            if held.start_s is not None:
                parts.update(dict(init_ms=_ms(held.start_s)) if self._first else dict(start_ms=_ms(held.start_s)))
                self._first = False
            if interrupt is None:
                try:
                    if not self.writer.wait_below("export", label.export.in_flight, label.export.timeout_s):
                        once(
                            "export-slots",
                            logging.WARNING,
                            "profdsl: every export slot stayed busy for %gs; the next trace is handed over anyway",
                            label.export.timeout_s,
                        )
                except BaseException as exc:
                    interrupt = exc
            waited_ms = _ms(time.perf_counter() - slot_wait)
            extra: dict[str, object] = dict(windows=self.book.windows()) if self.kind == "step" else {}
            extra.update(parts)
            if self.cut_short:
                extra.update(note=f"stopped early: {self.cut_short}")
            blocked_ms = _ms(held.total_s + time.perf_counter() - noted)
            pending = pending_trace(
                write,
                label,
                window=window,
                time_ms=time_ms,
                extra=extra,
                blocked_ms=blocked_ms,
                wait_ms=waited_ms,
                expect=expect,
                measured=measured,
            )
            self.writer.submit(ExportJob(pending))
        if interrupt is not None:
            raise interrupt

    def lost(self, reason: str) -> None:
        """The session cannot be ended here: record that its trace is lost, and why; what its
        owner still ends later is not written."""
        self.dropped = True
        self._record_loss("failed", f"lost: {reason}")

    def _record_loss(self, status: str, reason: str) -> None:
        label = attrs.evolve(self.label, roles=tuple(self.roles))
        once(
            f"session-lost:{label.save_path}",
            logging.ERROR,
            "[profdsl rank %s] the %s trace of step %s is lost: %s",
            label.rank,
            label.role,
            label.step,
            reason,
        )
        self.writer.submit(RecordJob(label.save_path, label.loss(status, reason)))


def _ms(seconds: float) -> float:
    """Seconds as milliseconds, to the microsecond (a record's cost fields)."""
    return round(seconds * 1000, 3)
