"""NCCL's collectives in a GPU run's trace, for the culprit analysis
(:mod:`profdsl.analysis._collectives`, ``docs/ledger.md``).

Each collective is a kernel on the communicator's stream (category ``kernel``,
``ncclDevKernel_<Op>_...`` since NCCL 2.19, ``ncclKernel_<Op>_...`` before): it starts when the
stream reaches it and waits there for its peers until the collective ends, so its duration is the
rank's wait. Its process group and sequence number (``Process Group Name``, ``Seq``: torch's
``saveNcclMeta``) are read from the kernel's own args, else from the ``record_param_comms`` CPU
event that ``ProcessGroupNCCL`` records around each collective's call, the one running on the
launching thread when the kernel was launched (the ``cuda_runtime`` event with the kernel's
``correlation``).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COMMS", "NCCL_KERNELS", "Kernel", "NcclEvents", "group_key", "op_name"]

#: NCCL's kernels (category ``kernel``), by name prefix.
NCCL_KERNELS = ("ncclDevKernel_", "ncclKernel_")
#: torch's CPU event around a collective's call, whose args say its process group and sequence number.
COMMS = "record_param_comms"

Key = tuple[str, int]  # process group name, sequence number
Comms = tuple[float, float, Key]  # a record_param_comms event: ts, end (µs), its key
#: One NCCL kernel: its op (``nccl:AllReduce``), start and duration (µs, the trace's ``ts``), key
#: (None: the trace does not say), and the ts of its launch (else its own).
Kernel = tuple[str, float, float, "Key | None", float]


def group_key(args: Mapping[str, Any]) -> Key | None:
    """A collective's process group and sequence number, where its event's args say them."""
    group, seq = args.get("Process Group Name"), args.get("Seq")
    try:
        return (str(group), int(seq)) if group is not None and seq is not None else None
    except (TypeError, ValueError):
        return None


def op_name(kernel: str) -> str:
    """``nccl:AllReduce`` for ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` or
    ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``."""
    return "nccl:" + kernel.partition("_")[2].split("(")[0].split("_")[0]


class NcclEvents:
    """Fed a trace's complete events one by one (:meth:`feed`), keeps what it needs of NCCL's
    kernels, their launches and ``record_param_comms`` events (a few numbers each), and gives
    the kernels (:meth:`kernels`)."""

    def __init__(self) -> None:
        self._kernels: list[tuple[str, float, float, Any, Key | None]] = []  # name, ts, dur, correlation, key
        self._launches: dict[Any, tuple[Any, Any, float]] = {}  # correlation: pid, tid, ts
        self._comms: dict[tuple[Any, Any], list[Comms]] = defaultdict(list)  # by thread

    def feed(self, name: str, event: Mapping[str, Any]) -> None:
        category, args = event.get("cat"), event.get("args")
        args = args if isinstance(args, Mapping) else {}
        ts, dur = float(event.get("ts", 0)), float(event.get("dur", 0))
        if category == "kernel" and name.startswith(NCCL_KERNELS):
            self._kernels.append((name, ts, dur, args.get("correlation"), group_key(args)))
        elif category == "cuda_runtime" and "correlation" in args:
            self._launches[args["correlation"]] = (event.get("pid"), event.get("tid"), ts)
        elif name == COMMS and (key := group_key(args)) is not None:
            self._comms[(event.get("pid"), event.get("tid"))].append((ts, ts + dur, key))

    def kernels(self) -> list[Kernel]:
        for thread in self._comms.values():
            thread.sort(key=lambda c: c[0])
        found = []
        for name, ts, dur, correlation, key in self._kernels:
            launch = self._launches.get(correlation)
            if key is None and launch is not None:
                key = _enclosing(self._comms.get((launch[0], launch[1]), ()), launch[2])
            found.append((op_name(name), ts, dur, key, ts if launch is None else launch[2]))
        return found


def _enclosing(comms: Sequence[Comms], ts: float) -> Key | None:
    """The key of the innermost of one thread's ``comms`` (sorted by start) running at ``ts``:
    of the last few that began before it, the latest that ends after it."""
    before = bisect.bisect_right(comms, ts, key=lambda c: c[0])
    return next((c[2] for c in reversed(comms[max(0, before - 8) : before]) if ts <= c[1]), None)
