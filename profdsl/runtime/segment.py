"""A segment: one capture session, and what its trace is named and described by.

A *step* segment records one or more continuous roles' profiled steps (fused roles share it; it
is named by the first of them and lists them all). A *stage* segment records one discrete stage
(or, scheduled, one trace per recorded mini-batch window). The segment keeps the region names
its session saw and, in a step segment, which mini-batches of which role and step it recorded,
and writes them into the trace's ``profdsl`` metadata.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from profdsl.capture.base import Backend, Runner, Session
from profdsl.collect.export import TraceLabel, write_events
from profdsl.config import Schedule
from profdsl.core.log import once
from profdsl.core.schedule import action_at, cycle_of
from profdsl.records.schema import TraceMeta, to_json
from profdsl.runtime.region_book import RegionBook

if TYPE_CHECKING:
    from profdsl.runtime.exports import Exports

__all__ = ["Segment"]


class Segment:
    """One capture session of this process; ``kind`` is ``"step"`` or ``"stage"``."""

    def __init__(self, kind: str, label: TraceLabel, backend: Backend, exports: Exports,
                 schedule: Schedule | None = None, *, thread: int | None = None) -> None:
        self.kind, self.label, self.backend, self.schedule = kind, label, backend, schedule
        self.exports = exports  # where its traces are finished, off this thread
        self.roles: list[str] = [label.role]
        self.session: Session | None = None
        self.thread = threading.get_ident() if thread is None else thread  # where it starts
        self.orphaned = False  # its stop was asked from another thread; its own thread stops it
        self.cut_short: str | None = None  # why it was stopped before its stage ended, if it was
        self._collecting = True
        self.book = RegionBook(label.stage, schedule)
        self.stages = self.book.stages  # the stage names seen (the recorder adds nested ones)
        self._muted = 0
        self._open_recorded = 0
        self._position = 0  # a scheduled stage: the mini-batch torch's schedule is at

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, runner: Runner) -> bool:
        """Open the session; False when the backend could not start one."""
        self.session = self.backend.open(rank=self.label.rank, schedule=self.schedule,
                                         describe=self.describe, sink=self.sink, runner=runner)
        return self.session is not None

    def owned_here(self) -> bool:
        """Whether the calling thread may drive this segment's session (start it, step it,
        pause it, stop it)."""
        session = self.session
        if session is not None:
            return session.owned_here()
        return self.backend.all_threads or threading.get_ident() == self.thread

    def stop(self) -> None:
        """Stop the session and write its trace (the sink names it by the current label)."""
        session, self.session = self.session, None
        if session is not None:
            session.stop()

    def join(self, role: str) -> None:
        """Another role's step shares this segment."""
        if role not in self.roles:
            self.roles.append(role)
            self.label = attrs.evolve(self.label, roles=tuple(self.roles))
            if self.session is not None and self.session.owned_here():
                self.session.refresh()

    # -- what the DSL tells it --------------------------------------------------------------
    def note(self, name: str, *, mini_batch: bool) -> None:
        """A region opened while this segment recorded (a stage, or a mini-batch base name)."""
        self.book.note(name, mini_batch=mini_batch)

    def mini_batch_began(self, recorded: bool) -> None:
        """A mini-batch of a continuous role began, on the thread that owns the session;
        collection pauses for a left-out one (unless a recorded one is open meanwhile, e.g. on
        another asyncio task)."""
        if recorded:
            self._open_recorded += 1
        else:
            self._muted += 1
        self._apply_collecting()

    def mini_batch_ended(self, role: str, step: int | None, schedule: Schedule | None,
                         index: int, recorded: bool) -> None:
        """A mini-batch of a continuous role ended."""
        if recorded:
            self._open_recorded -= 1
            self.book.recorded(role, step, schedule, index)
        else:
            self._muted -= 1
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
        """A scheduled stage's mini-batch ``index`` ended (on the owning thread): step the
        session's schedule."""
        session = self.session
        if session is not None and session.owned_here():
            session.advance(index)
            self._position = index + 1

    def continued(self, name: str) -> None:
        """A region named ``name`` was reopened (closed around a schedule step, a ``yield`` or
        an ``await``): when the session records it, the trace's ``regions.continued`` counts it,
        so that readers count one entry, not one per piece."""
        if self.kind == "step":
            recording, cycle = self._collecting, None
        elif self.schedule is None:
            recording, cycle = True, None
        else:
            recording = action_at(self.schedule, self._position).records
            cycle = cycle_of(self.schedule, self._position)
        if recording:
            self.book.continued(name, cycle)

    def _apply_collecting(self) -> None:
        session = self.session
        want = not (self._muted > 0 and self._open_recorded == 0)
        if session is not None and want != self._collecting and session.owned_here():
            self._collecting = want
            session.set_collecting(want)

    # -- what the session asks --------------------------------------------------------------
    def describe(self, window: tuple[int, int] | None) -> dict[str, Any]:
        """The trace's ``profdsl`` metadata."""
        label = self.label
        return to_json(TraceMeta(
            role=label.role, roles=tuple(self.roles), stage=label.stage, step=label.step,
            rank=label.rank, world_size=label.world_size, window=window, windows=self.book.windows(),
            config_hash=label.config_hash, host=label.host, pid=label.pid,
            regions=self.book.regions(window),
            parallel=label.parallel.coords(), parallel_sizes=label.parallel.sizes(),
        ))

    def sink(self, write: Callable[[str], object], window: tuple[int, int] | None,
             time_ms: int, blocked_s: float = 0.0) -> None:
        """A trace is ready: have torch write its events here, on the session's thread, then
        hand it to the background exports. ``blocked_s``: how long the session held up its
        thread for this trace so far."""
        extra: dict[str, object] = dict(windows=self.book.windows()) if self.kind == "step" else {}
        if self.cut_short:
            extra.update(note=f"stopped early: {self.cut_short}")
        began = time.perf_counter()
        pending = write_events(write, self.label, window=window, time_ms=time_ms, extra=extra)
        if pending is not None:  # else recorded failed
            self.exports.submit(pending, blocked_s=blocked_s + time.perf_counter() - began)

    def lost(self, reason: str) -> None:
        """The session cannot be ended cleanly: record that its trace is lost, and why."""
        label = self.label
        once(f"segment-lost:{label.save_path}", logging.ERROR,
             "[profdsl rank %s] the %s trace of step %s is lost: %s", label.rank, label.role,
             label.step, reason)
        attrs.evolve(label, roles=tuple(self.roles)).record_loss("failed", f"lost: {reason}")
