"""One rank of a real gloo process group on CPU, for tests/test_collectives.py.

``python collective_worker.py RANK WORLD STORE OUT LATE DELAY_S STEPS``: joins the group through
the file ``STORE`` and profiles every step ``0 .. STEPS-1`` of role ``actor`` into ``OUT`` (every
rank traced, the metrics log on). Each step: a barrier, then the stage ``update_actor``, in which
rank ``LATE`` sleeps ``DELAY_S`` seconds on steps 3, 4 and 5 before an ``all_reduce``.
"""

from __future__ import annotations

import sys
import time

#: The steps on which the late rank sleeps before its all_reduce.
LATE_STEPS = (3, 4, 5)


def main() -> None:
    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    late, delay, steps = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    import torch
    import torch.distributed as dist

    from profdsl import Metrics, Profiler, ProfilerConfig, TorchOptions, profile_stage

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        tensor = torch.ones(256)
        dist.all_reduce(tensor)  # the group's connections are made here, before any step is traced
        dist.barrier()
        config = ProfilerConfig(
            enable=True,
            steps=list(range(steps)),
            all_ranks=True,
            save_path=out,
            torch=TorchOptions(contents=["cpu"]),
            metrics=Metrics(enabled=True, log=True),
        )
        with Profiler(config, role="actor", rank=rank, world_size=world) as profiler:
            for step in range(steps):
                with profiler.step(step):
                    dist.barrier()
                    with profile_stage("update_actor"):
                        if rank == late and step in LATE_STEPS:
                            time.sleep(delay)
                        dist.all_reduce(tensor)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
