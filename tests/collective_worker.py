"""One rank of a real gloo process group on CPU, for tests/test_collectives.py and
tests/test_collectives_ray.py.

``python collective_worker.py RANK WORLD STORE OUT LATE DELAY_S STEPS``: joins the group through
the file ``STORE`` and profiles every step ``0 .. STEPS-1`` of role ``actor`` into ``OUT`` (every
rank traced, the metrics log on). Each step: a barrier, then the stage ``update_actor``, in which
rank ``LATE`` sleeps ``DELAY_S`` seconds on steps 3, 4 and 5 before an ``all_reduce``.

:class:`GlooRank` is the same rank as a Ray actor (a ``ProfiledWorker`` the driver's
``RayStepProfiler`` starts and stops each step), with the same step body.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from profdsl import Metrics, ProfilerConfig, TorchOptions, profile_stage
from profdsl.ray import ProfiledWorker

#: The steps on which the late rank sleeps before its all_reduce.
LATE_STEPS = (3, 4, 5)


def join(rank: int, world: int, store: str) -> Any:
    """Join the gloo group through the file ``store``; its connections are made here, before any
    step is traced. Returns the tensor the steps all-reduce."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    tensor = torch.ones(256)
    dist.all_reduce(tensor)
    dist.barrier()
    return tensor


def step_body(
    rank: int, step: int, late: int, delay: float, tensor: Any, late_steps: tuple[int, ...] = LATE_STEPS
) -> None:
    """One step's work: a barrier, then ``update_actor``, the late rank sleeping on ``late_steps``."""
    import torch.distributed as dist

    dist.barrier()
    with profile_stage("update_actor"):
        if rank == late and step in late_steps:
            time.sleep(delay)
        dist.all_reduce(tensor)


def traced_config(out: str, steps: int | list[int], **kwargs: Any) -> ProfilerConfig:
    """Every step (or the ``steps`` listed) of every rank traced (CPU), the metrics log on."""
    return ProfilerConfig(
        enable=True,
        steps=list(range(steps)) if isinstance(steps, int) else steps,
        all_ranks=True,
        save_path=out,
        torch=TorchOptions(contents=["cpu"]),
        metrics=Metrics(enabled=True, log=True),
        **kwargs,
    )


class GlooRank(ProfiledWorker):
    """One rank of the group as a Ray actor: ``join``, then ``update(step)`` inside the driver's
    steps (late on ``late_steps``), then ``leave``."""

    def __init__(
        self,
        config: ProfilerConfig,
        rank: int,
        world: int,
        store: str,
        late: int,
        delay: float,
        late_steps: tuple[int, ...] = LATE_STEPS,
    ) -> None:
        self.init_profiler(config, role="actor", rank=rank, world_size=world)
        self.rank, self.world, self.store, self.late, self.delay = rank, world, store, late, delay
        self.late_steps = late_steps
        self.tensor: Any = None

    def join(self) -> int:
        self.tensor = join(self.rank, self.world, self.store)
        return self.rank

    def update(self, step: int) -> int:
        step_body(self.rank, step, self.late, self.delay, self.tensor, self.late_steps)
        return step

    def leave(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()


def main() -> None:
    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    late, delay, steps = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    import torch.distributed as dist

    from profdsl import Profiler

    tensor = join(rank, world, store)
    try:
        with Profiler(traced_config(out, steps), role="actor", rank=rank, world_size=world) as profiler:
            for step in range(steps):
                with profiler.step(step):
                    step_body(rank, step, late, delay, tensor)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
