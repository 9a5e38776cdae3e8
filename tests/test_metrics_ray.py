"""RayStepProfiler gathers every worker's step metrics at stop, every step, on a real local Ray
cluster, and returns their spread per role and stage: a straggler shows every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from profdsl import Metrics, ProfilerConfig, TorchOptions
from profdsl.integrations import _ray as driver
from profdsl.manifest import read_manifest
from profdsl.metrics import StepSummary, StepTimings
from profdsl.ray import RayStepProfiler

from .metrics_actors import MeteredWorker

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
pytest.importorskip("torch")


def test_every_step_every_rank(ray_cluster: str, tmp_path: Path) -> None:
    """Profiling step 1 on rank 0 only; metrics on: all four steps of both ranks are gathered,
    rank 1 (0.25 s per mini-batch more) is the slowest in update_actor every step, and the
    driver's rollout is its own role."""
    config = ProfilerConfig(
        enable=True,
        steps=[1],
        ranks=[0],
        save_path=str(tmp_path),
        discrete=True,
        torch=TorchOptions(contents=["cpu"]),
        metrics=Metrics(enabled=True),
    )
    workers = [ray.remote(num_cpus=0)(MeteredWorker).remote(config, rank, 2, 0.25 * rank) for rank in range(2)]
    seen: list[tuple[int, dict[str, float]]] = []
    trainer = RayStepProfiler(
        config, workers=workers + [workers[1]], on_step=lambda step, metrics: seen.append((step, metrics))
    )
    summaries: list[StepSummary] = []
    for step in range(4):
        with trainer.step(step):
            with trainer.rollout(name="gen"):
                pass
            ray.get([w.update.remote() for w in workers] + [w.ref_log_prob.remote() for w in workers])
        assert trainer.metrics is not None
        summaries.append(trainer.metrics)
    trainer.close()
    assert trainer.errors == []

    assert [s.step for s in summaries] == [0, 1, 2, 3] and [s for s, _ in seen] == [0, 1, 2, 3]
    for summary, (_, flat) in zip(summaries, seen):
        ranks = sorted((t.role, t.rank) for t in summary.timings if isinstance(t, StepTimings))
        assert ranks == [("actor", 0), ("actor", 1), ("driver", 0), ("ref", 0), ("ref", 1)]
        spreads = {(s.role, s.stage): s for s in summary.spreads}
        update = spreads[("actor", "update_actor")]
        assert update.ranks == 2 and update.slowest_rank == 1 and update.max_s >= 0.5 > update.min_s
        assert update.min_s <= update.mean_s <= update.max_s
        assert spreads[("actor", "update_actor/mini_batch")].ranks == 2
        assert spreads[("ref", "compute_ref_log_prob")].ranks == 2
        assert spreads[("driver", "gen")].ranks == 1
        assert flat["timing_slowest_rank/actor/update_actor"] == 1
        assert flat["timing_s_max/actor/update_actor"] == update.max_s
        assert flat == summary.flat()
        # the step ledger of every rank, and the driver's fleet line (docs/ledger.md)
        for timings in summary.timings:
            assert timings.ledger is not None and timings.began_s is not None
            assert sum(round(v * 1e9) for v in timings.ledger.values()) == round(timings.wall_s * 1e9)
        worker = next(t for t in summary.timings if (t.role, t.rank) == ("actor", 1))
        assert worker.ledger is not None and worker.ledger["update"] >= 0.5
        assert any(
            line.startswith("driver ranks idle ")
            and line.endswith(" ms)")
            and f"of step {summary.step} while update ran" in line
            for line in summary.fleet
        ), summary.fleet
    traces = [(r["role"], r["step"], r["rank"]) for r in read_manifest(tmp_path) if r["kind"] == "trace"]
    assert set(traces) == {("actor", 1, 0), ("ref", 1, 0)}  # profiling itself is unchanged


def test_without_metrics_workers_are_driven_on_profiled_steps_only(
    ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ProfilerConfig(enable=True, steps=[2], save_path=str(tmp_path), tool="nsys")
    worker: Any = ray.remote(num_cpus=0)(MeteredWorker).remote(config, 0, 1, 0.0)
    trainer = RayStepProfiler(config, workers=[worker])
    calls = []
    original = driver._call

    def counting(workers: list[Any], errors: list[Any], method: str, *args: Any, timeout: float) -> list[Any]:
        calls.append(method)
        return original(workers, errors, method, *args, timeout=timeout)

    monkeypatch.setattr(driver, "_call", counting)
    for step in range(4):
        with trainer.step(step):
            pass
    trainer.close()
    assert calls == ["start_profile", "stop_profile", "finish_profile"]
    assert trainer.metrics is None
