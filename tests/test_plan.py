"""Tests for `profdsl.core.step_plan`: the online tracker is checked against the properties a trainer
needs, over random loops that skip steps and stop early."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl.core.step_plan import Event, StepPlan, StepTracker
from profdsl.errors import ConfigError

plans = st.builds(
    StepPlan,
    steps=st.lists(st.integers(min_value=0, max_value=15), max_size=8),
    continuous_steps=st.booleans(),
    last_step=st.none() | st.integers(min_value=0, max_value=20),
)
# The steps a loop actually runs: increasing, possibly with gaps (a resumed run).
loops = st.lists(st.integers(min_value=0, max_value=20), unique=True).map(sorted)


def run(plan: StepPlan, steps: list[int], *, end_last: bool = True) -> list[tuple[str, int | None, Event]]:
    """Drive a tracker; return (phase, step, event) for every event."""
    tracker = StepTracker(plan)
    log: list[tuple[str, int | None, Event]] = []
    for i, step in enumerate(steps):
        log += [("begin", step, e) for e in tracker.begin(step)]
        assert tracker.is_open == plan.is_profiled(step)
        if end_last or i < len(steps) - 1:
            log += [("end", step, e) for e in tracker.end()]
    log += [("finish", None, e) for e in tracker.finish()]
    assert not tracker.is_open
    return log


def consecutive_runs(steps: list[int]) -> int:
    return sum(1 for i, s in enumerate(steps) if i == 0 or steps[i - 1] != s - 1)


class TestStepTracker:
    """Tests for `StepTracker`."""

    @given(plans, loops, st.booleans())
    def test_every_open_is_closed_once(self, plan: StepPlan, steps: list[int], end_last: bool) -> None:
        """OPEN and CLOSE alternate, starting with OPEN, and nothing is left open."""
        sessions = [e for _, _, e in run(plan, steps, end_last=end_last) if e is not Event.HOOK]
        assert sessions == [Event.OPEN, Event.CLOSE] * (len(sessions) // 2)

    @given(plans, loops, st.booleans())
    def test_hook_owed_once_iff_a_profiled_step_ran(self, plan: StepPlan, steps: list[int], end_last: bool) -> None:
        """The hook runs exactly once when some profiled step ran, never otherwise, and last."""
        log = run(plan, steps, end_last=end_last)
        hooks = [i for i, (_, _, e) in enumerate(log) if e is Event.HOOK]
        ran_profiled = any(plan.is_profiled(s) for s in steps)
        assert len(hooks) == (1 if ran_profiled else 0)
        if hooks:
            assert hooks[0] == len(log) - 1  # nothing is captured after the upload

    @given(plans, loops)
    def test_sessions_open_only_on_profiled_steps(self, plan: StepPlan, steps: list[int]) -> None:
        """A session opens only when a profiled step begins."""
        for phase, step, event in run(plan, steps):
            if event is Event.OPEN:
                assert phase == "begin" and step is not None and plan.is_profiled(step)

    @given(plans, loops)
    def test_session_count(self, plan: StepPlan, steps: list[int]) -> None:
        """One session per profiled step, or per run of consecutive ones with continuous_steps."""
        profiled = [s for s in steps if plan.is_profiled(s)]
        opens = sum(1 for _, _, e in run(plan, steps) if e is Event.OPEN)
        assert opens == (consecutive_runs(profiled) if plan.continuous_steps else len(profiled))

    @given(plans)
    def test_full_loop_matches_static_plan(self, plan: StepPlan) -> None:
        """A loop over every step opens and closes at plan.sessions and hooks after hook_step."""
        last = plan.last_step if plan.last_step is not None else 20
        log = run(plan, list(range(last + 1)))
        opens = [s for p, s, e in log if e is Event.OPEN]
        closes = [s for p, s, e in log if e is Event.CLOSE]
        assert list(zip(opens, closes)) == list(plan.sessions)
        hooks = [(p, s) for p, s, e in log if e is Event.HOOK]
        assert hooks == ([("end", plan.hook_step)] if plan.hook_step is not None else [])

    def test_training_ends_before_last_profiled_step(self) -> None:
        """Steps (2, 5), training stops after 3: the hook runs at finish (verl's B5 never ran it)."""
        log = run(StepPlan(steps=(2, 5)), [0, 1, 2, 3])
        assert log[-1] == ("finish", None, Event.HOOK)

    def test_training_ends_inside_continuous_run(self) -> None:
        """Steps 3-5 continuous, training stops after 4: finish closes the session and hooks."""
        log = run(StepPlan(steps=(3, 4, 5), continuous_steps=True), [3, 4])
        assert [e for _, _, e in log] == [Event.OPEN, Event.CLOSE, Event.HOOK]
        assert [p for p, _, _ in log] == ["begin", "finish", "finish"]

    def test_resumed_run_skips_into_continuous_run(self) -> None:
        """A loop resumed at step 4 of a 3-5 run opens there and closes after 5."""
        log = run(StepPlan(steps=(3, 4, 5), continuous_steps=True), [4, 5, 6])
        assert log == [("begin", 4, Event.OPEN), ("end", 5, Event.CLOSE), ("end", 5, Event.HOOK)]

    def test_gap_in_continuous_run_closes(self) -> None:
        """A loop that jumps from 3 to 5 (4 skipped) closes the session before opening a new one."""
        log = run(StepPlan(steps=(3, 4, 5), continuous_steps=True), [3, 5])
        assert [(s, e) for _, s, e in log] == [
            (3, Event.OPEN),
            (5, Event.CLOSE),
            (5, Event.OPEN),
            (5, Event.CLOSE),
            (5, Event.HOOK),
        ]

    def test_forgotten_end_is_forgiven(self) -> None:
        """begin() without end() ends the previous step first."""
        tracker = StepTracker(StepPlan(steps=(1, 2)))
        assert tracker.begin(1) == [Event.OPEN]
        assert tracker.begin(2) == [Event.CLOSE, Event.OPEN]

    def test_bad_step(self) -> None:
        """A negative step raises ConfigError naming it."""
        with pytest.raises(ConfigError, match="step must be an integer >= 0, got -1"):
            StepTracker(StepPlan(steps=())).begin(-1)


class TestStepPlan:
    """Tests for `StepPlan`."""

    def test_unreachable_steps_dropped(self) -> None:
        """Steps after last_step are unreachable, so the hook comes after the last reachable one."""
        plan = StepPlan(steps=(2, 5, 9), last_step=6)
        assert plan.reachable == (2, 5) and plan.hook_step == 5

    def test_sessions(self) -> None:
        """continuous_steps groups runs of consecutive steps; otherwise each step is a session."""
        assert StepPlan(steps=(1, 2, 3, 5), continuous_steps=True).sessions == ((1, 3), (5, 5))
        assert StepPlan(steps=(1, 2)).sessions == ((1, 1), (2, 2))

    def test_bad_last_step(self) -> None:
        """A negative last_step raises ConfigError naming it."""
        with pytest.raises(ConfigError, match="StepPlan.last_step must be an integer >= 0 or None, got -3"):
            StepPlan(steps=(), last_step=-3)
