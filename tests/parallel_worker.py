"""One rank of a real gloo process group on CPU, for tests/test_parallel.py.

``python parallel_worker.py MODE RANK WORLD STORE OUT``: joins the group through the file
``STORE``, lays it out as pp=2 x dp=1 x tp=2 (MODE ``mesh``: a named DeviceMesh; ``megatron``:
Megatron's parallel_state), then profiles one step with several roles, each into
``OUT/<role>``, and writes what it found to ``OUT/rank<RANK>.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


def main() -> None:
    mode, rank, world, store, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        mesh = None
        if mode == "mesh":
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("pp", "dp", "tp"))
        else:
            from megatron.core import parallel_state

            parallel_state.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
        from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage

        roles = [("actor", "tp == 0 and pp == last", None), ("critic", "first_per_node", None), ("ref", None, None)]
        if mesh is not None:
            roles.append(("explicit", "one_per_dp_group", mesh))
        found = {}
        for role, select, parallel in roles:
            config = ProfilerConfig(
                enable=True,
                steps=[1],
                save_path=os.path.join(out, role),
                torch=TorchOptions(contents=["cpu"]),
                select=select,
                all_ranks=select is None,
            )
            active = mesh if role == "ref" and mesh is not None else contextlib.nullcontext()
            with active, Profiler(config, role=role, parallel=parallel) as profiler:
                found[role] = {
                    "selected": profiler.selected,
                    "coords": profiler.topology.parallel.coords(),
                    "sizes": profiler.topology.parallel.sizes(),
                    "local_rank": profiler.topology.local_rank,
                }
                with profiler.step(1), profile_stage("work"):
                    torch.ones(4).mul(2).sum()
        found["megatron_imported"] = any(name.split(".")[0] == "megatron" for name in sys.modules)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
            json.dump(found, file)
        dist.barrier()
    finally:
        if mode == "megatron":
            from megatron.core import parallel_state

            parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
