"""Every timed step's ledger, from the always-on metrics (``docs/ledger.md``): the step's wall
time split into buckets that add up to it, by :func:`profdsl.core._ledger.split` (the same split
as a traced step's).

What the split needs comes from the step's tree (:mod:`profdsl.metrics._tree`): the stretches of
time of its top-level entries (a role's outermost stages, on any thread or task; at most
:data:`~profdsl.metrics._tree.MAX_SPANS` per step), each of its stage's kind, and where
profiling held the step up (``placed``: a discrete stage's capture start and stop, a scheduled
stage's schedule steps between its mini-batches, a rollout engine's profiler start and stop),
which the split carves out of whatever stage ran then, and ``waited``, the seconds of waits
known only by their length. An entry still open when the step ends is not in the step's timings,
and its time is not in any stage's bucket.

With device time on CUDA (``Metrics(device_time=True)``), the same split runs on the device's
timeline (:func:`device_split`): the top-level entries' CUDA events, from the first entry's to
the last exit's, split per kind of work and ``outside`` (device time no stage's work spans).

Examples:
    >>> from profdsl.metrics._tree import Paths, Root, child
    >>> root = Root("actor", 1, Paths(8))
    >>> gen, update = child(root, "generate"), child(root, "step", kind="update")
    >>> root.stretches += [10.0, 10.5, gen, 10.25, 10.75, update]
    >>> ledger = step_ledger(root, began=10.0, wall_s=1.0)
    >>> {k: v for k, v in ledger.buckets_s.items() if v}, ledger.concurrent_s
    ({'generation': 0.25, 'update': 0.5, 'outside': 0.25}, 0.25)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from profdsl.core import _intervals as intervals
from profdsl.core._kinds import kind_of
from profdsl.core._ledger import OVERHEAD, Stage, split
from profdsl.metrics import _tree as tree
from profdsl.metrics._tree import Node, Paths, Root

__all__ = ["StepLedger", "device_split", "kind_for", "step_ledger"]

#: The most intervals a step's ledger places in time (``StepLedger.spans_s``); beyond, the step
#: has its buckets but is not placed beside other ranks and roles.
MAX_PLACED = 256
#: Why a step has no ledger from metrics: more top-level entries than a step keeps.
DROPPED = (
    "{count} stretches of outermost stage entries, more than the {limit} a step keeps for its ledger: "
    "this step has no ledger from metrics"
)


@attrs.frozen
class StepLedger:
    """One step's ledger, what :class:`~profdsl.metrics._timings.StepTimings` says of its step
    (its docstring says what each holds): ``buckets_s`` (its ``ledger``, to the nanosecond; None
    and ``why``), ``beside_s`` and ``concurrent_s``, ``spans_s`` (its ``ledger_spans``: None
    beyond :data:`MAX_PLACED` intervals in all), ``engines_s``, ``waits_s`` (the placed waits'
    union and those known only by their length) and ``device_s`` (:func:`device_split`); and
    the recorded profiling waits that exceeded the time outside every stage
    (``overhead_unplaced_s``: left in the stages' time)."""

    buckets_s: Mapping[str, float] | None
    beside_s: Mapping[str, float] = attrs.field(factory=dict)
    overhead_unplaced_s: float = 0.0
    why: str | None = None
    spans_s: Mapping[str, tuple[tuple[float, float], ...]] | None = None
    engines_s: float = 0.0
    device_s: Mapping[str, float] | None = None
    waits_s: float = 0.0

    @property
    def concurrent_s(self) -> float:
        """Stage time that ran beside the stage its instant went to, in all."""
        return sum(self.beside_s.values())


def kind_for(paths: Paths, node: Node) -> str:
    """``node``'s kind of work: its declared kind, else by its name (remembered per role)."""
    key = (node.name, node.kind)
    kind = paths.kinds.get(key)
    if kind is None:
        kind = paths.kinds[key] = kind_of(node.name, node.kind)
    return kind


def step_ledger(
    root: Root, *, began: float, wall_s: float, device: list[tuple[Node, float, float]] | None = None
) -> StepLedger:
    """The ledger of the closed step ``root``, which began at ``began`` (on the metrics clock)
    and lasted ``wall_s``: in integer nanoseconds from its beginning, so that the buckets add up
    to ``round(wall_s * 1e9)`` exactly. ``device``: where its top-level entries ran on the
    device (:class:`~profdsl.metrics._device.StepDevice`'s ``placed``), for its device split."""
    if root.dropped:
        count = len(root.stretches) // 3 + root.dropped
        return StepLedger(None, why=DROPPED.format(count=count, limit=tree.MAX_SPANS))
    paths = root.paths
    kept: list[Any] = root.stretches  # flat: start, end, node, ...
    stages = [
        Stage(round((start - began) * 1e9), round((end - began) * 1e9), kind_for(paths, node))
        for start, end, node in zip(kept[::3], kept[1::3], kept[2::3])
    ]
    wall = round(wall_s * 1e9)
    held = root.placed
    waits = [(round((a - began) * 1e9), round((b - began) * 1e9)) for a, b in zip(held[::2], held[1::2])]
    ledger = split(0, wall, stages, round(root.waited * 1e9), waits)
    return StepLedger(
        {bucket: ns / 1e9 for bucket, ns in ledger.buckets.items()},
        {kind: ns / 1e9 for kind, ns in ledger.beside.items()},
        ledger.overhead_unplaced / 1e9,
        spans_s=_placed(stages, wall),
        engines_s=root.engines,
        device_s=None if device is None else device_split(paths, device),
        waits_s=(ledger.buckets[OVERHEAD] + ledger.overhead_unplaced) / 1e9,
    )


def device_split(paths: Paths, placed: list[tuple[Node, float, float]]) -> dict[str, float] | None:
    """The device span of a step's top-level entries (``(node, start, end)`` seconds on the
    device's timeline, after any common origin), from the first one's start to the last one's
    end, split by :func:`~profdsl.core._ledger.split`: seconds per kind of work (one instant,
    one stage, as the wall time's), and ``outside``: the device time in the span no stage's
    work spans. They add up to the span, in integer nanoseconds. None: no entry.

    Examples:
        >>> from profdsl.metrics._tree import Root, child
        >>> root = Root("actor", 1, Paths(8))
        >>> gen, update = child(root, "generate"), child(root, "update_actor")
        >>> split_s = device_split(root.paths, [(gen, 0.0, 0.5), (update, 0.75, 1.0)])
        >>> {k: v for k, v in split_s.items() if v}
        {'generation': 0.5, 'update': 0.25, 'outside': 0.25}
    """
    if not placed:
        return None
    stages = []
    for node, start_s, end_s in placed:
        start = round(start_s * 1e9)
        stages.append(Stage(start, max(start, round(end_s * 1e9)), kind_for(paths, node)))
    ledger = split(min(s.start for s in stages), max(s.end for s in stages), stages)
    return {bucket: ns / 1e9 for bucket, ns in ledger.buckets.items() if bucket != OVERHEAD}


def _placed(stages: list[Stage], wall: int) -> dict[str, tuple[tuple[float, float], ...]] | None:
    """Per kind, the union of its stages' time inside ``[0, wall)`` (seconds); None beyond
    :data:`MAX_PLACED` intervals in all."""
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for stage in stages:
        by_kind.setdefault(stage.kind, []).append((max(stage.start, 0), min(stage.end, wall)))
    placed = {kind: intervals.union(spans) for kind, spans in by_kind.items()}
    if sum(map(len, placed.values())) > MAX_PLACED:
        return None
    return {kind: tuple((a / 1e9, b / 1e9) for a, b in spans) for kind, spans in placed.items() if spans}
