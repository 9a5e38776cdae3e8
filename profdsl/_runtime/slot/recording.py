"""What a session records now: its capture's collection, paused for left-out mini-batches and,
once its trace-size budget (:mod:`profdsl._runtime.slot.budget`) cut a window, for the rest of
it; and where a scheduled stage's schedule stands.

Every call comes from the session's owner thread (the one driving its capture).
"""

from __future__ import annotations

from collections.abc import Callable

from profdsl._capture.base import Capture
from profdsl._runtime.slot.budget import Budget
from profdsl._runtime.slot.region_book import RegionBook
from profdsl.config import Schedule
from profdsl.core._schedule import Action, action_at, cycle_of

__all__ = ["Recording"]


class Recording:
    """Whether a session's capture (``capture()``, None once stopped) collects, and what it
    counts as recorded: ``kind`` is the session's (``"step"`` or ``"stage"``)."""

    def __init__(
        self,
        kind: str,
        schedule: Schedule | None,
        book: RegionBook,
        budget: Budget,
        capture: Callable[[], Capture | None],
    ) -> None:
        self.kind, self.schedule, self.book, self.budget = kind, schedule, book, budget
        self._capture = capture
        self._muted = 0
        self._open_recorded = 0
        self._position = 0  # a scheduled stage: the mini-batch torch's schedule is at
        self.paused = False  # collection was paused at some point (left-out mini-batches)

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
        """A mini-batch of a continuous role ended: a recorded one is counted (its window, the
        budget) until a cut; then it ends as in :meth:`mini_batch_withdrawn`."""
        if recorded and self.budget.cut is None:  # after a cut, the mini-batches are not in the trace
            self.book.recorded(role, step, schedule, index)
            self.budget.recorded(pausable=self._can_pause())
        self.mini_batch_withdrawn(recorded)

    def batch_recorded(self) -> None:
        """A recorded mini-batch of a stage session ended (on its owner thread; of a scheduled
        one, not its window's last): the budget counts it, and may end the trace here."""
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

    def stepped(self, index: int) -> None:
        """A scheduled stage's schedule stepped past mini-batch ``index`` (or tried to)."""
        self._position = index + 1

    def budget_step(self, index: int) -> None:
        """Before a scheduled stage's schedule steps past mini-batch ``index``: the budget counts
        a recorded one; a window cut earlier resumes collection as it ends (torch starts the next
        with collection on), and one that passes the budget before its last mini-batch pauses."""
        assert self.schedule is not None  # only a scheduled stage's schedule steps
        action = action_at(self.schedule, index)
        if action is Action.RECORD_AND_SAVE:
            if self.budget.cut is None:
                self.budget.count()  # the window ends here anyway
            else:
                self._resume_for_window()
        elif action is Action.RECORD:
            self.batch_recorded()

    def _resume_for_window(self) -> None:
        """Collection back on for the schedule step that ends a cut window."""
        capture = self._capture()
        if capture is not None and capture.pausable and not capture.collecting:
            capture.set_collecting(True)

    def _can_pause(self) -> bool:
        capture = self._capture()
        return capture is not None and capture.pausable and capture.owned_here()

    def continued(self, name: str, path: tuple[str, ...] | None = None) -> None:
        """A region named ``name`` was reopened (closed around a schedule step, a ``yield`` or
        an ``await``): when the session records it, the trace's ``regions.continued`` counts it
        (and ``regions.continued_at`` at its ``path``, the labels of the regions it is nested
        in and its own), so that readers count one entry, not one per piece."""
        if self.kind == "step":
            capture = self._capture()
            recording, cycle = capture is None or capture.collecting, None
        elif self.schedule is None:
            recording, cycle = True, None
        else:
            recording = action_at(self.schedule, self._position).records
            cycle = cycle_of(self.schedule, self._position)
        if recording:
            self.book.continued(name, cycle, path)

    def _apply_collecting(self) -> None:
        capture = self._capture()
        want = not (self._muted > 0 and self._open_recorded == 0) and self.budget.cut is None
        if capture is not None and capture.pausable and want != capture.collecting and capture.owned_here():
            self.paused = self.paused or not want
            capture.set_collecting(want)

    def opened_regions(self, window: tuple[int, int] | None) -> bool:
        """Whether profdsl opened regions in the trace's window while it recorded: a stage
        session's own stage or recorded mini-batches, a step session's recorded mini-batches or
        the stages of a step that never paused (a paused one's stages may all be left out)."""
        if self.kind == "stage":
            return True
        return bool(self.book.windows()) or (bool(self.book.stages) and not self.paused)
