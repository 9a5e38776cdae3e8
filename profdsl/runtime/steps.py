"""What a profiler does at step boundaries: follow the step plan, claim the process's capture for
continuous steps, collect artifacts after each session, and run the finish hook when it is owed
(after every artifact of the last profiled step exists)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from profdsl.capture.base import Backend
from profdsl.collect.export import TraceLabel
from profdsl.config import ProfilerConfig
from profdsl.core.log import once
from profdsl.core.step_plan import Event, StepPlan, StepTracker
from profdsl.runtime.claims import Claim
from profdsl.runtime.coordinator import Coordinator
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
        self._hook_owed = False  # the hook event was interrupted before it was carried out

    def begin(self, step: int | None) -> bool:
        """Step ``step`` begins; True when it is a profiled step (None: a step without a usable
        number, never profiled)."""
        self._coordinator.flush()
        events = self.tracker.begin(step)
        profiled = self.tracker.profiling
        if self.tracker.hook_done and not profiled and self.tracker.plan.is_profiled(step):
            once(f"after-hook:{id(self)}", logging.WARNING,
                 "profdsl: step %s is a profiled step, but it comes after the finish hook was "
                 "owed (a retried step?): it is not profiled again", step)
        if profiled and step is not None:
            self.profiled_steps.append(step)
        self._apply(events, step)
        return profiled

    def end(self) -> None:
        """The current step ends."""
        self._apply(self.tracker.end(), None)

    def finish(self) -> None:
        """Training is over: close what is open, collect the last artifacts, run an owed hook."""
        events = self.tracker.finish()
        if self._hook_owed and Event.HOOK not in events:
            events.append(Event.HOOK)
        self._apply(events, None, closing=True)
        self._coordinator.flush()
        self._finisher.after_session(final=True)
        self._finisher.done()
        self._coordinator.exports.wait()  # the traces exist, and a hook due after them ran
        self._finisher.wait()

    def replaced(self) -> None:
        """A re-created profiler took this one's place: it owes no hook and holds none up."""
        self._finisher.leave(self.profiled_steps)

    def _apply(self, events: list[Event], step: int | None, closing: bool = False) -> None:
        """Carry out ``events`` in order. When one is interrupted (Ctrl-C during an export), a
        hook event after it stays owed: it runs at ``finish`` (``close()`` or exit)."""
        for index, event in enumerate(events):
            try:
                self._carry_out(event, step, closing)
            except BaseException:
                self._hook_owed |= Event.HOOK in events[index:]  # run_hook is idempotent
                raise
            if event is Event.HOOK:
                self._hook_owed = False

    def _carry_out(self, event: Event, step: int | None, closing: bool) -> None:
        if event is Event.OPEN and self._continuous:
            assert self._backend is not None
            self.claim = Claim(self._label(step), self._backend)
            self._coordinator.claim(self.claim)
        elif event is Event.CLOSE and self.claim is not None:
            claim, self.claim = self.claim, None
            self._coordinator.release(claim)
            self._finisher.after_session(final=False)
        elif event is Event.HOOK:  # every artifact first (at close, the lost ones recorded), then the upload
            self._coordinator.exports.wait()  # the last traces, written in the background
            self._finisher.after_session(final=closing)
            self._finisher.run_hook(self.profiled_steps)
