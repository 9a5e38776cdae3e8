"""The step plan (pure): which steps open and close a profiling session, and when the hook is owed.

:class:`StepPlan` is the static answer for a loop that runs every step; :class:`StepTracker` is
the same rule applied online to the steps a loop actually runs, which may skip steps (a resumed
run) or stop early. The finish hook is owed exactly once when any profiled step ran: after the
session holding the last reachable profiled step closes, or at :meth:`StepTracker.finish` when
training ended first (verl never runs it then: its bug B5).

Examples:
    >>> plan = StepPlan(steps=(2, 3, 7), continuous_steps=True)
    >>> plan.sessions
    ((2, 3), (7, 7))
"""

from __future__ import annotations

import enum

import attrs

from profdsl.config import ProfilerConfig
from profdsl.config._checks import int_in, named, require_int, to_int_set

__all__ = ["Event", "StepPlan", "StepTracker"]


class Event(enum.Enum):
    """What a profiler must do at a step boundary, in the order returned."""

    OPEN = "open"
    CLOSE = "close"
    HOOK = "hook"


@attrs.frozen(kw_only=True)
class StepPlan:
    """Profiled steps and how they group into sessions.

    Attributes:
        steps: the configured profiled steps.
        continuous_steps: one session per run of consecutive steps instead of one per step.
        last_step: the last step the loop will run, when known; later steps are unreachable.
    """

    steps: tuple[int, ...] = attrs.field(converter=named(to_int_set))  # type: ignore[misc]
    continuous_steps: bool = False
    last_step: int | None = attrs.field(default=None, validator=int_in(0, optional=True))

    @classmethod
    def from_config(cls, config: ProfilerConfig, *, last_step: int | None = None) -> StepPlan:
        """The plan a config gives: the one rule of step grouping, for the runtime and
        ``profdsl plan`` alike.

        A disabled config profiles no step. Consecutive profiled steps share one session only in
        continuous mode with ``continuous_steps`` (discrete traces are per stage); a schedule does
        not change the grouping, since it selects mini-batches inside each step.

        Examples:
            >>> from profdsl.config import ProfilerConfig
            >>> StepPlan.from_config(ProfilerConfig(enable=True, steps=[1, 2, 4], continuous_steps=True)).sessions
            ((1, 2), (4, 4))
            >>> StepPlan.from_config(ProfilerConfig(enable=True, steps=[1, 2], discrete=True,
            ...                                     continuous_steps=True)).sessions
            ((1, 1), (2, 2))
        """
        return cls(
            steps=config.steps if config.enable else (),
            continuous_steps=config.continuous_steps and not config.discrete,
            last_step=last_step,
        )

    @property
    def reachable(self) -> tuple[int, ...]:
        """The profiled steps the loop reaches."""
        if self.last_step is None:
            return self.steps
        return tuple(s for s in self.steps if s <= self.last_step)

    def is_profiled(self, step: int | None) -> bool:
        """Whether ``step`` is profiled (None, a step without a number, never is)."""
        return step is not None and step in self.reachable

    @property
    def sessions(self) -> tuple[tuple[int, int], ...]:
        """Inclusive ``(open_step, close_step)`` of each session of a loop over every step."""
        runs: list[tuple[int, int]] = []
        for step in self.reachable:
            if runs and self.continuous_steps and runs[-1][1] == step - 1:
                runs[-1] = (runs[-1][0], step)
            else:
                runs.append((step, step))
        return tuple(runs)

    @property
    def hook_step(self) -> int | None:
        """The step after whose session the finish hook runs, or None when nothing is profiled."""
        return max(self.reachable, default=None)


class StepTracker:
    """Applies a :class:`StepPlan` to the steps a loop actually runs.

    Call :meth:`begin` and :meth:`end` around each step and :meth:`finish` once at the end; each
    returns the :class:`Event` list to carry out, in order.

    Steps may also be *requested* while the loop runs (:meth:`request`: an on-demand or automatic
    capture, tagged with its request). A requested step is profiled even after the plan's hook
    was owed; the plan's hook events stay the plan's (they are not owed for requested steps), and
    a run of continuous steps never spans two captures (the plan's, or one request's): each
    capture's steps close their own sessions. A step both planned and requested is the plan's.
    """

    def __init__(self, plan: StepPlan) -> None:
        self.plan = plan
        self._open = False
        self._current: int | None = None
        self._last_begun: int | None = None
        self._ran_profiled = False
        self._hook_done = False
        self._requested: dict[int, str] = {}  # step -> the request that asked for it (the first)
        self._tag: str | None = None  # the capture of the open session (None: the plan's)
        self.profiling = False  # whether the step begun last is profiled
        self.capture: str | None = None  # the request of the step begun last, if requested

    def request(self, steps: range, tag: str) -> None:
        """Steps ``steps`` are asked for by request ``tag`` (steps already asked for keep their
        first request). Steps already begun are not profiled any more."""
        floor = -1 if self._last_begun is None else self._last_begun
        for step in steps:
            if step > floor:
                self._requested.setdefault(step, tag)
        for step in [s for s in self._requested if s < floor]:
            del self._requested[step]  # bounded: only steps still to come are kept

    def _profiled(self, step: int | None) -> tuple[bool, str | None]:
        """Whether ``step`` is profiled, and the request it is for (None: the plan)."""
        if step is None:
            return False, None
        if self.plan.is_profiled(step) and not self._hook_done:
            return True, None
        tag = self._requested.get(step)
        return tag is not None, tag

    @property
    def hook_done(self) -> bool:
        """Whether the hook was owed already (later steps are not profiled)."""
        return self._hook_done

    @property
    def is_open(self) -> bool:
        """Whether a profiling session is open."""
        return self._open

    def begin(self, step: int | None) -> list[Event]:
        """A step starts: close a session the loop walked out of, open one if ``step`` is profiled.

        ``None`` is a step without a usable number: never profiled, it ends a run of steps."""
        if step is not None:
            require_int("step", step)
        # A loop that forgot end() is forgiven: the previous step ends here.
        events = self.end() if self._current is not None else []
        # Once the hook is owed, nothing more of the plan is captured: it must run after the
        # plan's last artifact (requested steps have hooks of their own).
        profiled, tag = self._profiled(step)
        continues = (
            step is not None
            and profiled
            and self.plan.continuous_steps
            and self._last_begun == step - 1
            and tag == self._tag
        )
        if self._open and not continues:
            events += self._close()
        if profiled and not self._open:
            self._open = True
            self._tag = tag
            events.append(Event.OPEN)
        self._ran_profiled |= profiled and tag is None
        self.profiling = profiled
        self.capture = tag if profiled else None
        self._current = self._last_begun = step
        return events

    def end(self) -> list[Event]:
        """The current step ends: close its session unless the next step continues it."""
        step, self._current = self._current, None
        if step is None or not self._open:
            return []
        following, tag = self._profiled(step + 1)
        if self.plan.continuous_steps and following and tag == self._tag:
            return []
        planned = self._tag is None
        events = self._close()
        hook_step = self.plan.hook_step
        if planned and hook_step is not None and step >= hook_step and not self._hook_done:
            self._hook_done = True
            events.append(Event.HOOK)
        return events

    def finish(self) -> list[Event]:
        """Training is over: close what is open and run the hook if it is still owed."""
        self._current = None
        events = self._close() if self._open else []
        if self._ran_profiled and not self._hook_done:
            self._hook_done = True
            events.append(Event.HOOK)
        return events

    def _close(self) -> list[Event]:
        self._open = False
        self._tag = None
        return [Event.CLOSE]
