"""A stateful property test: any sequence of lifecycle calls and stages, on the real torch
profiler, never raises, keeps the registry consistent, and writes only profiled steps."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl._runtime.profiler import State
from profdsl.testing import reset as reset_for_tests

from .traces import parsed

pytest.importorskip("torch")


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        reset_for_tests()
        self.folder = tempfile.mkdtemp()
        self.config = ProfilerConfig(
            enable=True,
            steps=[1, 2, 4],
            discrete=False,
            continuous_steps=True,
            save_path=self.folder,
            torch=TorchOptions(contents=["cpu"]),
        )
        self.profiler = Profiler(self.config, role="actor", rank=0, world_size=1)
        self.stage_steps: list[int | None] = []
        self.current: int | None = None

    @rule(step=st.integers(min_value=0, max_value=5))
    def start(self, step: int) -> None:
        self.profiler.start(step)
        if self.profiler.state is not State.CLOSED:
            self.current = step

    @rule()
    def stop(self) -> None:
        self.profiler.stop()
        self.current = None

    @rule()
    def stage(self) -> None:
        assert profile_stage("stage")(lambda: 1)() == 1

    @rule()
    def close(self) -> None:
        self.profiler.close()
        self.current = None

    @invariant()
    def registry_matches_state(self) -> None:
        registered = any(s.recorder is self.profiler.recorder for s in PROCESS.registry.steps)
        assert registered == self.profiler.is_profiling
        assert self.profiler.is_profiling == (self.profiler.state in (State.ARMED, State.RECORDING))
        if self.profiler.state is State.CLOSED:
            assert not registered

    def teardown(self) -> None:
        self.profiler.close()
        try:
            for name, _trace in parsed(self.folder):
                assert name.step in self.config.steps
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            reset_for_tests()


TestLifecycle = Lifecycle.TestCase
TestLifecycle.settings = settings(max_examples=25, stateful_step_count=15, deadline=None)
