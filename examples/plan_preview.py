"""Preview what a profiler config will capture, before a run (CPU only, no torch needed).

    python examples/plan_preview.py                       # the built-in example config
    python examples/plan_preview.py my_profiler.yaml 16   # your config, world size 16

Prints which steps open and close a trace, which ranks are profiled and which run the finish
hook, which mini-batch windows a scheduled update stage writes, and example trace file names.
"""

from __future__ import annotations

import socket
import sys
import time

from profdsl import FinishHook, ProfilerConfig, Schedule, TorchOptions
from profdsl.core.preview import preview
from profdsl.naming import TraceName
from profdsl.schedule import action_at

EXAMPLE = ProfilerConfig(
    enable=True,
    steps=[2, 3, 6],
    ranks=[0, 4],
    discrete=True,
    torch=TorchOptions(contents=["cpu", "cuda"], schedule=Schedule(skip_first=1, wait=1, warmup=1, active=2)),
    finish_hook=FinishHook(cmd='tar czf profiles.tgz -C "$PROFDSL_SAVE_PATH" .', ranks=[0]),
)


def main(argv: list[str]) -> int:
    config = ProfilerConfig.from_file(argv[0]) if argv else EXAMPLE
    world_size = int(argv[1]) if len(argv) > 1 else 8
    mini_batches = 10

    plan = preview(config, world_size=world_size, mini_batches=mini_batches)
    print(f"enabled: {config.enable}   tool: {config.tool}   mode: {'discrete' if config.discrete else 'continuous'}")
    print(f"sessions (open step, close step): {list(plan.sessions)}")
    print(f"profiled ranks of {world_size}: {list(plan.ranks)}")
    print(f"finish hook: {config.finish_hook.cmd!r} on ranks {list(plan.hook_ranks)}, after step {plan.hook_step}")

    schedule = config.torch.schedule
    if schedule is not None:
        print(f"\nschedule {schedule} over {mini_batches} mini-batches:")
        print("  " + " ".join(f"{i:>2}" for i in range(mini_batches)))
        print("  " + " ".join(f"{action_at(schedule, i).name[:2]:>2}" for i in range(mini_batches)))
        print(f"  trace files (mini-batch windows): {list(plan.windows)}")

    print("\nexample trace names:")
    now = int(time.time() * 1000)
    host = socket.gethostname()
    windows: list[tuple[int, int] | None] = list(plan.windows) if schedule else [None]
    for step in plan.steps[:1]:
        for rank in plan.ranks[:2]:
            for window in windows[:2]:
                name = TraceName(
                    role="actor",
                    stage="update_actor",
                    step=step,
                    rank=rank,
                    world_size=world_size,
                    window=window,
                    host=host,
                    pid=12345,
                    time_ms=now,
                )
                print("  " + name.format())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
