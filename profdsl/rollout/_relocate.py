"""Which engine trace files of a replica move into ``save_path``, under which names (pure): what
becomes of each kind of file is docs/rollout.md's "What an engine writes, and what becomes of it".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.collect._relocate import Move, Skip
from profdsl.core._engine_names import STRAY_MARK, is_op_table, is_vllm_frontend
from profdsl.core._naming import ENGINE_TRACE_EXTS, TraceName
from profdsl.core._ranks import local_rank_from_trace_name

__all__ = ["OP_TABLE_EXT", "engine_extension", "plan_rollout"]

#: What a vLLM op table (``.profiler_out.txt``) is named with in save_path.
OP_TABLE_EXT = ".profiler-out.txt"
_KNOWN_EXTENSIONS = (*ENGINE_TRACE_EXTS, ".pickle", ".txt")
_PIECE = re.compile(r"\.[A-Za-z0-9][A-Za-z0-9-]{0,15}")
_PREFIX = re.compile(r"step(\d+)-replica(\d+)(?![0-9])")


def engine_extension(name: str) -> str:
    """The extension to keep for an engine file: a known trace extension, else its last suffix.

    Examples:
        >>> engine_extension("p_rank1.1732870000.pt.trace.json.gz")
        '.pt.trace.json.gz'
        >>> engine_extension("x-TP-0-memory.pickle")
        '.pickle'
        >>> engine_extension("step2-replica0_rank0.profiler_out.txt")
        '.profiler-out.txt'
    """
    if is_op_table(name):
        return OP_TABLE_EXT
    for extension in _KNOWN_EXTENSIONS:
        if name.endswith(extension):
            return extension
    dot = name.rfind(".")
    suffix = name[dot:] if dot > 0 else ""
    return suffix if _PIECE.fullmatch(suffix) else ".bin"


def _local_rank(name: str, replica_world_size: int) -> int | None:
    ours = TraceName.try_parse(name)  # written by profdsl's own torch sampler
    if ours is not None:
        return ours.rank if ours.rank is not None and ours.rank < replica_world_size else None
    return local_rank_from_trace_name(name, replica_world_size)


def plan_rollout(
    names: Iterable[str],
    *,
    source_dir: str,
    replica: int,
    replica_world_size: int,
    keep: Collection[int] | None,
    step: int | None,
    world_size: int | None,
    host: str,
    pid: int,
    time_ms: int,
    node: str | None = None,
) -> list[Move | Skip]:
    """Plan the moves of one replica's files (a listing of ``source_dir``).

    A file whose rank can be told moves as global rank ``replica * W + local`` unless ``keep``
    (the selected global ranks; None keeps all) leaves it out; then it stays where the engine
    wrote it. A file whose rank cannot be told always moves, with rank None.
    """
    plan: list[Move | Skip] = []
    for name in sorted(names):
        if name == MANIFEST_NAME or name.startswith("."):
            continue
        source = f"{source_dir.rstrip('/')}/{name}"
        stray = name.startswith(STRAY_MARK)
        base = name[len(STRAY_MARK) :] if stray else name
        prefixed = _PREFIX.match(base)  # a file left over from an earlier step keeps its step
        file_step = int(prefixed[1]) if prefixed and int(prefixed[2]) == replica else step
        fields: dict[str, Any] = dict(role="rollout", step=file_step, replica=replica, host=host, pid=pid)
        if node is not None:
            fields.update(node=node)
        if is_vllm_frontend(base):
            # Recorded when it is new: this step's (by its prefix), or of no known step.
            new = prefixed is None or file_step == step
            plan.append(
                Skip(
                    source,
                    "vLLM's front-end (AsyncLLM) profile, not an engine trace: left where vLLM wrote it",
                    kind="rollout",
                    status="skipped" if new else None,
                    fields=fields,
                )
            )
            continue
        local = _local_rank(base, replica_world_size)
        rank = None if local is None else replica * replica_world_size + local
        if keep is not None and rank is not None and rank not in keep:
            plan.append(Skip(source, f"global rank {rank} is not selected", kind="rollout"))
            continue
        fields.update(rank=rank, world_size=world_size)
        if stray:
            fields.update(
                status="stray",
                reason="written by an engine profile that outlived its rollout window: not this step's generation",
            )
        trace = TraceName(
            role="rollout",
            step=file_step,
            rank=rank,
            world_size=world_size if rank is not None else None,
            replica=replica,
            host=host,
            pid=pid,
            time_ms=time_ms,
            ext=engine_extension(base),
        )
        plan.append(Move(source, trace, "rollout", fields))
    return plan
