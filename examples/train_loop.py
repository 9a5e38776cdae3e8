"""A toy RL training loop on CPU, profiled with profdsl (runs in seconds).

    python examples/train_loop.py [--out profiles] [--steps 2 4] [--continuous]

A tiny policy generates "responses", a reference pass computes log-probs, and the actor update
runs over mini-batches under a per-mini-batch schedule. Steps 2 and 4 are profiled; in discrete
mode each stage writes its own trace, and the scheduled update one trace per mini-batch window.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from profdsl import Profiler, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.manifest import read_manifest


class ActorWorker:
    """What a trainer's actor worker looks like with profdsl annotations."""

    def __init__(self, config: ProfilerConfig) -> None:
        torch.manual_seed(0)
        self.policy = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=1e-2)
        self.profiler = Profiler(config, role="actor")

    @profile_stage("generate")
    def generate(self, prompts: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.distributions.Categorical(logits=self.policy(prompts)).sample()

    @profile_stage("compute_log_prob")
    def compute_log_prob(self, prompts: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(self.policy(prompts), -1).gather(1, actions[:, None]).squeeze(1)

    @profile_stage("update_actor", scheduled=True)
    def update_actor(self, prompts: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor) -> float:
        total = 0.0
        batches = zip(prompts.split(16), actions.split(16), advantages.split(16))
        for p, a, adv in mini_batch_window(batches):
            with profile_stage("forward_backward"):
                logp = torch.log_softmax(self.policy(p), -1).gather(1, a[:, None]).squeeze(1)
                loss = -(logp * adv).mean()
                self.optimizer.zero_grad()
                loss.backward()
            self.optimizer.step()
            total += loss.item()
        return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="profiles", help="save_path for the traces")
    parser.add_argument("--steps", type=int, nargs="+", default=[2, 4], help="RL steps to profile")
    parser.add_argument("--continuous", action="store_true", help="one trace per step instead of per stage")
    args = parser.parse_args()

    config = ProfilerConfig(
        enable=True,
        steps=args.steps,
        save_path=args.out,
        discrete=not args.continuous,
        torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=1, warmup=1, active=2)),
    )
    worker = ActorWorker(config)
    started = time.monotonic()
    for step in range(6):
        with worker.profiler.step(step):
            prompts = torch.randn(128, 32)
            actions = worker.generate(prompts)
            worker.compute_log_prob(prompts, actions)
            loss = worker.update_actor(prompts, actions, torch.randn(128))
        print(f"step {step}{' (profiled)' if step in args.steps else ''}: loss {loss:+.3f}")
    worker.profiler.close()

    records = read_manifest(args.out)
    print(f"\n{len(records)} traces in {Path(args.out).resolve()} ({time.monotonic() - started:.1f}s):")
    for r in records:
        window = f" mini-batches {r['window'][0]}-{r['window'][1]}" if r["window"] else ""
        print(f"  step {r['step']} {r['stage'] or 'whole step':<16}{window:<18} {r['bytes']:>8} B  {r['path']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
