"""No empty engine folder is left in save_path (issue 29 item 9): once a rollout window's engine
files have moved in, a replica folder (``rollout_replica_<r>``) left empty is removed; one that
still holds a file (a rank not selected, an engine file profdsl leaves where it was) stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from profdsl import Profiler, profile_stage, rollout_window
from profdsl.manifest import read_manifest
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout.torch_sampler import TorchSamplerEngine

from .profiling import config, work
from .test_rollout import vllm_replicas

pytest.importorskip("torch")


def _empty_folders(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir() and not any(p.iterdir()))


def test_a_torch_sampler_in_discrete_mode_leaves_no_folder(tmp_path: Path) -> None:
    """The demo's case: the sampler records its own session (discrete mode), its trace moves in,
    and its replica folder goes, step after step."""
    folder = tmp_path / "run"
    cfg = config(folder, discrete=True, steps=[1, 2])
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        for step in (1, 2):
            with profiler.step(step):
                with rollout_window([TorchSamplerEngine(cfg, replica=0)]):
                    work()
                with profile_stage("update_actor"):
                    work()
    rollouts = [r for r in read_manifest(folder) if r["kind"] == "rollout"]
    assert sorted(r["step"] for r in rollouts if r["status"] == "ok") == [1, 2]
    assert not os.path.exists(rollout_trace_dir(str(folder), 0))
    assert _empty_folders(folder) == []


def test_a_folder_that_keeps_a_file_stays(tmp_path: Path) -> None:
    """ranks [0] of a tp=2 replica: GPU 1's trace stays where the engine wrote it, and so does its
    folder; the other replicas never ran, so never made one."""
    cfg = config(tmp_path / "p", ranks=[0])
    engines = vllm_replicas(cfg, 2, tp=2)
    with Profiler(cfg, role="trainer", rank=0, world_size=1) as profiler, profiler.step(1):
        with rollout_window(engines, replica_world_size=2):
            pass
    left = os.listdir(rollout_trace_dir(cfg.save_path, 0))
    assert len(left) == 1 and "rank1." in left[0]
    assert _empty_folders(Path(cfg.save_path)) == []
