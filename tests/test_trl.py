"""``profile_trainer`` against the real TRL ``GRPOTrainer`` and transformers ``Trainer``, on CPU:
a tiny random Llama and a byte-level BPE tokenizer built offline, no hub access.

TRL and its stack are not in the main test environment: these tests are skipped there and run
by .ci/run in its TRL environment (``.ci-trl-venv``; docs/transformers.md says how to make one).
What the traces must show is read from the traces, and every count from TRL's own counters.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl import ConfigError, ProfilerConfig
from profdsl.manifest import read_manifest

from .engine_checks import check_output
from .traces import parsed
from .trl_scenario import ROOT, build_model, grpo_trainer, plain_trainer

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("trl") is None,
        reason="TRL is not installed here: these tests run in .ci/run's TRL environment "
        "(.ci-trl-venv; see docs/transformers.md)",
    ),
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("model") / "tiny-llama")


def _spans(trace: dict[str, Any], name: str, *, prefix: bool = False) -> list[dict[str, Any]]:
    found = [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and (e.get("name", "").startswith(name) if prefix else e.get("name") == name)
    ]
    return sorted(found, key=lambda e: e["ts"])


def _inside(event: dict[str, Any], window: dict[str, Any]) -> bool:
    return window["ts"] <= event["ts"] and event["ts"] + event["dur"] <= window["ts"] + window["dur"]


def _optimizer_steps(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return _spans(trace, "Optimizer.step#", prefix=True)


def _per_round(trainer: Any) -> int:
    """Optimizer steps per generation round, from TRL's own counters."""
    rounds = trainer._step // (trainer.args.steps_per_generation * trainer.num_iterations)
    assert rounds > 0 and trainer.state.global_step % rounds == 0
    return int(trainer.state.global_step // rounds)


def _check_round(trace: dict[str, Any], trainer: Any, *, old: bool, ref: bool) -> None:
    """One profiled round: one generation, its log-prob passes and reward, then the update with
    one window per optimizer step TRL ran in a round, each holding its own Optimizer.step."""
    count = {n: len(_spans(trace, n)) for n in ("generate", "old_log_prob", "ref_log_prob", "reward", "update")}
    assert count == {
        "generate": 1,
        "old_log_prob": int(old),
        "ref_log_prob": int(ref),
        "reward": 1,
        "update": 1,
    }
    windows = [w for w in _spans(trace, "mini_batch", prefix=True) if w["name"][len("mini_batch") :].isdigit()]
    per_round = _per_round(trainer)
    assert [w["name"] for w in windows] == [f"mini_batch{i}" for i in range(per_round)]
    steps = _optimizer_steps(trace)
    assert len(steps) == per_round
    assert all(_inside(step, window) for step, window in zip(steps, windows, strict=True))
    (generate,) = _spans(trace, "generate")
    assert generate["ts"] + generate["dur"] <= windows[0]["ts"], "generation must not land inside mini_batch0"
    (update,) = _spans(trace, "update")
    assert all(_inside(w, update) for w in windows)
    micro = _spans(trace, "micro_batch", prefix=True)
    accumulation = trainer.args.gradient_accumulation_steps
    assert len(micro) == per_round * accumulation
    for window in windows:
        assert sum(_inside(m, window) for m in micro) == accumulation
    for stage in ("forward", "backward"):
        assert len(_spans(trace, stage)) == per_round * accumulation


def _trace_steps(folder: Path) -> dict[int, dict[str, Any]]:
    return {name.step: trace for name, trace in parsed(folder)}


def test_grpo_rounds_two_and_three_of_five(model: Path, tmp_path: Path) -> None:
    """Five rounds of two optimizer steps each (steps_per_generation = 2 x accumulation, so TRL
    also computes the old policy's log-probs), rounds 2 and 3 profiled."""
    out = tmp_path / "profiles"
    trainer = grpo_trainer(model, tmp_path, rounds=5, gradient_accumulation_steps=2, steps_per_generation=4, beta=0.1)
    from profdsl.integrations.transformers import profile_trainer, trainer_profiler

    assert profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2, 3), save_path=str(out))) is trainer
    trainer.train()
    assert trainer.state.global_step == 10 and _per_round(trainer) == 2
    traces = _trace_steps(out)
    assert sorted(traces) == [2, 3]
    for trace in traces.values():
        _check_round(trace, trainer, old=True, ref=True)
    records = [r for r in read_manifest(str(out)) if r["kind"] == "trace"]
    assert sorted((r["role"], r["step"], r["status"]) for r in records) == [("actor", 2, "ok"), ("actor", 3, "ok")]
    code, text = check_output(out)
    assert code == 0, text
    assert trainer_profiler(trainer).state.value == "closed"


@pytest.mark.parametrize(
    "shape",
    [
        {"gradient_accumulation_steps": 2, "beta": 0.1},  # TRL's default: one optimizer step a round
        {"gradient_accumulation_steps": 1, "num_iterations": 2, "beta": 0.0},  # reused twice, no reference
    ],
    ids=["default", "iterations-no-ref"],
)
def test_grpo_loop_shapes(model: Path, tmp_path: Path, shape: dict[str, Any]) -> None:
    """Each knob that changes the loop's shape keeps one window per optimizer step and the
    passes TRL really ran (no reference pass at beta=0; the old policy's when reused)."""
    out = tmp_path / "profiles"
    trainer = grpo_trainer(model, tmp_path, rounds=3, **shape)
    from profdsl.integrations.transformers import profile_trainer

    profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2,), save_path=str(out)))
    trainer.train()
    generate_every = trainer.args.steps_per_generation * trainer.num_iterations
    old = trainer.args.gradient_accumulation_steps % generate_every != 0
    traces = _trace_steps(out)
    assert sorted(traces) == [2]
    _check_round(traces[2], trainer, old=old, ref=shape["beta"] != 0.0)
    assert check_output(out)[0] == 0


def test_rloo_rounds(model: Path, tmp_path: Path) -> None:
    """RLOOTrainer, whose scoring always computes the old policy's log-probs: the same round."""
    out = tmp_path / "profiles"
    trainer = grpo_trainer(model, tmp_path, rounds=3, rloo=True, gradient_accumulation_steps=2, beta=0.1)
    from profdsl.integrations.transformers import profile_trainer

    profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2,), save_path=str(out)))
    trainer.train()
    traces = _trace_steps(out)
    assert sorted(traces) == [2]
    _check_round(traces[2], trainer, old=True, ref=True)
    assert check_output(out)[0] == 0


def test_a_failing_round_still_closes_the_profiler(model: Path, tmp_path: Path) -> None:
    """A reward function that raises in round 3: train() raises it unchanged; round 2's trace is
    written and the profiler is closed (no capture left open)."""
    out = tmp_path / "profiles"
    calls = []

    def reward(completions: list[str], **kwargs: Any) -> list[float]:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("reward service down")
        return [1.0 for _ in completions]

    trainer = grpo_trainer(model, tmp_path, rounds=4, reward=reward, gradient_accumulation_steps=2, beta=0.0)
    from profdsl.integrations.transformers import profile_trainer, trainer_profiler

    profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2, 3), save_path=str(out)))
    with pytest.raises(RuntimeError, match="reward service down"):
        trainer.train()
    assert trainer_profiler(trainer).state.value == "closed"
    assert 2 in _trace_steps(out)


def test_grpo_discrete_writes_a_trace_per_stage(model: Path, tmp_path: Path) -> None:
    """Discrete mode: each stage of round 2 writes its own trace; the update's holds the windows."""
    out = tmp_path / "profiles"
    trainer = grpo_trainer(model, tmp_path, rounds=2, gradient_accumulation_steps=2, beta=0.1)
    from profdsl.integrations.transformers import profile_trainer

    profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2,), discrete=True, save_path=str(out)))
    trainer.train()
    stages = sorted(r["stage"] for r in read_manifest(str(out)) if r["kind"] == "trace")
    assert stages == ["generate", "ref_log_prob", "reward", "update"]
    (update,) = [t for n, t in parsed(out) if n.stage == "update"]
    assert len(_spans(update, "mini_batch0")) == 1 and len(_optimizer_steps(update)) == _per_round(trainer)
    assert check_output(out)[0] == 0


def test_plain_trainer_steps_are_optimizer_steps(model: Path, tmp_path: Path) -> None:
    """transformers' own Trainer: step N is optimizer step N; its micro-batches are windows with a
    forward and a backward each, then the optimizer step."""
    out = tmp_path / "profiles"
    trainer = plain_trainer(model, tmp_path, max_steps=4, accumulation=2)
    from profdsl.integrations.transformers import profile_trainer

    profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2, 3), save_path=str(out)))
    with pytest.raises(ConfigError, match="instrumented already"):
        profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2, 3), save_path=str(out)))
    trainer.train()
    traces = _trace_steps(out)
    assert sorted(traces) == [2, 3]
    for trace in traces.values():
        (step,) = _spans(trace, "train_step")
        windows = _spans(trace, "micro_batch", prefix=True)
        assert [w["name"] for w in windows] == ["micro_batch0", "micro_batch1"]
        for window in windows:
            assert _inside(window, step)
            assert [len([e for e in _spans(trace, s) if _inside(e, window)]) for s in ("forward", "backward")] == [1, 1]
        (optimizer,) = _spans(trace, "optimizer_step")
        (torch_step,) = _optimizer_steps(trace)
        assert _inside(torch_step, optimizer) and _inside(optimizer, step)
        assert optimizer["ts"] >= windows[-1]["ts"] + windows[-1]["dur"]
    assert check_output(out)[0] == 0


def test_refuses_what_it_does_not_understand(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trainer that runs its own loop, a TRL trainer not covered, a transformers version not
    understood: each a ConfigError saying which, before anything is wrapped."""
    import transformers

    from profdsl.integrations.transformers import profile_trainer

    class OwnLoop(transformers.Trainer):
        def _inner_training_loop(self, *args: Any, **kwargs: Any) -> None:
            return None

    config = ProfilerConfig(enable=True, steps=(1,))
    with pytest.raises(ConfigError, match="OwnLoop runs its own training loop"):
        profile_trainer(OwnLoop.__new__(OwnLoop), config)
    uncovered = type("OnlineThing", (transformers.Trainer,), {"__module__": "trl.trainer.online_thing"})
    with pytest.raises(ConfigError, match="does not cover TRL's OnlineThing"):
        profile_trainer(uncovered.__new__(uncovered), config)
    with pytest.raises(ConfigError, match="needs a transformers Trainer"):
        profile_trainer(object(), config)
    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    with pytest.raises(ConfigError, match="transformers 5.x, not transformers 4.57.1"):
        profile_trainer(transformers.Trainer.__new__(transformers.Trainer), config)


def test_the_example_runs(tmp_path: Path) -> None:
    """examples/trl_grpo.py, as a user runs it: prints where round 2's and 3's traces went."""
    out = tmp_path / "profiles"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trl_grpo.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"traces in {out}" in done.stdout
    assert sorted(n.step for n, _ in parsed(out)) == [2, 3]
