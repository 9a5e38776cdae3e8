"""Ray actor classes for the Ray tests (a module of their own, so workers import them by name)."""

from __future__ import annotations

import os
import threading
from typing import Any

import torch

from profdsl import FinishHook, ProfilerConfig, TorchOptions, mini_batch_window, profile_stage
from profdsl.ray import ProfiledWorker
from profdsl.rollout.torch_sampler import TorchSamplerEngine


class TrainWorker(ProfiledWorker):
    """A worker serving one or two roles (fused actor + ref), on one rank."""

    def __init__(self, config: ProfilerConfig, rank: int, world_size: int, roles: tuple[str, ...]) -> None:
        for role in roles:
            self.init_profiler(config, role=role, rank=rank, world_size=world_size)
        self.model = torch.nn.Linear(8, 8)
        self.calls = 0

    @profile_stage("update_actor", role="actor")
    def update(self, fail: bool = False) -> int:
        for _ in mini_batch_window(range(2)):
            self.model(torch.randn(4, 8)).sum().backward()
        if fail:
            raise ValueError("stage failed")
        self.calls += 1
        return self.calls

    @profile_stage("compute_ref_log_prob", role="ref")
    def ref_log_prob(self) -> int:
        with torch.no_grad():
            self.model(torch.randn(4, 8))
        return os.getpid()

    def pid(self) -> int:
        return os.getpid()


class SamplerActor:
    """A rollout replica: a tiny torch policy sampling, profiled through TorchSamplerEngine."""

    def __init__(self, config: ProfilerConfig, replica: int) -> None:
        self.engine = TorchSamplerEngine(config, replica)
        self.policy = torch.nn.Linear(8, 4)

    def start_profile(self, profile_prefix: str | None = None) -> None:
        self.engine.start_profile(profile_prefix)

    def stop_profile(self) -> None:
        self.engine.stop_profile()

    def generate(self, n: int) -> list[int]:
        with torch.no_grad():
            return self.policy(torch.randn(n, 8)).argmax(-1).tolist()

    def node(self) -> Any:
        import ray

        return ray.get_runtime_context().get_node_id()


class ThreadedWorker(ProfiledWorker):
    """A worker of one role whose calls run on Ray's pool threads (made ``max_concurrency=4``):
    steps 1-3 profiled into ``save``, a finish hook."""

    def __init__(self, save: str, discrete: bool) -> None:
        config = ProfilerConfig(
            enable=True,
            steps=[1, 2, 3],
            save_path=save,
            discrete=discrete,
            torch=TorchOptions(contents=["cpu"]),
            finish_hook=FinishHook(cmd="true"),
        )
        self.init_profiler(config, role="actor", rank=0, world_size=1)

    @profile_stage("update_actor")
    def update(self) -> int:
        torch.ones(64).mul(2).sum()
        return threading.get_ident()

    def pid(self) -> int:
        return os.getpid()
