"""``profdsl plan CONFIG --world-size N``: what a config will capture, before a run."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from profdsl.cli.common import fail
from profdsl.config import ProfilerConfig
from profdsl.errors import ConfigError
from profdsl.core.naming import TraceName
from profdsl.core.step_plan import StepPlan
from profdsl.core.ranks import is_hook_rank, is_rank_selected, replicas_for_ranks
from profdsl.core.schedule import recorded_windows

HELP = "show what a profiler config will capture (steps, ranks, replicas, windows, file names, size warnings)"
EXAMPLES = """examples:
  profdsl plan profiler.yaml --world-size 16
  profdsl plan trainer.yaml --section actor.profiler --world-size 64 --replica-world-size 8 --mini-batches 16
"""
EXAMPLE_TIME_MS = 1_795_000_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``CONFIG``, ``--world-size`` and the shape of the run."""
    parser.epilog, parser.formatter_class = EXAMPLES, argparse.RawDescriptionHelpFormatter
    parser.add_argument("config", help="a profiler config file (YAML or JSON)")
    parser.add_argument("--section", help="a dotted key of the block to read, e.g. actor.profiler")
    parser.add_argument("--world-size", type=int, required=True, help="training ranks")
    parser.add_argument("--replica-world-size", type=int, help="GPUs per rollout replica (tp*dp*pp)")
    parser.add_argument("--mini-batches", type=int, default=8, help="update mini-batches per step")


def spans(values: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0-2, 5``."""
    out: list[str] = []
    for v in sorted(values):
        if out and "-" not in out[-1].split(",")[-1] and int(out[-1]) == v - 1:
            out[-1] = f"{out[-1]}-{v}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == v - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out) or "none"


def warnings_for(config: ProfilerConfig, profiled: int) -> list[str]:
    """Rough size and cost warnings for heavy options."""
    contents, found = config.torch.contents, []
    if "stack" in contents:
        found.append("stack: Python stacks multiply trace size several times and slow each flush")
    if "memory" in contents:
        found.append("memory: an event per allocation; traces grow quickly on long stages")
    if "shapes" in contents:
        found.append("shapes: input shapes on every op add roughly a third to trace size")
    if profiled > 8:
        found.append(f"{profiled} profiled ranks: that many traces per stage and step; one or two per "
                     "parallel group usually suffice")
    if config.rollout.max_iterations == 0:
        found.append("rollout.max_iterations=0: engine traces record until stop (minutes-long flushes)")
    if config.discrete and config.torch.schedule is None:
        found.append("no schedule: a scheduled stage's trace holds every mini-batch")
    return found


def run(args: argparse.Namespace) -> int:
    """Print the plan; a bad config exits 2 with the ConfigError message."""
    if args.world_size < 1 or args.mini_batches < 0:
        return fail("--world-size must be >= 1 and --mini-batches >= 0")
    try:
        config = ProfilerConfig.from_file(args.config, section=args.section)
    except ConfigError as exc:
        return fail(str(exc))
    n = args.world_size
    plan = StepPlan(steps=config.steps if config.enable else (),
                    continuous_steps=config.continuous_steps and not config.discrete)
    ranks = [r for r in range(n) if config.enable and is_rank_selected(r, config.ranks, all_ranks=config.all_ranks)]
    hook = config.finish_hook
    hook_ranks = [r for r in range(n) if hook.cmd and is_hook_rank(
        r, hook_ranks=hook.ranks, hook_all_ranks=hook.all_ranks, profiled_ranks=config.ranks,
        profiled_all_ranks=config.all_ranks)]
    print(f"enabled: {config.enable}   tool: {config.tool}   "
          f"mode: {'discrete (a trace per stage)' if config.discrete else 'continuous (a trace per step)'}")
    print(f"save_path: {config.save_path}")
    print(f"profiled steps: {spans(plan.steps)}   sessions: {list(plan.sessions) or 'none'}")
    print(f"profiled ranks ({len(ranks)} of {n}): {spans(ranks)}")
    print(f"finish hook: {hook.cmd!r} on ranks {spans(hook_ranks)}, after step {plan.hook_step}"
          if hook.cmd else "finish hook: none")
    if args.replica_world_size:
        width = args.replica_world_size
        replicas = replicas_for_ranks(config.ranks, width, all_ranks=config.all_ranks,
                                      num_replicas=max(n // width, 1)) if config.enable else set()
        print(f"rollout replicas of {width} GPUs: {spans(replicas)} of {max(n // width, 1)}")
    schedule = config.torch.schedule
    windows = recorded_windows(schedule, args.mini_batches) if schedule else None
    if schedule is not None:
        print(f"scheduled stages over {args.mini_batches} mini-batches write windows: {windows}")
    step = plan.steps[0] if plan.steps else 0
    example = TraceName(role="actor", stage="update_actor" if config.discrete else None, step=step,
                        rank=ranks[0] if ranks else 0, world_size=n,
                        window=windows[0] if windows and config.discrete else None, host="HOST",
                        pid=1234, time_ms=EXAMPLE_TIME_MS)
    print(f"example file: {example.format()}")
    for warning in warnings_for(config, len(ranks)):
        print(f"warning: {warning}")
    return 0
