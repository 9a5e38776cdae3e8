"""Finding this process's parallel coordinates: explicit values, else Megatron's
``parallel_state`` when it is initialised, else a torch ``DeviceMesh`` with named dimensions.

Nothing is imported to look: Megatron is consulted only when the program already imported
``megatron.core.parallel_state``, torch only when it imported ``torch.distributed``. A mesh is
found as the active one (``with mesh:``), else through the process groups a named mesh creates
(torch names them ``mesh_<dim>``; this process's group of each dimension gives its coordinate and
the dimension's size). Any failure of those libraries means "not found", logged once: discovery
never raises; explicit values are validated (``ConfigError``).

Mesh dimension names are read as ``tp``, ``pp``, ``dp``, ``cp``, ``ep`` (also spelled
``tensor``, ``pipeline``, ``data``, ``context``, ``expert``); without a ``dp`` dimension,
``dp_replicate`` and ``dp_shard`` make one (replicate-major, as torch flattens them). Other names
are ignored.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any, Final

from profdsl.config._checks import is_int
from profdsl.config._parallel import DIMS, MAX_COORD, Parallel
from profdsl.config.selector import FirstPerNode, Selector
from profdsl.core._discovery import discover_local_rank
from profdsl.core._log import once
from profdsl.core._topology import Topology
from profdsl.errors import ConfigError

__all__ = ["from_device_mesh", "from_megatron", "process_topology", "resolve_parallel"]

_ALIASES: Final = {"tensor": "tp", "pipeline": "pp", "data": "dp", "context": "cp", "expert": "ep"}
_MEGATRON: Final = "megatron.core.parallel_state"
#: Megatron's accessors, per dimension: (rank, world size).
_MEGATRON_DIMS: Final = {
    "tp": ("get_tensor_model_parallel_rank", "get_tensor_model_parallel_world_size"),
    "pp": ("get_pipeline_model_parallel_rank", "get_pipeline_model_parallel_world_size"),
    "dp": ("get_data_parallel_rank", "get_data_parallel_world_size"),
    "cp": ("get_context_parallel_rank", "get_context_parallel_world_size"),
    "ep": ("get_expert_model_parallel_rank", "get_expert_model_parallel_world_size"),
}


def _fits(coord: object, size: object) -> bool:
    return is_int(coord) and is_int(size) and 0 <= coord < size <= MAX_COORD + 1


def _build(found: Mapping[str, tuple[int, int]]) -> Parallel:
    fields: dict[str, int] = {}
    for dim, (coord, size) in found.items():
        fields[dim], fields[f"{dim}_size"] = coord, size
    return Parallel(**fields)


def _named(pairs: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Mesh dimensions by profdsl's names (aliases read, ``dp_replicate`` x ``dp_shard`` → dp)."""
    found: dict[str, tuple[int, int]] = {}
    for name, pair in pairs.items():
        dim = _ALIASES.get(name, name)
        if dim in DIMS and _fits(*pair):
            found[dim] = pair
    if "dp" not in found and {"dp_replicate", "dp_shard"} <= pairs.keys():
        (rc, rs), (sc, ss) = pairs["dp_replicate"], pairs["dp_shard"]
        if _fits(rc * ss + sc, rs * ss):
            found["dp"] = (rc * ss + sc, rs * ss)
    return {d: found[d] for d in DIMS if d in found}


def from_device_mesh(mesh: Any) -> Parallel:
    """The coordinates a ``DeviceMesh`` with named dimensions gives this process.

    Raises:
        ConfigError: the mesh has no dimension names, or this process is not part of it.
    """
    names = getattr(mesh, "mesh_dim_names", None)
    if not names:
        raise ConfigError(
            "parallel: a DeviceMesh without mesh_dim_names gives no coordinates; "
            "create it with mesh_dim_names=('dp', 'tp', ...)"
        )
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ConfigError(f"parallel: this process is not part of the DeviceMesh {names}")
    shape = tuple(mesh.shape)
    return _build(_named({name: (int(c), int(s)) for name, c, s in zip(names, coordinate, shape)}))


def from_megatron() -> Parallel | None:
    """The coordinates of Megatron's ``parallel_state``, if the program imported it and it is
    initialised; None otherwise (Megatron is never imported here)."""
    state = sys.modules.get(_MEGATRON)
    if state is None:
        return None
    try:
        if not state.model_parallel_is_initialized():
            return None
        found = {}
        for dim, (rank_of, size_of) in _MEGATRON_DIMS.items():
            rank_fn, size_fn = getattr(state, rank_of, None), getattr(state, size_of, None)
            if rank_fn is not None and size_fn is not None:
                pair = (rank_fn(), size_fn())
                if _fits(*pair) and not (dim in ("cp", "ep") and pair[1] == 1):  # unused: no noise
                    found[dim] = pair
    except Exception as exc:
        once(
            "parallel-megatron",
            logging.WARNING,
            "profdsl: reading Megatron's parallel_state failed (%r): no coordinates from it",
            exc,
        )
        return None
    return _build(found) if found else None


def _mesh_groups() -> dict[str, tuple[int, int]]:
    """This process's groups of named meshes (``mesh_<dim>``): ``{dim: (rank in it, size)}``; a
    dimension whose groups disagree (two meshes) is left out."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    world = getattr(c10d, "_world", None)
    groups = getattr(world, "pg_map", None)
    if not groups:
        return {}
    found: dict[str, tuple[int, int]] = {}
    clash: set[str] = set()
    for group in list(groups):
        desc = getattr(group, "group_desc", "")
        if not isinstance(desc, str) or not desc.startswith("mesh_") or desc == "mesh_default":
            continue
        name = desc[len("mesh_") :]
        pair = (group.rank(), group.size())
        if found.setdefault(name, pair) != pair:
            clash.add(name)
    return {name: pair for name, pair in found.items() if name not in clash}


def _from_mesh() -> Parallel | None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        # The active mesh (``with mesh:``) is the last of torch's stack.
        module = sys.modules.get("torch.distributed.device_mesh")
        stack = getattr(getattr(module, "_mesh_resources", None), "mesh_stack", None)
        if stack and getattr(stack[-1], "mesh_dim_names", None):
            return from_device_mesh(stack[-1])
        found = _named(_mesh_groups())
    except Exception as exc:
        once(
            "parallel-mesh", logging.WARNING, "profdsl: reading the DeviceMesh failed (%r): no coordinates from it", exc
        )
        return None
    return _build(found) if found else None


def resolve_parallel(value: object) -> Parallel:
    """``Profiler(parallel=...)``: a :class:`Parallel`, a mapping (``{"tp": 1, "dp": 3}``), a
    ``DeviceMesh`` with named dimensions, or None (discover: Megatron's coordinates, else a
    named DeviceMesh's, else none).

    Raises:
        ConfigError: anything else, or invalid values (the message names them).
    """
    if value is None:
        return from_megatron() or _from_mesh() or Parallel()
    if isinstance(value, Parallel):
        return value
    if isinstance(value, Mapping):
        return Parallel.from_mapping(value, where="Profiler parallel")
    if hasattr(value, "mesh_dim_names") and hasattr(value, "get_coordinate"):
        return from_device_mesh(value)
    raise ConfigError(
        "Profiler parallel must be a dict such as {'tp': 1, 'pp': 0, 'dp': 3}, a "
        f"profdsl.Parallel or a DeviceMesh with named dimensions, got {value!r}"
    )


def process_topology(rank: int, world_size: int, parallel: object, select: Selector | None) -> Topology:
    """This process's :class:`Topology`: its rank, world size, coordinates and, when the parsed
    selector ``select`` needs it (``first_per_node``), ``LOCAL_RANK`` (read only then: an
    environment variable is read only when its value is needed)."""
    needs_node = select is not None and any(isinstance(term, FirstPerNode) for term in select.terms)
    return Topology(
        rank=rank,
        world_size=world_size,
        local_rank=discover_local_rank() if needs_node else None,
        parallel=resolve_parallel(parallel),
    )
