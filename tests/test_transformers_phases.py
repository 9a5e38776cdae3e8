"""profile_trainer's phase logic without transformers or TRL: the round arithmetic against a
replay of TRL's and transformers' loop rules, the log-prob pass names, the hooks driven by a
stand-in trainer that calls them as transformers' loop and TRL's GRPO do (real torch profiler,
CPU), and a loop hooked by hand with stages entered and left in different callbacks."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import ConfigError, Profiler, profile_stage
from profdsl.integrations.transformers import RoundShape
from profdsl.integrations.transformers._hooks import install
from profdsl.integrations.transformers._phases import LogProbPasses
from profdsl.integrations.transformers._support import Kind, major

from .profiling import config, work
from .traces import parsed


def _replay(accumulation: int, per_generation: int, iterations: int, optimizer_steps: int) -> list[tuple[int, int]]:
    """The oracle: TRL generates before micro-batch m when m % (per_generation * iterations) ==
    0; transformers steps the optimizer after every ``accumulation`` micro-batches. For each
    optimizer step: (the round of its micro-batches, its index among that round's steps)."""
    rounds: list[int] = []
    current = 0
    for m in range(optimizer_steps * accumulation):
        if m % (per_generation * iterations) == 0:
            current += 1
        if (m + 1) % accumulation == 0:
            rounds.append(current)
    return [(r, rounds[:j].count(r)) for j, r in enumerate(rounds)]


@given(st.integers(1, 6), st.integers(1, 8), st.integers(1, 3), st.integers(1, 30))
def test_rounds_follow_trls_loop(accumulation: int, per_generation: int, iterations: int, steps: int) -> None:
    """What the hooks do (a round begins where TRL generates, ends at the optimizer step after
    which ``ends_round`` holds; windows count within it) equals the replay of TRL's rules, and a
    shape whose round would split an optimizer step is refused."""
    if (per_generation * iterations) % accumulation:
        with pytest.raises(ConfigError, match="whole optimizer steps"):
            RoundShape(accumulation=accumulation, steps_per_generation=per_generation, num_iterations=iterations)
        return
    shape = RoundShape(accumulation=accumulation, steps_per_generation=per_generation, num_iterations=iterations)
    got: list[tuple[int, int]] = []
    round_, window, done = 0, 0, 0
    for _ in range(steps):
        for _ in range(accumulation):
            if shape.generates(done):
                round_, window = round_ + 1, 0
                assert shape.round_of(done) == round_
            done += 1
        got.append((round_, window))
        window += 1
        if shape.ends_round(done):
            assert window == shape.optimizer_steps
    assert got == _replay(accumulation, per_generation, iterations, steps)
    assert shape.old_log_prob == (accumulation % shape.generate_every != 0)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None, "2"])
def test_a_shape_needs_counts(bad: object) -> None:
    with pytest.raises(ConfigError, match="num_iterations must be an integer >= 1"):
        RoundShape(accumulation=1, steps_per_generation=1, num_iterations=bad)


def test_log_prob_passes_are_named_in_trls_order() -> None:
    """Old policy first (when expected), then the reference: a separate ref_model is always
    the reference; the policy with its adapter off is the reference after the old pass."""
    assert [LogProbPasses(old=True).name(is_ref_model=r) for r in (False,)] == ["old_log_prob"]
    passes = LogProbPasses(old=True)
    assert [passes.name(is_ref_model=False), passes.name(is_ref_model=True)] == ["old_log_prob", "ref_log_prob"]
    passes = LogProbPasses(old=False)
    assert passes.name(is_ref_model=False) == "ref_log_prob"
    assert major("10.0") == 10 and major("") is None


def test_importing_it_stays_light() -> None:
    import subprocess

    code = (
        "import sys, profdsl.integrations.transformers as t; "
        "print(sorted({'torch', 'transformers', 'trl'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


class _StandInGRPO:
    """Calls what profile_trainer wraps in the order transformers' loop and TRL's GRPO do."""

    def __init__(self, shape: RoundShape, *, beta: float) -> None:
        import torch

        self.shape, self.beta = shape, beta
        self.args = SimpleNamespace(
            gradient_accumulation_steps=shape.accumulation, steps_per_generation=shape.steps_per_generation
        )
        self.num_iterations, self._step = shape.num_iterations, 0
        self.model, self.ref_model = SimpleNamespace(training=True), SimpleNamespace()
        self.accelerator = SimpleNamespace(backward=lambda loss: work())
        self.callbacks: list[Any] = []
        self.weight = torch.nn.Parameter(torch.ones(2))
        self.optimizer = torch.optim.SGD([self.weight], lr=0.1)

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def _generate(self, prompts: Any) -> None:
        work()

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any) -> None:
        work()

    def _calculate_rewards(self, *args: Any) -> None:
        work()

    def _generate_and_score_completions(self, batch: Any) -> Any:
        self._generate(batch)
        if self.shape.old_log_prob:
            self._get_per_token_logps_and_entropies(self.model)
        if self.beta:
            self._get_per_token_logps_and_entropies(self.ref_model)
        self._calculate_rewards(batch)
        return batch

    def _prepare_inputs(self, batch: Any) -> Any:
        if self.shape.generates(self._step):
            self._generate_and_score_completions(batch)
        return batch

    def compute_loss(self, model: Any, inputs: Any) -> None:
        work()

    def training_step(self, model: Any, inputs: Any) -> None:
        inputs = self._prepare_inputs(inputs)
        self.compute_loss(model, inputs)
        self.accelerator.backward(None)
        self._step += 1

    def _events(self, name: str, state: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self.args, state, None)

    def train(self, rounds: int) -> None:
        self.state = state = SimpleNamespace(global_step=0)
        for _ in range(rounds * self.shape.optimizer_steps):
            self._events("on_step_begin", state)
            for _ in range(self.shape.accumulation):
                self.training_step(self.model, [1])
            self._events("on_pre_optimizer_step", state)
            self.weight.grad = self.weight.detach().clone()
            self.optimizer.step()
            self._events("on_optimizer_step", state)
            state.global_step += 1
            self._events("on_step_end", state)
        self._events("on_train_end", state)


def _spans(trace: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    found = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith(prefix)]
    return sorted(found, key=lambda e: e["ts"])


@pytest.mark.parametrize(("accumulation", "per_generation", "iterations", "beta"), [(2, 2, 1, 0.1), (1, 2, 2, 0.0)])
def test_hooks_over_a_stand_in_grpo_loop(
    tmp_path: Path, accumulation: int, per_generation: int, iterations: int, beta: float
) -> None:
    """Rounds 2 and 3 of 4: one generation each, outside the windows; one window per
    optimizer step, each holding its own Optimizer.step; no reference pass at beta=0."""
    shape = RoundShape(accumulation=accumulation, steps_per_generation=per_generation, num_iterations=iterations)
    trainer = _StandInGRPO(shape, beta=beta)
    profiler = Profiler(config(tmp_path, steps=[2, 3]), role="actor", rank=0, world_size=1)
    install(trainer, profiler, Kind("GRPOTrainer", shape, shape.old_log_prob), object)
    trainer.train(rounds=4)
    traces = {name.step: trace for name, trace in parsed(tmp_path)}
    assert sorted(traces) == [2, 3]
    for trace in traces.values():
        assert len(_spans(trace, "generate")) == 1
        assert len(_spans(trace, "ref_log_prob")) == int(beta != 0)
        assert len(_spans(trace, "old_log_prob")) == int(shape.old_log_prob)
        windows = [w for w in _spans(trace, "mini_batch") if w["name"][10:].isdigit()]
        assert [w["name"] for w in windows] == [f"mini_batch{i}" for i in range(shape.optimizer_steps)]
        steps = _spans(trace, "Optimizer.step#")
        assert len(steps) == len(windows)
        for step, window in zip(steps, windows, strict=True):
            assert window["ts"] <= step["ts"] and step["ts"] + step["dur"] <= window["ts"] + window["dur"]
        (generate,) = _spans(trace, "generate")
        assert generate["ts"] + generate["dur"] <= windows[0]["ts"]
    assert profiler.state.value == "closed"


def test_a_loop_you_do_not_own_hooked_by_hand(tmp_path: Path) -> None:
    """docs/transformers.md: Profiler.start in one callback, a stage entered in another and
    left in a third, stop in a fourth: allowed, and the trace holds the stage around the work."""
    profiler = Profiler(config(tmp_path, steps=[2]), role="trainer", rank=0, world_size=1)
    forward = profile_stage("forward", profiler=profiler)

    class Callbacks:
        def on_step_begin(self, step: int) -> None:
            profiler.start(step)

        def on_forward_begin(self) -> None:
            forward.__enter__()

        def on_forward_end(self) -> None:
            forward.__exit__(None, None, None)

        def on_step_end(self) -> None:
            profiler.stop()

    callbacks = Callbacks()
    for step in (1, 2, 3):
        callbacks.on_step_begin(step)
        callbacks.on_forward_begin()
        work()
        callbacks.on_forward_end()
        callbacks.on_step_end()
    profiler.close()
    ((name, trace),) = parsed(tmp_path)
    assert name.step == 2
    (stage,) = _spans(trace, "forward")
    (mul,) = [e for e in _spans(trace, "aten::mul") if e["ts"] >= stage["ts"]]
    assert mul["ts"] + mul["dur"] <= stage["ts"] + stage["dur"]


def test_hooks_give_stage_timings_on_every_round(tmp_path: Path) -> None:
    """Metrics(enabled=True): every round's stages are timed, profiled or not (docs/metrics.md),
    and on_step sees each round once."""
    from profdsl import Metrics

    shape = RoundShape(accumulation=1, steps_per_generation=2, num_iterations=1)
    trainer = _StandInGRPO(shape, beta=0.1)
    seen: list[int] = []
    profiler = Profiler(
        config(tmp_path, steps=[], metrics=Metrics(enabled=True)),
        role="actor",
        rank=0,
        world_size=1,
        on_step=lambda step, metrics: seen.append(step),
    )
    install(trainer, profiler, Kind("GRPOTrainer", shape, shape.old_log_prob), object)
    trainer.train(rounds=3)
    assert seen == [1, 2, 3]
    for stage in ("generate", "old_log_prob", "ref_log_prob", "reward", "update", "update/mini_batch"):
        assert profiler.metrics[f"timing_s/{stage}"] >= 0.0, stage
    assert parsed(tmp_path) == []  # no step was asked for: timed, not traced
