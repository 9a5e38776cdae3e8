"""Which profdsl steps verl's trainers' start/stop calls mean, where the calls alone do not say:
a run of continuous steps (:meth:`TrainerSteps.end_run`) and the SFT trainers' step-less starts
(:meth:`TrainerSteps.step_of`, :meth:`TrainerSteps.stage_begins`); docs/from-verl.md's ``start()``
and ``stop()`` rows say what each means.
"""

from __future__ import annotations

import logging
from typing import Any

from profdsl._runtime.profiler import Profiler
from profdsl.core._log import once

__all__ = ["TrainerSteps"]


class TrainerSteps:
    """One ``DistProfiler``'s step bookkeeping for the patterns above."""

    __slots__ = ("_counted", "counting", "last_begun", "ran_on")

    def __init__(self) -> None:
        self.last_begun: int | None = None  # the last step begun
        self.ran_on: set[int] = set()  # steps a stop ended with the run of continuous steps
        self.counting = False  # started without a step: steps are counted by annotated calls
        self._counted = False  # the counted step made its annotated call

    def step_of(self, given: Any, steps: tuple[int, ...], who: str) -> Any:
        """The step a ``start()`` given ``given`` (None: the first of ``steps`` after the last one
        begun and not ended by a run's stop) begins, or None (logged once) when it begins none:
        no configured step is left, or a run's stop already ended it."""
        step, last = given, self.last_begun
        if step is None:
            step = min((s for s in steps if (last is None or s > last) and s not in self.ran_on), default=None)
        if step is None:
            once(
                f"verl-start-without-step:{id(self)}",
                logging.WARNING,
                "%s: start() without profile_step, and no configured step is left after step %s: nothing is profiled",
                who,
                self.last_begun,
            )
        elif step in self.ran_on:
            once(
                f"verl-start-in-run:{id(self)}",
                logging.WARNING,
                "%s: start(profile_step=%s): that step ended with the run of continuous steps "
                "stopped before it (verl starts and stops such a run once); its stages are not profiled",
                who,
                step,
            )
            return None
        return step

    def begin(self, profiler: Profiler, step: Any, *, counting: bool) -> None:
        """``profiler`` begins ``step``; ``counting``: it was started without a step."""
        self.counting, self._counted = counting, False
        self._begin(profiler, step)

    def _begin(self, profiler: Profiler, step: Any) -> None:
        profiler.start(step)
        if profiler.current_step is not None:
            self.last_begun = profiler.current_step

    def stage_begins(self, profiler: Profiler | None) -> None:
        """An outermost annotated call while counting: the second and later ones end the step
        and begin the next (the facade asks only while counting)."""
        if self._counted and profiler is not None and profiler.current_step is not None:
            step = profiler.current_step
            profiler.stop()
            self._begin(profiler, step + 1)
        self._counted = True

    def end_run(self, profiler: Profiler) -> None:
        """Before a stop: with ``continuous_steps`` (discrete mode too: verl's trainer calls the
        same), begin and end the steps of the run after the open one, so the stop ends the run.
        Nothing when the steps are counted (they were begun as they ran)."""
        counting, self.counting = self.counting, False
        config, step = profiler.config, profiler.current_step
        if counting or step is None or not config.continuous_steps:
            return
        while step + 1 in config.steps:
            profiler.stop()
            step += 1
            profiler.start(step)
            self.ran_on.add(step)
