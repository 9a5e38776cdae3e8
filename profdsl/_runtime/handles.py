"""What one DSL entry opened (a :class:`Handle`), and the numbering of update mini-batches
(:class:`Batches`).

A handle is created per entry and closed exactly once, by that entry. ``suspend`` / ``resume``
close and reopen its region around the ``await`` / ``yield`` points of an async or generator
body, so that a region never spans code of other tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from profdsl.config import Schedule
from profdsl.core._log import internal_error
from profdsl.core._schedule import action_at

if TYPE_CHECKING:
    from profdsl._capture.annotators import Annotator
    from profdsl._runtime.slot.session import Session

__all__ = ["Batches", "Handle", "Owner", "OwningHandle", "opaque"]


class Owner(Protocol):
    """What opened a region (a step's :class:`~profdsl._runtime.recorder.Recorder`): a region
    reopens only while its owner is ``active``, and tells it when it does."""

    active: bool

    def continued(self, handle: Handle) -> None:
        """``handle``'s region was reopened."""


class Batches:
    """Numbers the update mini-batches of one stage (discrete mode) or of one role's step
    (continuous mode), and says whether the schedule records each one.

    ``session`` is the capture the mini-batches drive: a discrete scheduled stage's own session
    (torch's schedule steps after each), or, looked up per mini-batch through ``find``, the
    continuous session the role's step shares (left-out mini-batches pause its collection; a
    capture that cannot pause records them all). Numbering is atomic (``itertools.count``):
    threads never get the same index.
    """

    __slots__ = ("counter", "find", "schedule", "seen", "session")

    def __init__(
        self,
        schedule: Schedule | None,
        *,
        session: Session | None = None,
        find: Callable[[], Session | None] | None = None,
    ) -> None:
        self.schedule, self.session, self.find = schedule, session, find
        self.counter = itertools.count()
        self.seen = 0  # how many were numbered (read once they are over: the stage or step ended)

    def capture(self) -> Session | None:
        """The session the next mini-batch drives, if any."""
        return self.session if self.find is None else self.find()

    def begin(self, session: Session | None = None) -> tuple[int, bool]:
        """The next mini-batch: its index, and whether it is recorded (in ``session``, the
        capture it drives, when there is one)."""
        index = next(self.counter)
        if index >= self.seen:
            self.seen = index + 1
        if self.schedule is None or (
            session is not None
            and session.kind == "step"
            and session.capture is not None
            and not session.capture.pausable
        ):
            return index, True
        return index, action_at(self.schedule, index).records


class Handle:
    """One entry's open region (annotator token), closed exactly once. A region is reopened
    (``resume``) only while the recorder that opened it is active: an async stage suspended
    across its profiler's stop stays closed. A plain region numbers no mini-batches, refuses
    nothing and does nothing more when it closes (:class:`OwningHandle` does)."""

    __slots__ = ("annotator", "closed", "color", "name", "owner", "pushed", "token")
    batches: Batches | None = None
    finish: Callable[[], None] | None = None
    opaque = False

    def __init__(
        self, annotator: Annotator | None, name: str, color: int | None = None, owner: Owner | None = None
    ) -> None:
        self.annotator, self.name, self.color, self.owner = annotator, name, color, owner
        self.closed = False
        self.token: object = None
        self.pushed = False
        if annotator is not None:
            try:  # resume(), inlined: this runs for every profiled region
                self.token = annotator.push(name, color)
                self.pushed = True
            except Exception as exc:
                internal_error("region resume", exc)

    def suspend(self) -> None:
        """Close the region for now (an ``await`` or ``yield`` of the body)."""
        if self.pushed:
            self.pushed = False
            token, self.token = self.token, None  # end the region object here, not in a GC
            try:
                self.annotator.pop(token)  # type: ignore[union-attr]
            except Exception as exc:
                internal_error("region suspend", exc)

    def resume(self) -> None:
        """Reopen the region (the body continues)."""
        owner = self.owner
        if not self.pushed and not self.closed and self.annotator is not None and (owner is None or owner.active):
            try:
                self.token = self.annotator.push(self.name, self.color)
                self.pushed = True
                if owner is not None:
                    owner.continued(self)
            except Exception as exc:
                internal_error("region resume", exc)

    def withdraw(self) -> None:
        """Close an entry that turned out to hold nothing (a mini-batch opened ahead of work that
        never came): its region closes, and it counts for nothing (no schedule step, no window)."""
        self.close()

    def close(self) -> None:
        """Close the region; once."""
        if self.closed:
            return
        self.closed = True
        if self.pushed:  # suspend(), inlined: this runs for every profiled region
            self.pushed = False
            token, self.token = self.token, None
            try:
                self.annotator.pop(token)  # type: ignore[union-attr]
            except Exception as exc:
                internal_error("region suspend", exc)


class OwningHandle(Handle):
    """A handle that numbers the mini-batches inside it (a stage with its own capture), refuses
    them (``opaque``), or finishes something when it closes (ends a capture, steps a schedule)."""

    __slots__ = ("batches", "finish", "opaque", "unfinish")

    def __init__(
        self,
        annotator: Annotator | None,
        name: str,
        color: int | None = None,
        owner: Owner | None = None,
        *,
        batches: Batches | None = None,
        finish: Callable[[], None] | None = None,
        opaque: bool = False,
        unfinish: Callable[[], None] | None = None,
    ) -> None:
        self.batches, self.finish, self.opaque, self.unfinish = batches, finish, opaque, unfinish
        super().__init__(annotator, name, color, owner)

    def withdraw(self) -> None:
        """Close without finishing: run ``unfinish`` (undo what opening did) instead; once."""
        if not self.closed:
            self.finish, self.unfinish = self.unfinish, None
            self.close("region withdraw")

    def close(self, where: str = "region close") -> None:
        """Close the region, then finish (end a capture, step a schedule); once (``where``: what
        a failure of the finish is logged as)."""
        if self.closed:
            return
        super().close()
        finish, self.finish = self.finish, None
        if finish is not None:
            try:
                finish()
            except Exception as exc:
                internal_error(where, exc)


def opaque() -> Handle:
    """The handle of an entry refused its own capture (a second concurrent scheduled stage): it
    opens no region, and neither do the stages and mini-batches inside it."""
    return OwningHandle(None, "", opaque=True)
