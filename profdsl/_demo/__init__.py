"""``profdsl demo``: a toy RL loop on CPU, profiled end to end.

A rollout samples from a tiny torch policy through two engine replicas, a reference pass computes
log-probs, the critic computes values and is updated, and the actor update runs over mini-batches
under a per-mini-batch schedule. Chosen steps and ranks are profiled in discrete mode, and a
finish hook packs the output folder into a tarball. ``--ray`` runs the same loop as Ray actors
on a local cluster of its own (``address="local"``: never one ``RAY_ADDRESS`` points to).

One step of one rank is made slow (``--slow-step``, on the last rank): the always-on metrics see
it, the run alerts (the rank's slow step; on Ray also the driver's slow rank and straggler
alert), the next step is traced automatically (``ProfilerConfig.auto``; on Ray beside a typical
rank's), and the demo shows where the slow step's time went, from the metrics log.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from profdsl._demo.metrics_table import MetricsLog
from profdsl.config import (
    AutoCapture,
    FinishHook,
    Metrics,
    ProfilerConfig,
    RolloutOptions,
    Schedule,
    Stragglers,
    TorchOptions,
)

if TYPE_CHECKING:
    from profdsl.records.manifest import Record

__all__ = ["add_arguments", "run"]

HELP = "run a toy RL loop on CPU, profiled end to end (add --ray for Ray actors)"
EXAMPLES = """examples:
  profdsl demo --out profiles
  profdsl demo --out profiles-ray --ray --steps 1 3
  profdsl demo --out profiles --slow-step -1      # no slow step
"""

#: The stage the demo holds up, and the one watched for slow steps and stragglers.
SLOW_STAGE = "update_actor"
#: A stage counts as slow above this many times its baseline, and only when it took this long
#: (the demo's stages take milliseconds: no scheduling hiccup of a busy machine reaches it).
SLOWER_THAN, MIN_SECONDS = 3.0, 0.3


#: The demo's finish hook: pack the folder beside it. Each run packs into a file of its own and
#: renames it into place (hooks of several ranks and requests may run at once), and tar's status 1
#: ("file changed as we read it": another rank appending to the manifest meanwhile) is no failure.
PACK = (
    'tar czf "$PROFDSL_SAVE_PATH.tgz.$$" -C "$PROFDSL_SAVE_PATH" . ; [ $? -le 1 ] '
    '&& mv -f "$PROFDSL_SAVE_PATH.tgz.$$" "$PROFDSL_SAVE_PATH.tgz" '
    '&& echo "packed $PROFDSL_SAVE_PATH.tgz"'
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's command-line arguments."""
    parser.add_argument("--out", required=True, help="save_path: where every trace lands")
    parser.add_argument("--ray", action="store_true", help="run the roles as Ray actors")
    parser.add_argument("--steps", type=int, nargs="+", default=[2, 3], help="RL steps to profile")
    parser.add_argument("--num-steps", type=int, default=8, help="RL steps to run")
    parser.add_argument("--ranks", type=int, nargs="+", default=[0], help="global ranks to profile")
    parser.add_argument("--mini-batches", type=int, default=4, help="update mini-batches per step")
    parser.add_argument(
        "--slow-step",
        type=int,
        default=5,
        help="the step made slow on the last rank (-1: none); its next step is traced",
    )
    parser.add_argument(
        "--slow-seconds",
        type=float,
        default=1.5,
        help="how long the slow step is held up at least (longer on a slow machine: 6x its longest update before)",
    )


def demo_config(args: argparse.Namespace) -> ProfilerConfig:
    """The profiler config the demo runs with."""
    return ProfilerConfig(
        enable=True,
        steps=args.steps,
        ranks=args.ranks,
        save_path=os.path.abspath(args.out),
        discrete=True,
        torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=1, active=2)),
        rollout=RolloutOptions(flush_wait_s=60, stop_timeout_s=120),
        finish_hook=FinishHook(cmd=PACK, timeout_s=120),
        metrics=Metrics(
            enabled=True,
            log=True,
            stragglers=Stragglers(factor=SLOWER_THAN, consecutive=1, min_seconds=MIN_SECONDS, stages=[SLOW_STAGE]),
        ),
        auto=AutoCapture(
            stages=[SLOW_STAGE],
            slower_than=SLOWER_THAN,
            baseline_steps=3,
            max_captures=1,
            cooldown_steps=0,
            min_seconds=MIN_SECONDS,
        ),
    )


def _slow(args: argparse.Namespace, rank: int, world_size: int) -> dict[int, float]:
    """The steps held up on ``rank``: the slow step, on the last rank."""
    return {args.slow_step: args.slow_seconds} if args.slow_step >= 0 and rank == world_size - 1 else {}


def _prompts(step: int, replicas: int) -> list[Any]:
    import torch

    from profdsl._demo.workers import HIDDEN

    generator = torch.Generator().manual_seed(step)
    return [torch.randn(64, HIDDEN, generator=generator) for _ in range(replicas)]


def _local(config: ProfilerConfig, args: argparse.Namespace, log: MetricsLog) -> None:
    import torch

    from profdsl import rollout_window
    from profdsl._demo.workers import Sampler, Trainer

    trainer = Trainer(config, 0, 1, args.mini_batches, _slow(args, 0, 1))
    samplers = [Sampler(config, r) for r in range(2)]
    for step in range(args.num_steps):
        trainer.start_profile(step)
        prompts = _prompts(step, len(samplers))
        with rollout_window(samplers, role="actor"):  # the actor's step takes the rollout's time
            actions = [s.generate(p) for s, p in zip(samplers, prompts)]
        loss = trainer.train_step(torch.cat(prompts), torch.cat(actions), step)
        log.add(trainer.stop_profile())
        _progress(step, args, loss)
    trainer.finish_profile()


def _ray(config: ProfilerConfig, args: argparse.Namespace, log: MetricsLog) -> None:
    import ray

    from profdsl._demo.workers import Sampler, Trainer
    from profdsl.ray import RayStepProfiler, runtime_env

    # "local": a cluster of its own, never one RAY_ADDRESS or a `ray start` on this machine points to
    # (its num_cpus would be refused or ignored there, and the demo's actors land on that cluster)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env(config))
    try:
        actor = ray.remote(num_cpus=0)
        workers: list[Any] = [
            actor(Trainer).remote(config, rank, 2, args.mini_batches, _slow(args, rank, 2)) for rank in range(2)
        ]
        engines: list[Any] = [actor(Sampler).remote(config, r) for r in range(2)]
        trainer = RayStepProfiler(config, workers=workers, engines=engines)
        for step in range(args.num_steps):
            with trainer.step(step):
                prompts = _prompts(step, len(engines))
                with trainer.rollout():
                    actions = ray.get([e.generate.remote(p) for e, p in zip(engines, prompts)])
                losses = ray.get([w.train_step.remote(p, a, step) for w, p, a in zip(workers, prompts, actions)])
            log.add(trainer.metrics.timings if trainer.metrics else ())
            _progress(step, args, sum(losses) / len(losses))
            for line in trainer.metrics.fleet if trainer.metrics else ():  # the driver's fleet line
                print(f"  fleet: {line}", flush=True)
        trainer.close()
    finally:
        ray.shutdown()


def _progress(step: int, args: argparse.Namespace, loss: float) -> None:
    mark = " (profiled)" if step in args.steps else ""
    mark += " (made slow)" if step == args.slow_step else ""
    print(f"step {step} of 0..{args.num_steps - 1}{mark}: loss {loss:+.4f}", flush=True)


class _Alerts(logging.Handler):
    """Prints profdsl's slow-step, slow-rank and straggler messages as they happen (``alert:``);
    profdsl's other warnings go to stderr as they would without it."""

    WORDS = ("slow step:", "slow rank:", "straggler")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(word in message for word in self.WORDS):
            print(f"  alert: {message.removeprefix('profdsl: ')}", flush=True)
        elif record.levelno >= logging.WARNING:
            print(message, file=sys.stderr, flush=True)


def _section(title: str, lines: Iterable[str]) -> None:
    """``title:`` after an empty line, then each of ``lines`` indented (an empty one left empty)."""
    print(f"\n{title}:")
    for line in lines:
        print("  " + line if line else "")


def _slow_story(save_path: str, records: list[Record], args: argparse.Namespace) -> None:
    """The automatic captures (why each was traced) and where the slow step's time went."""
    from profdsl._demo.report import auto_captures, slow_step_table

    if args.slow_step < 0:
        return
    captures = auto_captures(records)
    _section(
        "automatic captures (ProfilerConfig.auto: each traced step, its rank and roles, and why)",
        captures or ["none: the slow step was not caught"],
    )
    rank = 1 if args.ray else 0
    table = slow_step_table(save_path, args.slow_step, rank)
    _section(
        f"where the slow step's time went (step {args.slow_step} on rank {rank} against the median of "
        "its other untraced steps, from the metrics log)",
        table or ["(no metrics log)"],
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit code."""
    from profdsl._demo.ledger_table import TITLE as LEDGER_TITLE
    from profdsl._demo.ledger_table import ledger_lines
    from profdsl._demo.metrics_table import TITLE as METRICS_TITLE
    from profdsl._demo.report import artifacts_table, cost_table, read_run, stage_tables
    from profdsl.analysis import _cost as cost

    config = demo_config(args)
    started = time.monotonic()
    print(
        f"profdsl demo: {'Ray actors' if args.ray else 'one process'}, profiling steps "
        f"{list(config.steps)} on ranks {list(config.ranks)} into {config.save_path}",
        flush=True,
    )
    log = MetricsLog()
    logger, alerts = logging.getLogger("profdsl"), _Alerts(logging.INFO)
    level = logger.level
    logger.addHandler(alerts)
    logger.setLevel(logging.INFO)
    try:
        (_ray if args.ray else _local)(config, args, log)
    finally:
        logger.removeHandler(alerts)
        logger.setLevel(level)
    found = read_run(config.save_path)
    records = [a.record for a in found or [] if a.record is not None]
    _section(f"done in {time.monotonic() - started:.1f}s. Where every artifact went", artifacts_table(records))
    steps, traced = stage_tables(config.save_path, found)
    _section("where each step went (from the traces, as `profdsl summary` shows it)", steps)
    _section(METRICS_TITLE, log.lines(traced))
    ledger = ledger_lines(log.timings)
    if ledger:
        _section(LEDGER_TITLE, ledger)
    _slow_story(config.save_path, records, args)
    costs = cost_table(found or [])
    if costs:
        _section(cost.TITLE, costs)
    if os.path.exists(config.save_path + ".tgz"):
        print(f"\nthe finish hook packed everything into {config.save_path}.tgz")
    print("open any .json.gz trace in https://ui.perfetto.dev")
    sys.stdout.flush()
    return 0
