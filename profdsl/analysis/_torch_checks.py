"""torch's own trace validation (``torch.profiler._trace_validator``, torch >= 2.13), run by
``profdsl check`` over the events it already streams.

torch's ``validate_trace(path)`` loads the whole trace with ``json.load`` (about 4.6 times the
file's size in memory: docs/performance.md, "The trace reader"). Its rules only look at a few
kinds of events (CUDA runtime and driver calls, kernels, stream syncs, NCCL collectives, backward
ops), so profdsl keeps just those while it streams the trace and hands them to the same rules.
A trace with more than :data:`MAX_KEPT` such events is not validated (its memory would be the
problem torch's loader has). Without torch, or with a torch that has no validator, nothing is
checked. torch is imported only when a trace holds an event the rules read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from profdsl.core._log import described

__all__ = ["MAX_KEPT", "keep_all", "violations"]

#: The most events kept for torch's rules from one trace.
MAX_KEPT = 500_000
#: How many violations of one trace are named (the rest are counted).
SHOWN = 5
_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "kernel", "cuda_sync"})
_BACKWARD = "autograd::engine::evaluate_function:"


def _wanted(event: Mapping[str, Any]) -> bool:
    """Whether one of torch's rules reads ``event`` (a well-formed one: its ``name`` a string)."""
    args = event.get("args")
    return event.get("ph") == "X" and (
        event.get("cat") in _CATEGORIES
        or event.get("name") == "record_param_comms"
        or _BACKWARD in event.get("name", "")
        or (isinstance(args, Mapping) and "cuda_sync_kind" in args)
    )


def _rules() -> list[Any]:
    try:
        from torch.profiler import _trace_validator
    except ImportError:  # no torch, or torch < 2.13
        return []
    rules = getattr(_trace_validator, "_RULES", None)
    return list(rules) if isinstance(rules, (list, tuple)) else []


def violations(kept: list[dict[str, Any]]) -> list[str]:
    """What torch's rules say of the kept events (:func:`keep_all`): one line per violation (at
    most :data:`SHOWN`, then how many more), or nothing."""
    if not kept:
        return []
    found: list[str] = []
    for rule in _rules():
        try:
            found += [str(v) for v in rule(kept)]
        except Exception as exc:  # a rule that cannot read these events: said, not a crash
            found.append(f"{getattr(rule, '__name__', 'rule')}: could not be applied ({described(exc)})")
    if len(found) > SHOWN:
        found = [*found[:SHOWN], f"and {len(found) - SHOWN} more"]
    return found


def keep_all(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events torch's rules read of a trace's ``events`` (:func:`~profdsl.analysis._reader.events`),
    read to the end (the reader names a malformed event there); none when there are more than :data:`MAX_KEPT`."""
    kept: list[dict[str, Any]] = []
    count = 0
    for event in events:
        if _wanted(event):
            count += 1
            if count <= MAX_KEPT:
                kept.append(dict(event))
    return kept if count <= MAX_KEPT else []
