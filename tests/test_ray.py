"""profdsl.ray on a real local Ray cluster (ray.init(num_cpus=2), the session's: tests/conftest.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from profdsl import FinishHook, ProfilerConfig, RolloutOptions, Schedule, TorchOptions
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName
from profdsl.ray import RayStepProfiler, runtime_env

from .ray_actors import SamplerActor, TrainWorker

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
pytest.importorskip("torch")


def remote(cls: type, *args: Any, **options: Any) -> Any:
    return ray.remote(num_cpus=0, **options)(cls).remote(*args)


def make_config(save: Path, **kwargs: Any) -> ProfilerConfig:
    kwargs.setdefault("torch", TorchOptions(contents=["cpu"], schedule=Schedule(active=1)))
    return ProfilerConfig(enable=True, save_path=str(save), discrete=True, **kwargs)


def test_workers_engines_and_hooks(ray_cluster: str, tmp_path: Path) -> None:
    """Two ranks of a fused actor+ref worker (one listed twice), two rollout replicas: profiled
    steps 1 and 2 only, on rank 0 and replica 0 only; hooks run once per process, after the last
    step's rollout traces landed; a stage that raises does not stop profiling."""
    save = tmp_path / "save"
    cmd = 'ls "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../hook-$PROFDSL_RANK-$PROFDSL_PID.txt"'
    config = make_config(
        save, steps=[1, 2], ranks=[0], finish_hook=FinishHook(cmd=cmd), rollout=RolloutOptions(flush_wait_s=30)
    )
    workers = [remote(TrainWorker, config, rank, 2, ("actor", "ref")) for rank in range(2)]
    engines = [remote(SamplerActor, config, r) for r in range(2)]
    trainer = RayStepProfiler(config, workers=workers + [workers[0]], engines=engines)
    assert len(trainer.workers) == 2
    for step in range(4):
        with trainer.step(step):
            with trainer.rollout():
                ray.get([e.generate.remote(4) for e in engines])
            if step == 1:
                with pytest.raises(ray.exceptions.RayTaskError, match="stage failed"):
                    ray.get(workers[0].update.remote(fail=True))
            ray.get([w.update.remote() for w in workers] + [w.ref_log_prob.remote() for w in workers])
    trainer.close()
    assert trainer.errors == []

    records = read_manifest(save)
    traces = [(r["role"], r["stage"], r["step"], r["rank"]) for r in records if r["kind"] == "trace"]
    assert sorted(set(traces)) == [
        ("actor", "update_actor", 1, 0),
        ("actor", "update_actor", 2, 0),
        ("ref", "compute_ref_log_prob", 1, 0),
        ("ref", "compute_ref_log_prob", 2, 0),
    ]
    rollout = sorted((r["step"], r["replica"], r["rank"]) for r in records if r["kind"] == "rollout")
    assert rollout == [(1, 0, 0), (2, 0, 0)]
    for record in records:
        if record["path"]:
            assert TraceName.parse(record["path"]) and (save / record["path"]).stat().st_size > 0
    hooks = [r for r in records if r["kind"] == "hook"]
    # Rank 0's process serves two roles: the hook ran once there (the other role's is skipped).
    assert sorted((h["status"], h["rank"], h["role"]) for h in hooks) == [
        ("ok", 0, "actor"),
        ("skipped", 0, "ref"),
    ] or sorted((h["status"], h["rank"], h["role"]) for h in hooks) == [("ok", 0, "ref"), ("skipped", 0, "actor")]
    [listing] = list(tmp_path.glob("hook-0-*.txt"))
    assert "rollout_step000002" in listing.read_text()  # the last step's rollout traces (B3)
    for handle in workers + engines:
        ray.kill(handle)


def test_run_ends_before_last_profiled_step(ray_cluster: str, tmp_path: Path) -> None:
    """Steps (1, 9) but training stops after step 2: close() runs the owed hooks."""
    save = tmp_path / "save"
    config = make_config(save, steps=[1, 9], all_ranks=True, finish_hook=FinishHook(cmd="true"))
    workers = [remote(TrainWorker, config, rank, 2, ("actor",)) for rank in range(2)]
    trainer = RayStepProfiler(config, workers=workers)
    for step in range(3):
        with trainer.step(step):
            ray.get([w.update.remote() for w in workers])
    assert [r for r in read_manifest(save) if r["kind"] == "hook"] == []
    trainer.close()
    hooks = sorted((r["rank"], r["status"]) for r in read_manifest(save) if r["kind"] == "hook")
    assert hooks == [(0, "ok"), (1, "ok")]
    for handle in workers:
        ray.kill(handle)


def test_dead_worker_does_not_hang_the_driver(ray_cluster: str, tmp_path: Path) -> None:
    """A worker that died is reported with its index and call; the driver goes on."""
    config = make_config(tmp_path / "save", steps=[1])
    workers = [remote(TrainWorker, config, 0, 1, ("actor",))]
    ray.get(workers[0].pid.remote())
    ray.kill(workers[0])
    for _ in range(120):  # ray.kill is asynchronous: wait until calls really fail
        try:
            ray.get(workers[0].pid.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            break
        time.sleep(0.5)
    trainer = RayStepProfiler(config, workers=workers, call_timeout_s=60)
    with trainer.step(1):
        pass
    trainer.close()
    assert {e.call for e in trainer.errors} == {"start_profile", "stop_profile", "finish_profile"}


def test_same_actor_through_two_handles_driven_once(ray_cluster: str, tmp_path: Path) -> None:
    """Two handle objects of one named actor are one worker (compared by actor id, not object)."""
    config = make_config(tmp_path / "save", steps=[1])
    named = ray.remote(num_cpus=0)(TrainWorker).options(name="fused-worker", namespace=ray_cluster)
    handle = named.remote(config, 0, 1, ("actor",))
    again = ray.get_actor("fused-worker", namespace=ray_cluster)
    assert again is not handle
    assert len(RayStepProfiler(config, workers=[handle, again]).workers) == 1
    ray.kill(handle)


def test_runtime_env() -> None:
    """nsys gets Ray's nsight plugin with cudaProfilerApi capture ranges; torch the CUPTI guard."""
    nsys = runtime_env(ProfilerConfig(enable=True, tool="nsys", steps=[1, 2]))
    assert nsys["nsight"]["capture-range"] == "cudaProfilerApi"
    assert nsys["nsight"]["capture-range-end"].startswith("repeat-shutdown:")
    guard = runtime_env(ProfilerConfig(enable=True))  # what it keeps out: tests/test_nvtx_injection.py
    assert guard == {"env_vars": {"NVTX_INJECTION64_PATH": "/dev/null/profdsl-no-nvtx-injection"}}
    assert runtime_env(ProfilerConfig(enable=True), guard_cupti=False) == {}
    assert runtime_env(ProfilerConfig()) == {}
