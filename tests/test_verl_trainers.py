"""verl's own trainers' call sequences, driven through ``profdsl.integrations.verl``.

Each driver copies the order in which a verl trainer calls its workers (verl at the merge of
PR #7408): the PPO trainers' ``_start_profiling`` / ``_stop_profiling`` with
``profile_continuous_steps`` (``verl/trainer/ppo/ray_trainer.py``, ``ppo/v1/trainer_base.py``),
the SFT trainers' loop over ``trainer.profile_interval`` (``verl/trainer/sft_trainer.py``,
``sft_trainer_ray.py``), and a finish hook that is a script, as verl's end-to-end check uses.
"""

from __future__ import annotations

import importlib.util
import stat
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl.integrations.verl import DistProfiler, DistProfilerExtension, map_block
from profdsl.manifest import read_manifest

from .test_verl_facade import ActorRolloutRefWorker, verl_actor_config
from .traces import names, parsed, trace_files

torch = pytest.importorskip("torch")


def marker_script(folder: Path) -> Path:
    """A finish hook written as verl's end-to-end marker script: it fails unless
    ``VERL_PROFILE_SAVE_PATH`` (and the rest) are exported to it."""
    script = folder / "finish_hook.sh"
    script.write_text(
        "#!/bin/sh\n"
        'if [ -z "${VERL_PROFILE_SAVE_PATH:-}" ]; then\n'
        '  echo "VERL_PROFILE_SAVE_PATH is not exported" >&2\n'
        "  exit 1\n"
        "fi\n"
        'echo "$VERL_PROFILE_RANK $VERL_PROFILE_ROLE $VERL_PROFILE_TOOL" > "$VERL_PROFILE_SAVE_PATH/finish_hook_ran"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def hook_records(save_path: Path) -> list[dict[str, Any]]:
    return [r for r in read_manifest(save_path) if r["kind"] == "hook"]


# --- 1. a finish hook that is a script --------------------------------------------------------


def test_a_script_hook_sees_verls_variables(tmp_path: Path) -> None:
    """The command's text does not name ``VERL_PROFILE_*``: the script still gets them."""
    save = tmp_path / "profile"
    script = marker_script(tmp_path)
    config = verl_actor_config(save, f"global_profiler.finish_hook_cmd={script}")
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
    for step in (1, 2):
        worker.start_profile(role="train", profile_step=step)
        worker.compute_log_prob([1, 2])
        worker.stop_profile(run_command=step == 2)
    worker.finish_profile()
    assert [r["exit_code"] for r in hook_records(save)] == [0]
    assert (save / "finish_hook_ran").read_text().split() == ["0", "actor", "torch"]


# --- 2. profile_continuous_steps: one start and one stop per run of steps --------------------


def ppo_fit(worker: Any, steps: list[int], total: int, *, continuous: bool, after_stop: Any = None) -> None:
    """The PPO trainers' loop (``RayPPOTrainer.fit``, ``ppo/v1/trainer_base.fit``): start where
    the previous step was not profiled, stop where the next is not (continuous), or start and
    stop on every profiled step; ``run_command`` only on the last profiled step."""
    prev_step_profile = False
    curr_step_profile = 1 in steps
    for global_steps in range(1, total + 1):
        is_last_step = global_steps >= total
        if (not prev_step_profile and curr_step_profile) if continuous else curr_step_profile:
            worker.start_profile(role="train", profile_step=global_steps)
        with torch.profiler.record_function(f"trainer_step{global_steps}"):
            worker.compute_ref_log_prob([1, 2])
            worker.compute_log_prob([1, 2])
            worker.update_actor([1, 2])
        next_step_profile = global_steps + 1 in steps
        run_command = bool(curr_step_profile and steps and (global_steps == max(steps) or is_last_step))
        if (curr_step_profile and not next_step_profile) if continuous else curr_step_profile:
            worker.stop_profile(run_command=run_command)
            if after_stop is not None:
                after_stop(global_steps)
        prev_step_profile = curr_step_profile
        curr_step_profile = next_step_profile


def test_continuous_steps_are_one_capture_written_at_the_stop(tmp_path: Path) -> None:
    """Steps [1, 2] of 4: verl starts at 1 and stops at 2. The capture holds steps 1-2 only, is
    written at that stop, and the hook runs there (not at close)."""
    save = tmp_path / "profile"
    script = marker_script(tmp_path)
    config = verl_actor_config(
        save, "global_profiler.profile_continuous_steps=true", f"global_profiler.finish_hook_cmd={script}"
    )
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
    seen: dict[int, tuple[int, bool]] = {}

    def after_stop(step: int) -> None:
        seen[step] = (len(trace_files(save)) if save.exists() else 0, (save / "finish_hook_ran").exists())

    ppo_fit(worker, [1, 2], 4, continuous=True, after_stop=after_stop)
    assert seen == {2: (1, True)}  # verl stopped once; the trace and the hook were there at once
    worker.finish_profile()
    [(name, trace)] = parsed(save)
    assert sorted(set(names(trace, "trainer_step"))) == ["trainer_step1", "trainer_step2"]
    assert names(trace, "actor_update") == ["actor_update"] * 2
    assert [r["steps"] for r in hook_records(save)] == [[1, 2]]


def consecutive_runs(steps: list[int]) -> list[list[int]]:
    """The oracle: runs of consecutive steps (verl starts each once and stops it once)."""
    runs: list[list[int]] = []
    for step in sorted(steps):
        if runs and runs[-1][-1] == step - 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    return runs


@settings(max_examples=8, deadline=None)
@given(
    total=st.integers(1, 6),
    data=st.data(),
)
def test_each_run_of_continuous_steps_is_one_capture(total: int, data: st.DataObject) -> None:
    """Any profiled steps of any run length: one trace per run of consecutive steps, holding
    exactly that run's steps, and the hook runs once, for every profiled step."""
    steps = data.draw(st.lists(st.integers(1, total), min_size=1, unique=True))
    with tempfile.TemporaryDirectory() as folder:
        save = Path(folder) / "profile"
        mapped = verl_actor_config(save, "global_profiler.profile_continuous_steps=true")
        config = attrs.evolve(mapped, steps=steps, finish_hook=attrs.evolve(mapped.finish_hook, cmd="exit 0"))
        worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
        ppo_fit(worker, steps, total, continuous=True)
        worker.finish_profile()
        held = sorted(
            sorted(int(n.removeprefix("trainer_step")) for n in set(names(t, "trainer_step"))) for _, t in parsed(save)
        )
        assert held == consecutive_runs(steps)
        assert [r["steps"] for r in hook_records(save)] == [sorted(steps)]


def test_continuous_steps_in_discrete_mode_end_at_the_stop(tmp_path: Path) -> None:
    """The trainer calls the same in discrete mode: each stage of steps 1-2 has its trace (under
    step 1, the run's start: nothing marks step 2's start), steps 3-4 none, and the hook runs
    at the stop."""
    save = tmp_path / "profile"
    script = marker_script(tmp_path)
    config = verl_actor_config(
        save,
        "global_profiler.profile_continuous_steps=true",
        "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true",
        f"global_profiler.finish_hook_cmd={script}",
    )
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
    hook_ran: list[bool] = []
    marker = save / "finish_hook_ran"
    ppo_fit(worker, [1, 2], 4, continuous=True, after_stop=lambda _: hook_ran.append(marker.exists()))
    assert hook_ran == [True]
    worker.finish_profile()
    written = parsed(save)
    assert len(written) == 6 and {name.step for name, _ in written} == {1}
    assert [r["steps"] for r in hook_records(save)] == [[1, 2]]


# --- 3. the SFT trainers: start_profile() and stop_profile() without a step --------------------


class SftTrainingWorker(DistProfilerExtension):
    """verl's ``TrainingWorker`` as the SFT trainers build it: its role block's config, its
    ``train_batch`` annotated."""

    def __init__(self, config: Any) -> None:
        DistProfilerExtension.__init__(
            self, DistProfiler(rank=0, config=config, save_file_prefix="language_model", world_size=1)
        )

    @DistProfiler.annotate(color="red", role="train_batch")
    def train_batch(self, data: int) -> int:
        with torch.profiler.record_function(f"sft_batch{data}"):
            torch.ones(16).mul(2).sum()
        return data


def sft_fit(client: SftTrainingWorker, interval: tuple[int, int], total: int, *, ray: bool, after_stop: Any) -> None:
    """``SFTTrainer.fit`` (``step_profile()`` after every step) or, with ``ray``,
    ``sft_trainer_ray``'s (no ``step_profile()``): start and stop by ``profile_interval``."""
    start_profile_step, end_profile_step = interval
    for global_step in range(1, total + 1):
        if global_step == start_profile_step:
            client.start_profile()
        client.train_batch(global_step)
        if not ray:
            client.step_profile()
        if global_step == end_profile_step:
            client.stop_profile()
            after_stop()


@pytest.mark.parametrize("continuous", [False, True], ids=["per-step", "continuous"])
@pytest.mark.parametrize("ray", [False, True], ids=["sft_trainer", "sft_trainer_ray"])
def test_sft_profiles_its_interval(tmp_path: Path, ray: bool, continuous: bool) -> None:
    """``profile_interval: [2, 3]`` of 4 steps: steps 2 and 3 are profiled, each its own trace
    (the facade counts the steps by the worker's ``train_batch`` calls), or one with
    ``profile_continuous_steps``, and the hook runs at the stop."""
    save = tmp_path / "profile"
    client = SftTrainingWorker(sft_config(tmp_path, save, continuous=continuous))
    hook_ran: list[bool] = []
    marker = save / "finish_hook_ran"
    sft_fit(client, (2, 3), 4, ray=ray, after_stop=lambda: hook_ran.append(marker.exists()))
    assert hook_ran == [True]
    client.finish_profile()
    written = [(name.step, names(trace, "sft_batch")) for name, trace in parsed(save)]
    if continuous:
        assert written == [(2, ["sft_batch2", "sft_batch3"])]
    else:
        assert written == [(2, ["sft_batch2"]), (3, ["sft_batch3"])]
    assert [r["steps"] for r in hook_records(save)] == [[2, 3]]


def sft_config(tmp_path: Path, save: Path, *, continuous: bool) -> Any:
    """The SFT trainer's ``profiler`` block as verl ships it (``trainer/config/profiler/
    profiler.yaml``, resolved by OmegaConf), enabled, mapped with the interval's steps."""
    omegaconf = pytest.importorskip("omegaconf")
    spec = importlib.util.find_spec("verl")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is installed by the test setup: pip install --no-deps -c .ci/constraints.txt verl")
    shipped = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config" / "profiler" / "profiler.yaml"
    block = omegaconf.OmegaConf.merge(
        omegaconf.OmegaConf.load(shipped),
        omegaconf.OmegaConf.from_dotlist(
            [
                "enable=true",
                f"save_path={save}",
                f"finish_hook_cmd={marker_script(tmp_path)}",
                "tool_config.torch.contents=[cpu]",
            ]
        ),
    )
    # the interval's steps, as sft_trainer gives its worker group profile_steps
    steps = list(range(2, 3 + 1))
    return map_block(block, global_profiler={"steps": steps, "profile_continuous_steps": continuous})
