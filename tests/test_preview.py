"""`profdsl plan`'s prediction (`profdsl.core.preview`) against what a real run writes: the real
torch profiler (CPU) is the oracle, for any config (one derivation of step grouping serves both:
two used to disagree)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profdsl import Profiler, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.core.preview import preview

from .strategies import schedules
from .traces import parsed

torch = pytest.importorskip("torch")

STEPS = range(5)

configs = st.builds(
    ProfilerConfig,
    enable=st.booleans(),
    steps=st.lists(st.sampled_from(list(STEPS)), max_size=5),
    ranks=st.sampled_from([[], [0], [1]]),
    discrete=st.booleans(),
    continuous_steps=st.booleans(),
    torch=st.builds(TorchOptions, contents=st.just(["cpu"]), schedule=st.none() | schedules),
)


def run(config: ProfilerConfig, n: int) -> None:
    """A loop over every step: a plain stage, then a scheduled update of ``n`` mini-batches."""
    with Profiler(config, role="actor", rank=0, world_size=2) as profiler:
        for step in STEPS:
            with profiler.step(step):
                with profile_stage("prepare"):
                    torch.ones(4).sum()
                with profile_stage("update", scheduled=True):
                    for _ in mini_batch_window(range(n)):
                        torch.ones(4).sum()


def written(folder: Path) -> list[Any]:
    """(step, stage, window, recorded windows per step) of each trace, sorted."""
    found = []
    for name, trace in parsed(folder):
        windows = sorted((w["step"], tuple(w["window"])) for w in trace["profdsl"]["windows"])
        found.append((name.step, name.stage or "", name.window or (), tuple(windows)))
    return sorted(found)


def predicted(config: ProfilerConfig, n: int) -> list[Any]:
    """The same, from the preview of the config for rank 0."""
    plan = preview(config, world_size=2, mini_batches=n)
    if 0 not in plan.ranks:
        return []
    if not plan.discrete:
        return sorted(
            (first, "", (), tuple((s, w) for s in range(first, last + 1) for w in plan.windows))
            for first, last in plan.sessions
        )
    found = []
    for step in plan.steps:
        found.append((step, "prepare", (), ()))
        scheduled = config.torch.schedule is not None
        found += [(step, "update", w, ()) for w in plan.windows] if scheduled else [(step, "update", (), ())]
    return sorted(found)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(configs, st.integers(min_value=0, max_value=4))
def test_preview_equals_what_a_run_writes(
    tmp_path_factory: pytest.TempPathFactory, config: ProfilerConfig, n: int
) -> None:
    """Sessions, profiled steps and ranks, and mini-batch windows: as predicted, trace by trace."""
    import attrs

    out = tmp_path_factory.mktemp("plan")
    config = attrs.evolve(config, save_path=str(out))
    run(config, n)
    assert written(out) == predicted(config, n)


def test_plan_command_groups_as_the_runtime(tmp_path: Path) -> None:
    """The case that disagreed: continuous steps with a schedule. The command says one session
    (in text and JSON) and the runtime writes one trace holding both steps' windows."""
    config = tmp_path / "p.yaml"
    config.write_text(
        "enable: true\nsteps: [1, 2]\ncontinuous_steps: true\ntorch: {contents: [cpu], schedule: {active: 1}}\n"
    )
    command = [sys.executable, "-m", "profdsl", "plan", str(config), "--world-size", "1", "--mini-batches", "2"]
    text = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "sessions: [(1, 2)]" in text.stdout
    cfg = ProfilerConfig.from_file(config)
    cfg = ProfilerConfig.from_mapping({**cfg.to_mapping(), "save_path": str(tmp_path / "out")})
    run(cfg, 2)
    assert [(n.step, t["profdsl"]["windows"]) for n, t in parsed(tmp_path / "out")] == [
        (1, [{"role": "actor", "step": s, "window": [i, i]} for s in (1, 2) for i in (0, 1)])
    ]
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(as_json.stdout)["sessions"] == [[1, 2]]


def test_schedule_is_not_needed_for_the_preview() -> None:
    """A config without a schedule records all of a step's mini-batches as one window."""
    plan = preview(ProfilerConfig(enable=True, steps=[3]), world_size=1, mini_batches=3)
    assert plan.windows == ((0, 2),) and plan.sessions == ((3, 3),)
    assert (
        preview(
            ProfilerConfig(enable=True, torch=TorchOptions(schedule=Schedule(active=2))), world_size=1, mini_batches=0
        ).windows
        == ()
    )
