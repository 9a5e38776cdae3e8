"""What rollout engine file names say (vLLM, SGLang): the engine-local rank, and which files
are not worker traces (vLLM's front-end profile, its op tables).

The rank conventions are described in ``profdsl.ranks.local_rank_from_trace_name``, the public
entry point; this module only holds the patterns, so that a new engine version means one new
reader. vLLM's op table (``<worker>.profiler_out.txt``) carries its worker's rank too.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["AMBIGUOUS", "STRAY_MARK", "Ambiguous", "is_op_table", "is_vllm_frontend", "read_engine_rank"]

# Torch-exported trace tail: ".<time>.pt.trace.json" with optional gzip.
_PT_TAIL: Final = r"\.[0-9]+\.pt\.trace\.json(?:\.gz)?"

# vLLM: "[prefix_][dp.._pp.._tp.._dcp.._ep.._]rank<r>.<ns>.pt.trace.json[.gz]", and the per-worker
# op table written beside it when a profile stops (on CPU always): "<worker name>.profiler_out.txt",
# the worker name being the trace's "[prefix_][...]rank<r>". The rank must be a whole "_"-separated
# token right before the tail, so host names cannot pose as it.
_VLLM_TABLE_TAIL: Final = r"\.profiler_out\.txt"
_VLLM = re.compile(rf"(?:(?P<head>.*)_)?rank(?P<rank>[0-9]+)(?:{_PT_TAIL}|{_VLLM_TABLE_TAIL})", re.ASCII | re.DOTALL)
# vLLM's parallel-state block, when it ends the part before "_rank<r>".
_VLLM_PARALLEL = re.compile(r"(?:^|_)dp(?P<dp>[0-9]+)_pp[0-9]+_tp[0-9]+_dcp[0-9]+_ep[0-9]+\Z", re.ASCII | re.DOTALL)
# vLLM's front end (AsyncLLM's own CPU profiler, in the process that holds the AsyncLLM):
# "[prefix_]<host>_<pid>.async_llm" then a trace tail or the op-table tail. Not an engine worker.
_VLLM_FRONTEND = re.compile(rf".*\.async_llm(?:{_PT_TAIL}|{_VLLM_TABLE_TAIL})", re.ASCII | re.DOTALL)

#: How a file begins that profdsl's SGLang handle set aside as stray (written by a profile that
#: outlived its rollout window); see ``profdsl.rollout.sglang``.
STRAY_MARK: Final = "stray-"

# Older instance convention: "<instance>-rank-<k>.<ts>.pt.trace.json[.gz]".
_INSTANCE = re.compile(rf".+-rank-(?P<rank>[0-9]+){_PT_TAIL}", re.ASCII | re.DOTALL)

# SGLang: "...-TP-<tp>[-DP-<d>][-PP-<p>][-EP-<e>][-<stage>].trace.json.gz", and memory snapshots
# "...-TP-<tp>[...]-memory[-<stage>].pickle".
_SGLANG = re.compile(
    r".+-TP-(?P<tp>[0-9]+)(?P<dims>(?:-(?:DP|PP|EP)-[0-9]+)*)"
    r"(?:(?:-[A-Za-z]+)?\.trace\.json(?:\.gz)?|-memory(?:-[A-Za-z]+)?\.pickle)",
    re.ASCII | re.DOTALL,
)


class Ambiguous:
    """Marker: the name follows a known convention but does not fix the rank inside the replica."""


AMBIGUOUS: Final = Ambiguous()


def _basename(name: str) -> str:
    """Return the last path component, accepting both ``/`` and ``\\`` separators."""
    return re.split(r"[/\\]", name)[-1]


def _read_vllm(base: str) -> int | Ambiguous | None:
    """Read a vLLM worker's trace or op-table name; None when it is not one. A parallel-state
    block with dp > 0 before ``_rank<r>`` leaves the rank inside the replica untold."""
    match = _VLLM.fullmatch(base)
    if match is None:
        return None
    block = _VLLM_PARALLEL.search(match["head"] or "")
    return AMBIGUOUS if block is not None and int(block["dp"]) > 0 else int(match["rank"])


def is_vllm_frontend(name: str) -> bool:
    """Whether ``name`` is a file of vLLM's front-end profiler (AsyncLLM's own CPU trace or its
    op table), not of an engine worker.

    Examples:
        >>> is_vllm_frontend("step2-replica0_vm_77.async_llm.1796144497971256567.pt.trace.json.gz")
        True
        >>> is_vllm_frontend("step2-replica0_rank0.1796144497971256567.pt.trace.json.gz")
        False
    """
    return _VLLM_FRONTEND.fullmatch(_basename(name)) is not None


def is_op_table(name: str) -> bool:
    """Whether ``name`` is a vLLM op table (``<worker>.profiler_out.txt``).

    Examples:
        >>> is_op_table("step2-replica0_rank0.profiler_out.txt"), is_op_table("x.txt")
        (True, False)
    """
    return _basename(name).endswith(".profiler_out.txt")


def _read_instance(base: str) -> int | None:
    """Read an ``<instance>-rank-<k>`` trace name; None when it is not one."""
    match = _INSTANCE.fullmatch(base)
    return None if match is None else int(match["rank"])


def _read_sglang(base: str) -> int | Ambiguous | None:
    """Read an SGLang trace or memory-snapshot name; None when it is not one."""
    match = _SGLANG.fullmatch(base)
    if match is None:
        return None
    if match["dims"]:
        return AMBIGUOUS
    return int(match["tp"])


def read_engine_rank(name: str) -> int | Ambiguous | None:
    """The rank an engine trace file name carries: an int, AMBIGUOUS, or None (no convention).

    Only the base name is read (``/`` and ``\\`` both separate folders).
    """
    base = _basename(name)
    for reader in (_read_vllm, _read_instance, _read_sglang):
        value = reader(base)
        if value is not None:
            return value
    return None
