"""``profdsl plan CONFIG --world-size N``: what a config will capture, before a run."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable

import attrs

from profdsl._cli.common import fail_pointing
from profdsl._cli.plan_sizes import likely_sizes, size_lines
from profdsl.config import ProfilerConfig
from profdsl.core._schedule import first_recorded
from profdsl.core._topology import GridLayout
from profdsl.core._units import runs
from profdsl.core.preview import Preview, preview
from profdsl.errors import ConfigError

HELP = (
    "show what a profiler config will capture (steps, ranks, replicas, windows, file names, "
    "likely trace sizes, size warnings)"
)
EXAMPLES = """examples:
  profdsl plan profiler.yaml --world-size 16
  profdsl plan trainer.yaml --section actor.profiler --world-size 64 --replica-world-size 8 --mini-batches 16
  profdsl plan profiler.yaml --world-size 8 --json
  profdsl plan profiler.yaml --world-size 64 --tp 4 --pp 2 --nodes 8    # which ranks `select` picks
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``CONFIG``, ``--world-size`` and the shape of the run."""
    parser.add_argument("config", help="a profiler config file (YAML or JSON)")
    parser.add_argument("--section", help="a dotted key of the block to read, e.g. actor.profiler")
    parser.add_argument("--world-size", type=int, required=True, help="training ranks")
    parser.add_argument("--replica-world-size", type=int, help="GPUs per rollout replica (tp*dp*pp)")
    parser.add_argument("--mini-batches", type=int, default=8, help="update mini-batches per step")
    parser.add_argument("--json", action="store_true", help="print the prediction as JSON")
    layout = parser.add_argument_group(
        "layout",
        "the parallel layout ranks are resolved on (tp varies fastest, then cp, dp, pp; "
        "dp is what the world size leaves; nodes hold consecutive ranks)",
    )
    layout.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    layout.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    layout.add_argument("--cp", type=int, default=1, help="context-parallel degree")
    layout.add_argument("--nodes", type=int, default=1, help="number of nodes")


def spans(values: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0-2, 5``: runs of consecutive values (:func:`~profdsl.core._units.runs`)."""
    return ", ".join(runs(sorted(values))) or "none"


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
        found.append(
            f"{profiled} profiled ranks: that many traces per stage and step; one or two per "
            "parallel group usually suffice"
        )
    if config.rollout.max_iterations == 0:
        found.append("rollout.max_iterations=0: engine traces record until stop (minutes-long flushes)")
    schedule = config.torch.schedule
    if schedule is not None and first_recorded(schedule) > 0:
        found.append(
            f"a stage of fewer than {first_recorded(schedule) + 1} mini-batches records no window under "
            "this schedule (the run says so and records it)"
        )
    if config.discrete and config.torch.schedule is None:
        found.append("no schedule: a scheduled stage's trace holds every mini-batch")
    return found


def run(args: argparse.Namespace) -> int:
    """Print the plan; a bad config or argument exits 2 with the ConfigError message."""
    try:
        config = ProfilerConfig.from_file(args.config, section=args.section)
        layout = None
        if (args.tp, args.pp, args.cp, args.nodes) != (1, 1, 1, 1) or config.select is not None:
            layout = GridLayout(world_size=args.world_size, tp=args.tp, pp=args.pp, cp=args.cp, nodes=args.nodes)
        found = preview(
            config,
            world_size=args.world_size,
            mini_batches=args.mini_batches,
            replica_world_size=args.replica_world_size,
            layout=layout,
        )
    except ConfigError as exc:
        return fail_pointing(str(exc))
    sizes = likely_sizes(config, found) if config.tool == "torch" else []
    if args.json:
        print(json.dumps(dict(found.to_mapping(), trace_sizes=[attrs.asdict(size) for size in sizes]), indent=1))
        return 0
    _print(config, found, args.world_size, args.replica_world_size)
    if config.enable and config.tool == "torch":
        for line in size_lines(config, sizes):
            print(line)
    return 0


def _print(config: ProfilerConfig, found: Preview, world_size: int, width: int | None) -> None:
    mode = "discrete (a trace per stage)" if found.discrete else "continuous (a trace per step)"
    print(f"enabled: {found.enabled}   tool: {found.tool}   mode: {mode}")
    print(f"save_path: {config.save_path}")
    print(f"profiled steps: {spans(found.steps)}   sessions: {list(found.sessions) or 'none'}")
    if found.layout is not None:
        shape = found.layout
        print(
            f"layout: tp={shape['tp']} cp={shape['cp']} dp={shape['dp']} pp={shape['pp']} "
            f"on {shape['nodes']} node(s) of {world_size // shape['nodes']} ranks"
        )
    if config.select is not None:
        print(f"selector: {config.select}")
    print(f"profiled ranks ({len(found.ranks)} of {world_size}): {spans(found.ranks)}")
    if found.layout is not None:
        for rank, coords in zip(found.ranks, found.coords):
            place = " ".join(f"{k}={v}" for k, v in coords.items())
            print(f"  rank {rank}: {place}")
    hook = config.finish_hook
    print(
        f"finish hook: {hook.cmd!r} on ranks {spans(found.hook_ranks)}, after step {found.hook_step}"
        if hook.cmd
        else "finish hook: none"
    )
    if found.replicas is not None and width:
        print(f"rollout replicas of {width} GPUs: {spans(found.replicas)} of {max(world_size // width, 1)}")
    if config.torch.schedule is not None:
        where = (
            "scheduled stages write one trace per window"
            if found.discrete
            else "each step's trace records these mini-batches"
        )
        print(f"over {found.mini_batches} mini-batches, {where}: windows: {list(found.windows)}")
        if not found.windows:
            print(
                f"warning: over {found.mini_batches} mini-batches the schedule records no window: nothing is recorded"
            )
    print(f"example file: {found.example}")
    for warning in warnings_for(config, len(found.ranks)):
        print(f"warning: {warning}")
