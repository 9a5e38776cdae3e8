"""A PPO-shaped trainer on Ray, profiled with profdsl (CPU, about ten seconds).

    python examples/ray_ppo.py --out profiles-ray

What to copy: workers mix in `ProfiledWorker` and mark stages with `profile_stage`; rollout
replicas are actors with `start_profile` / `stop_profile`; the driver wraps each step in
`RayStepProfiler.step` and generation in `.rollout()`, and calls `.close()` at the end.
"""

from __future__ import annotations

import argparse

import ray
import torch

from profdsl import FinishHook, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.manifest import read_manifest
from profdsl.ray import ProfiledWorker, RayStepProfiler, runtime_env
from profdsl.rollout.torch_sampler import TorchSamplerEngine


@ray.remote(num_cpus=0)
class ActorRefWorker(ProfiledWorker):
    """One rank of a fused actor + reference worker."""

    def __init__(self, config: ProfilerConfig, rank: int, world_size: int) -> None:
        self.init_profiler(config, role="actor", rank=rank, world_size=world_size)
        self.init_profiler(config, role="ref", rank=rank, world_size=world_size)
        self.policy = torch.nn.Linear(32, 8)
        self.reference = torch.nn.Linear(32, 8)
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=1e-2)

    @profile_stage("compute_ref_log_prob", role="ref")
    def ref_log_prob(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(self.reference(obs), -1).gather(1, act[:, None]).squeeze(1)

    @profile_stage("update_actor", role="actor", scheduled=True)
    def update_actor(self, obs: torch.Tensor, act: torch.Tensor, ref: torch.Tensor) -> float:
        losses = []
        for o, a, r in mini_batch_window(zip(obs.chunk(4), act.chunk(4), ref.chunk(4)), role="actor"):
            logp = torch.log_softmax(self.policy(o), -1).gather(1, a[:, None]).squeeze(1)
            loss = (logp - r).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return sum(losses) / len(losses)


@ray.remote(num_cpus=0)
class RolloutReplica:
    """A rollout engine replica sampling with a torch policy."""

    def __init__(self, config: ProfilerConfig, replica: int) -> None:
        self.engine = TorchSamplerEngine(config, replica)
        self.policy = torch.nn.Linear(32, 8)

    def start_profile(self, profile_prefix: str | None = None) -> None:
        self.engine.start_profile(profile_prefix)

    def stop_profile(self) -> None:
        self.engine.stop_profile()

    def generate(self, obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.distributions.Categorical(logits=self.policy(obs)).sample()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="profiles-ray")
    args = parser.parse_args()

    config = ProfilerConfig(
        enable=True,
        steps=[1, 2],
        ranks=[0],
        discrete=True,
        save_path=args.out,
        torch=TorchOptions(contents=["cpu"], schedule=Schedule(active=2)),
        finish_hook=FinishHook(cmd='echo "would upload $PROFDSL_SAVE_PATH from rank $PROFDSL_RANK"'),
    )
    # a local cluster of its own, even where RAY_ADDRESS or a `ray start` points to another
    # (docs/ray.md); to run on your cluster, drop address and num_cpus
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=runtime_env(config))
    workers = [ActorRefWorker.remote(config, rank, 2) for rank in range(2)]
    replicas = [RolloutReplica.remote(config, r) for r in range(2)]
    trainer = RayStepProfiler(config, workers=workers, engines=replicas)
    for step in range(4):
        with trainer.step(step):
            obs = [torch.randn(64, 32) for _ in replicas]
            with trainer.rollout():
                act = ray.get([r.generate.remote(o) for r, o in zip(replicas, obs)])
            refs = ray.get([w.ref_log_prob.remote(o, a) for w, o, a in zip(workers, obs, act)])
            loss = ray.get([w.update_actor.remote(o, a, r) for w, o, a, r in zip(workers, obs, act, refs)])
        print(f"step {step}: loss {sum(loss) / len(loss):.4f}")
    trainer.close()
    ray.shutdown()
    for record in read_manifest(args.out):
        print(record["kind"], record["step"], record["rank"], record["path"] or record["status"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
