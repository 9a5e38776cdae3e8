"""``profdsl demo``: a toy RL loop on CPU, profiled end to end.

A rollout samples from a tiny torch policy through two engine replicas, a reference pass computes
log-probs, the critic computes values and is updated, and the actor update runs over mini-batches
under a per-mini-batch schedule. Chosen steps and ranks are profiled in discrete mode, and a
finish hook packs the output folder into a tarball. ``--ray`` runs the same loop as Ray actors
on a local cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from profdsl.config import FinishHook, Metrics, ProfilerConfig, RolloutOptions, Schedule, TorchOptions
from profdsl.demo.metrics_table import MetricsLog

__all__ = ["add_arguments", "run"]

HELP = "run a toy RL loop on CPU, profiled end to end (add --ray for Ray actors)"
EXAMPLES = """examples:
  profdsl demo --out profiles
  profdsl demo --out profiles-ray --ray --steps 1 3
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's command-line arguments."""
    parser.epilog = EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--out", required=True, help="save_path: where every trace lands")
    parser.add_argument("--ray", action="store_true", help="run the roles as Ray actors")
    parser.add_argument("--steps", type=int, nargs="+", default=[2, 3], help="RL steps to profile")
    parser.add_argument("--num-steps", type=int, default=5, help="RL steps to run")
    parser.add_argument("--ranks", type=int, nargs="+", default=[0], help="global ranks to profile")
    parser.add_argument("--mini-batches", type=int, default=4, help="update mini-batches per step")


def demo_config(args: argparse.Namespace) -> ProfilerConfig:
    """The profiler config the demo runs with."""
    return ProfilerConfig(
        enable=True, steps=args.steps, ranks=args.ranks, save_path=os.path.abspath(args.out),
        discrete=True,
        torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=1, active=2)),
        rollout=RolloutOptions(flush_wait_s=60, stop_timeout_s=120),
        finish_hook=FinishHook(cmd='tar czf "$PROFDSL_SAVE_PATH.tgz" -C "$PROFDSL_SAVE_PATH" . '
                                   '&& echo "packed $PROFDSL_SAVE_PATH.tgz"', timeout_s=120),
        metrics=Metrics(enabled=True),
    )


def _prompts(step: int, replicas: int) -> list[Any]:
    import torch

    from profdsl.demo.workers import HIDDEN

    generator = torch.Generator().manual_seed(step)
    return [torch.randn(64, HIDDEN, generator=generator) for _ in range(replicas)]


def _local(config: ProfilerConfig, args: argparse.Namespace, log: MetricsLog) -> None:
    import torch

    from profdsl import rollout_window
    from profdsl.demo.workers import Sampler, Trainer

    trainer = Trainer(config, 0, 1, args.mini_batches)
    samplers = [Sampler(config, r) for r in range(2)]
    for step in range(args.num_steps):
        trainer.start_profile(step)
        prompts = _prompts(step, len(samplers))
        with rollout_window(samplers):
            actions = [s.generate(p) for s, p in zip(samplers, prompts)]
        loss = trainer.train_step(torch.cat(prompts), torch.cat(actions))
        log.add(trainer.stop_profile())
        _progress(step, args, loss)
    trainer.finish_profile()


def _ray(config: ProfilerConfig, args: argparse.Namespace, log: MetricsLog) -> None:
    import ray

    from profdsl.demo.workers import Sampler, Trainer
    from profdsl.ray import RayStepProfiler, runtime_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env=runtime_env(config))
    try:
        actor = ray.remote(num_cpus=0)
        workers: list[Any] = [actor(Trainer).remote(config, rank, 2, args.mini_batches) for rank in range(2)]
        engines: list[Any] = [actor(Sampler).remote(config, r) for r in range(2)]
        trainer = RayStepProfiler(config, workers=workers, engines=engines)
        for step in range(args.num_steps):
            with trainer.step(step):
                prompts = _prompts(step, len(engines))
                with trainer.rollout():
                    actions = ray.get([e.generate.remote(p) for e, p in zip(engines, prompts)])
                losses = ray.get([w.train_step.remote(p, a) for w, p, a in zip(workers, prompts, actions)])
            log.add(trainer.metrics.timings if trainer.metrics else ())
            _progress(step, args, sum(losses) / len(losses))
        trainer.close()
    finally:
        ray.shutdown()


def _progress(step: int, args: argparse.Namespace, loss: float) -> None:
    mark = " (profiled)" if step in args.steps else ""
    print(f"step {step} of 0..{args.num_steps - 1}{mark}: loss {loss:+.4f}", flush=True)


def _always_on(log: MetricsLog, stages: list[tuple[str, str, int, float]]) -> None:
    from profdsl.demo.metrics_table import TITLE

    print(f"\n{TITLE}:")
    for line in log.lines(stages):
        print("  " + line)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit code."""
    from profdsl.analysis import cost
    from profdsl.demo.report import artifacts_table, cost_table, stage_table, traced_totals

    config = demo_config(args)
    started = time.monotonic()
    print(f"profdsl demo: {'Ray actors' if args.ray else 'one process'}, profiling steps "
          f"{list(config.steps)} on ranks {list(config.ranks)} into {config.save_path}", flush=True)
    log = MetricsLog()
    (_ray if args.ray else _local)(config, args, log)
    print(f"\ndone in {time.monotonic() - started:.1f}s. Where every artifact went:")
    for line in artifacts_table(config.save_path):
        print("  " + line)
    print("\nwhere each step went (from the traces, as `profdsl summary` shows it):")
    for line in stage_table(config.save_path):
        print("  " + line if line else "")
    _always_on(log, traced_totals(config.save_path))
    costs = cost_table(config.save_path)
    if costs:
        print(f"\n{cost.TITLE}:")
        for line in costs:
            print("  " + line)
    if os.path.exists(config.save_path + ".tgz"):
        print(f"\nthe finish hook packed everything into {config.save_path}.tgz")
    print("open any .json.gz trace in https://ui.perfetto.dev")
    sys.stdout.flush()
    return 0
