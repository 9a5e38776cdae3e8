"""Two logical Ray nodes on this machine (ray.cluster_utils.Cluster): an engine replica on the
second node has its traces moved by a task on that node, and each node's hook rank uploads once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl import FinishHook, ProfilerConfig, RolloutOptions, TorchOptions
from profdsl.manifest import read_manifest
from profdsl.ray import RayStepProfiler

from .ray_actors import SamplerActor, TrainWorker

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
pytest.importorskip("torch")


@pytest.fixture
def two_nodes(own_ray_cluster: Any) -> Iterator[Any]:
    """Two nodes of 1 CPU each, in place of the session's cluster (tests/conftest.py)."""
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node_a": 1}})
    cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_relocation_and_hooks_per_node(two_nodes: object, tmp_path: Path) -> None:
    save = tmp_path / "save"
    config = ProfilerConfig(
        enable=True,
        steps=[1],
        all_ranks=True,
        save_path=str(save),
        discrete=True,
        torch=TorchOptions(contents=["cpu"]),
        rollout=RolloutOptions(flush_wait_s=30),
        finish_hook=FinishHook(cmd="true", ranks=[0, 1], timeout_s=60),
    )
    on = {"a": {"node_a": 0.01}, "b": {"node_b": 0.01}}
    workers = [
        ray.remote(num_cpus=0, resources=on[n])(TrainWorker).remote(config, rank, 2, ("actor",))
        for rank, n in enumerate("ab")
    ]
    engines = [ray.remote(num_cpus=0, resources=on[n])(SamplerActor).remote(config, r) for r, n in enumerate("ab")]
    node_of_engine = ray.get([e.node.remote() for e in engines])
    assert node_of_engine[0] != node_of_engine[1]
    trainer = RayStepProfiler(config, workers=workers, engines=engines)
    with trainer.step(1):
        with trainer.rollout():
            ray.get([e.generate.remote(4) for e in engines])
        ray.get([w.update.remote() for w in workers])
    trainer.close()
    records = read_manifest(save)
    moved = {r["replica"]: r.get("node") for r in records if r["kind"] == "rollout" and r["status"] == "ok"}
    assert moved == {0: node_of_engine[0], 1: node_of_engine[1]}
    hooks = sorted((r["rank"], r["status"]) for r in records if r["kind"] == "hook")
    assert hooks == [(0, "ok"), (1, "ok")]
