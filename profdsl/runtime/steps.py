"""What a profiler does at step boundaries: follow the step plan, claim the process's capture for
continuous steps, collect artifacts after each session, and run the finish hook when it is owed
(after every artifact of the last profiled step exists)."""

from __future__ import annotations

from collections.abc import Callable

from profdsl.capture.base import Backend
from profdsl.collect.export import TraceLabel
from profdsl.config import ProfilerConfig
from profdsl.core.step_plan import Event, StepPlan, StepTracker
from profdsl.runtime.coordinator import Claim, Coordinator
from profdsl.runtime.finisher import Finisher

__all__ = ["StepSessions"]


class StepSessions:
    """One profiler's step events, carried out."""

    def __init__(self, config: ProfilerConfig, *, backend: Backend | None, coordinator: Coordinator,
                 label: Callable[[int | None], TraceLabel], finisher: Finisher) -> None:
        self.tracker = StepTracker(StepPlan.from_config(config))
        self.profiled_steps: list[int] = []
        self.claim: Claim | None = None  # continuous mode: this role's hold on the capture
        self._continuous = backend is not None and not config.discrete
        self._backend, self._coordinator, self._label = backend, coordinator, label
        self._finisher = finisher

    def begin(self, step: int) -> bool:
        """Step ``step`` begins; True when it is a profiled step."""
        self._coordinator.flush()
        events = self.tracker.begin(step)
        profiled = self.tracker.plan.is_profiled(step)
        if profiled:
            self.profiled_steps.append(step)
        self._apply(events, step)
        return profiled

    def end(self) -> None:
        """The current step ends."""
        self._apply(self.tracker.end(), None)

    def finish(self) -> None:
        """Training is over: close what is open, collect the last artifacts, run an owed hook."""
        self._apply(self.tracker.finish(), None)
        self._coordinator.flush()
        self._finisher.after_session(final=True)
        self._finisher.done()
        self._finisher.wait()

    def _apply(self, events: list[Event], step: int | None) -> None:
        for event in events:
            if event is Event.OPEN and self._continuous:
                assert self._backend is not None
                self.claim = Claim(self._label(step), self._backend)
                self._coordinator.claim(self.claim)
            elif event is Event.CLOSE and self.claim is not None:
                claim, self.claim = self.claim, None
                self._coordinator.release(claim)
                self._finisher.after_session(final=False)
            elif event is Event.HOOK:  # every artifact first, then the upload
                self._finisher.after_session(final=True)
                self._finisher.run_hook(self.profiled_steps)
