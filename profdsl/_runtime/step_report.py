"""What one profiled step of one role tells of its regions: each noted in the session that
records it, or, where a capture misses it (another thread, another role's capture), refuses a
stage's own capture or records no window over its mini-batches, said (once) and recorded in the
role's save_path.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from profdsl._runtime.context import Entry
from profdsl._runtime.handles import Batches
from profdsl._runtime.slot.claims import Claim
from profdsl._runtime.slot.slot import Busy, CaptureSlot, holder
from profdsl._runtime.writer.jobs import RecordJob
from profdsl.collect._export import TraceLabel
from profdsl.core._log import once
from profdsl.core._schedule import no_window
from profdsl.records.manifest import TraceRecord

if TYPE_CHECKING:
    from profdsl._runtime.slot.session import Session

__all__ = ["StepReport"]


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


class StepReport:
    """The regions of one role's profiled step (``label``), as its session notes them or as the
    step says and records what no capture holds; ``claim``: its continuous step's claim on the
    slot, if any; ``on_unseen()``: the role switches to capturing every thread (False: it cannot)."""

    __slots__ = ("_claim", "_first_miss", "_label", "_on_unseen", "_slot", "stepped_in")

    def __init__(
        self, label: TraceLabel, slot: CaptureSlot, claim: Claim | None, on_unseen: Callable[[], bool]
    ) -> None:
        self._label, self._slot, self._claim, self._on_unseen = label, slot, claim, on_unseen
        self.stepped_in: list[str] = []  # continuous: the regions its mini-batches ran in
        # A thread-safe once-flag (next() of an itertools.count is atomic, and 0 only the first
        # time): the first region of this step its session missed is said and recorded, no other.
        self._first_miss = itertools.count()

    def seen(self, name: str, kind: str | None = None) -> None:
        """A region ``name`` opens in this step's session (listed among its stages, with its
        declared ``kind``), or is said missed when the session cannot record it."""
        current = self._slot.current
        claim = self._claim
        if claim is None:  # a stage nested in a discrete stage's own capture
            self.note(name, mini_batch=False, kind=kind)
            return
        if current is None:
            current = self._slot.step_session(claim)  # a step that waited for its thread
        if current is not None and current.kind == "step" and self._label.role in current.roles:
            current.book.note(name, kind=kind)
            if not current.owned_here():
                current.traces.missed = True  # its trace may hold nothing: this record says why
                self.missed(name, None)
        elif claim not in self._slot.claims.refused:  # a refused capture is recorded already
            self.missed(name, _elsewhere(current, claim in self._slot.claims.ended))

    def missed(self, name: str, why: str | None) -> None:
        """A region of this continuous step that its session cannot record (``why`` None: it
        runs on a thread the session does not see, and the role switches to capturing every
        thread): said and recorded (an ``incomplete`` trace record) once per step."""
        if next(self._first_miss):  # not the first: said already
            return
        reason = f"{name!r} {why or _unseen_thread(self._on_unseen())}"
        self._say(f"missed:{self._label.role}", logging.ERROR, " step %s: %s", self._label.step, reason)
        self.record(self._label.loss("incomplete", reason, stage=name))

    def record(self, record: TraceRecord) -> None:
        self._slot.writer.submit(RecordJob(self._label.save_path, record))

    def _say(self, key: str, level: int, message: str, *args: object) -> None:
        """Log ``message`` once under ``key``, after the step's rank and role."""
        once(key, level, "[profdsl rank %s] %s" + message, self._label.rank, self._label.role, *args)

    def windowless(self, batches: Batches, stage: str | None) -> None:
        """Say (once per role and stage), and record, a schedule that recorded no window over
        the mini-batches of a discrete stage or of a continuous step (``stage`` None)."""
        schedule = batches.schedule
        if schedule is None or (stage is None and batches.seen == 0):
            return  # a continuous step without mini-batches records the step whole
        why = no_window(schedule, batches.seen)
        if why is None:
            return
        inside = stage if stage is not None else ", ".join(map(repr, self.stepped_in)) or None
        where = f"stage {stage!r}" if stage is not None else f"step (mini-batches in {inside})"
        self._say(
            f"no-window:{self._label.role}:{stage}", logging.WARNING, " %s, step %s: %s", where, self._label.step, why
        )
        self.record(self._label.loss("empty", why, stage=stage if stage is not None else inside))

    def refused(self, name: str, scheduled: bool, busy: Busy) -> None:
        reason = (
            f"began while the capture was held by {busy.holder} in another thread or task; "
            "one capture runs per process at a time"
        )
        self._say(
            f"stage-busy:{self._label.role}:{name}",
            logging.ERROR if scheduled else logging.WARNING,
            " stage %r %s: it gets no trace of its own%s",
            name,
            reason,
            " and records no mini-batches" if scheduled else "",
        )
        self.record(self._label.loss("skipped", reason, stage=name))

    def foreign(self, base: str) -> None:
        """A ``base`` mini-batch ran on a thread its capture cannot be driven from: said and, in
        a continuous step, recorded missed."""
        self._say(
            f"mini-batch-thread:{self._label.role}",
            logging.ERROR,
            ": a %r mini-batch ran on thread %r, but its capture runs on "
            "another thread, from which it cannot be driven; it is not recorded. Run "
            "mini-batches on the thread of their stage (or of start), or set "
            "TorchOptions(all_threads=True)",
            base,
            threading.current_thread().name,
        )
        if self._claim is not None:
            self.missed(base, None)

    def stepped(self, context: Entry | None) -> None:
        """A continuous step's mini-batch opened in ``context``: the region it ran in is listed."""
        parent = getattr(getattr(context, "key", None), "name", None)
        if isinstance(parent, str) and parent not in self.stepped_in:
            self.stepped_in.append(parent)

    def note(self, name: str, *, mini_batch: bool, kind: str | None = None) -> None:
        current = self._slot.current
        if current is not None:
            current.book.note(name, mini_batch=mini_batch, kind=kind)
