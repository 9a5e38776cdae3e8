"""The stage-time model: the one place that turns trace scans into stage times.

Every trace of a role, step and rank adds its region events (:class:`~profdsl.analysis._scan.Piece`)
to one tree: a region inside another on the same thread (by time containment) is its child, so a
stage's path is ``(outer stage, …, stage)`` and a mini-batch sits under the stage it ran in. A
rollout engine's trace is one region, :data:`~profdsl.analysis._regions.ENGINE_STAGE`, over its
span, with any profdsl regions it holds under it. For each path of each (role, step, rank):

- ``total_us``: the sum of its region events' durations, over every trace (a scheduled stage
  written as one trace per recorded window is one stage: its time is the sum over the windows);
- ``self_us``: ``total_us`` less its direct children's totals;
- ``count``: its entries: region events less those that continue an earlier entry (a region
  reopened around a schedule step, a ``yield`` or an ``await``), and at least one when it has any;
- ``interleaved``: some of its regions cross others on their thread (one begins inside another
  and ends after it), which no nesting can hold: entries of concurrent asyncio tasks inside one
  ``with`` block that awaits. Such a region is placed beside the ones it crosses, not under
  them, so the path stays as deep as the code's; its total adds time the entries overlapped, and
  the self time of it and of its parent is not below 0. The always-on metrics time them exactly.

Per (step, role, path) across ranks: :meth:`StageModel.spread` (min / median / max, the slowest
rank: :func:`~profdsl.metrics.aggregate.over_ranks`; the median is its central value).
``profdsl summary``, ``plot``, ``merge`` and the demo's report all read these numbers.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from profdsl.analysis._catalog import Artifact, number
from profdsl.analysis._regions import ENGINE_STAGE
from profdsl.analysis._scan import Piece, TraceScan
from profdsl.metrics._tree import segment
from profdsl.metrics.aggregate import over_ranks

__all__ = ["StageNode", "STEP_ROW", "Span", "StageModel", "StageRow", "StageSpread", "WHOLE_TRACE"]

#: The label of a role's whole step in the step view (:meth:`StageModel.step_spreads`).
STEP_ROW = "(step)"
#: The stage a trace without profdsl metadata (a trace copied by hand) stands for.
WHOLE_TRACE = "whole trace"

Key = tuple[str, "int | None", "int | None"]  # role, step, rank


@attrs.frozen
class StageNode:
    """One stage (a path in the tree) of one role, step and rank, in its traces."""

    role: str
    step: int | None
    rank: int | None
    path: tuple[str, ...]
    count: int
    total_us: float
    self_us: float
    first_us: float  # when its first region began (wall clock, µs): the order stages are shown in
    interleaved: bool = False  # its regions cross others on their thread (see the module docstring)

    @property
    def stage(self) -> str:
        """The stage's own label (the last of its path)."""
        return self.path[-1]

    @property
    def depth(self) -> int:
        """0 for an outermost stage."""
        return len(self.path) - 1

    @property
    def metric_path(self) -> str:
        """The path as the always-on metrics name it (``update_actor/mini_batch``: labels escaped)."""
        return "/".join(map(segment, self.path))


@attrs.frozen
class StageSpread:
    """One stage of one role and step, across the ranks that ran it (its traces' times)."""

    role: str
    step: int | None
    path: tuple[str, ...]
    ranks: int
    count: int
    min_us: float
    median_us: float
    max_us: float
    slowest_rank: int | None
    self_median_us: float
    first_us: float
    interleaved: bool = False

    @property
    def stage(self) -> str:
        """The stage's own label."""
        return self.path[-1]


@attrs.frozen(kw_only=True)
class StageRow:
    """One row of :meth:`StageModel.rows`. Its fields, in this order, are ``summary --json``'s
    keys and ``summary --csv``'s columns (there ``parallel`` is one column per coordinate)."""

    role: str
    stage: str
    path: list[str]
    depth: int
    step: int | None
    rank: int | None
    count: int
    total_ms: float
    self_ms: float
    mean_ms: float
    share: float | None
    ranks: int
    min_ms: float
    median_ms: float
    max_ms: float
    slowest_rank: int | None
    parallel: dict[str, int]
    interleaved: bool


@attrs.frozen
class Span:
    """A region of one trace, in wall-clock microseconds (the timeline's bars): its stage (the
    path joined by ``/`` below the outermost) and how deep it sits (0: outermost)."""

    stage: str
    start_us: float
    end_us: float
    depth: int = 0


class _Acc:
    """Sums for one path of one (role, step, rank)."""

    __slots__ = ("continued", "crossed", "first", "pieces", "self_us", "total_us")

    def __init__(self) -> None:
        self.pieces, self.continued = 0, 0
        self.total_us = self.self_us = 0.0
        self.first = float("inf")
        self.crossed = False

    def add(self, dur_us: float, start_us: float) -> None:
        """One more region event of the path, ``dur_us`` long, beginning at ``start_us``."""
        self.pieces += 1
        self.total_us += dur_us
        self.self_us += dur_us
        self.first = min(self.first, start_us)


def _root(artifact: Artifact, scan: TraceScan) -> str | None:
    """The label of the region over the trace's whole span (None: none): an engine's trace is
    generation, a trace without profdsl regions stands for its stage."""
    if scan.span is None:
        return None
    if artifact.kind == "rollout":
        return ENGINE_STAGE
    return (artifact.stage or WHOLE_TRACE) if not scan.pieces else None


class _Trees:
    """The sums of every path of every (role, step, rank), and every trace's regions, as traces
    are added (see the module docstring)."""

    def __init__(self) -> None:
        self.acc: dict[Key, dict[tuple[str, ...], _Acc]] = defaultdict(dict)
        self.regions: list[tuple[Artifact, list[Span]]] = []
        self.parallel: dict[Key, dict[str, int]] = {}
        self.placed: list[tuple[Artifact, tuple[str, ...], Piece]] = []

    def add(self, artifact: Artifact, scan: TraceScan) -> None:
        key: Key = (artifact.role or "unknown", artifact.step, artifact.rank)
        tree = self.acc[key]
        if artifact.parallel:
            self.parallel.setdefault(key, {}).update(artifact.parallel)
        base_us = scan.base_ns / 1000
        root = _root(artifact, scan)
        every: list[Span] = []
        root_path: tuple[str, ...] = ()
        if root is not None and scan.span is not None:
            start, end = scan.span
            root_path = (root,)
            tree.setdefault(root_path, _Acc()).add(end - start, base_us + start)
            every.append(Span(root, base_us + start, base_us + end))
        used: dict[tuple[str, ...], int] = defaultdict(int)
        stacks: dict[str, list[tuple[float, tuple[str, ...], float]]] = defaultdict(list)
        for piece in sorted(scan.pieces, key=lambda p: (p.tid, p.ts, -p.dur)):
            stack = stacks[piece.tid]
            while stack and stack[-1][0] <= piece.ts:
                stack.pop()
            crossed = _uncross(stack, piece.ts + piece.dur, tree)
            parent = stack[-1][1] if stack else root_path
            path = (*parent, piece.label)
            acc = tree.setdefault(path, _Acc())
            acc.crossed = acc.crossed or crossed
            acc.add(piece.dur, base_us + piece.ts)
            used[path] += 1
            self.placed.append((artifact, path, piece))
            if parent:
                tree[parent].self_us -= piece.dur
            every.append(Span("/".join(path), base_us + piece.ts, base_us + piece.ts + piece.dur, len(path) - 1))
            stack.append((piece.ts + piece.dur, path, piece.dur))
        self._discount(tree, used, scan)
        self.regions.append((artifact, every))

    @staticmethod
    def _discount(tree: dict[tuple[str, ...], _Acc], used: dict[tuple[str, ...], int], scan: TraceScan) -> None:
        """Take the trace's continued pieces off its paths' entries: at the paths the trace
        names, else label by label (a label at several paths gives them up busiest first)."""
        if scan.names.continued_at:
            for path, count in scan.names.continued_at.items():
                if used.get(path):
                    tree[path].continued += min(count, used[path])
            return
        for label, count in scan.names.continued.items():
            for path in sorted((p for p in used if p[-1] == label), key=lambda p: -used[p]):
                taken = min(count, used[path])
                tree[path].continued += taken
                count -= taken
                if not count:
                    break


def _nodes(trees: dict[Key, dict[tuple[str, ...], _Acc]]) -> list[StageNode]:
    nodes = []
    for (role, step, rank), tree in trees.items():
        overlapped = {path[:-1] for path, acc in tree.items() if acc.crossed}
        for path, acc in tree.items():
            self_us = max(acc.self_us, 0.0) if acc.crossed or path in overlapped else acc.self_us
            count = max(acc.pieces - acc.continued, 1)  # every path has a region event
            nodes.append(StageNode(role, step, rank, path, count, acc.total_us, self_us, acc.first, acc.crossed))
    return sorted(nodes, key=lambda n: (n.role, number(n.step), number(n.rank), n.path))


class StageModel:
    """Stage times of a folder's traces (see the module docstring)."""

    def __init__(self, scans: Iterable[tuple[Artifact, TraceScan]], walls: Mapping[Key, float] | None = None) -> None:
        self._walls: dict[Key, float] = dict(walls or {})
        trees = _Trees()
        for artifact, scan in scans:
            trees.add(artifact, scan)
        self._acc, self._regions = trees.acc, trees.regions
        self._parallel, self._placed = trees.parallel, trees.placed
        self.nodes: list[StageNode] = _nodes(self._acc)

    # -- reading ----------------------------------------------------------------------------
    def parallel(self, role: str, step: int | None, rank: int | None) -> dict[str, int]:
        """The parallel coordinates (``tp``, ``pp``, ``dp``, ``cp``, ``ep``) the traces of a role's
        step on a rank carry; empty when they carry none."""
        return dict(self._parallel.get((role, step, rank), {}))

    def step_total_us(self, role: str, step: int | None, rank: int | None) -> float:
        """A role's time at a step on a rank: the sum of its outermost stages."""
        tree = self._acc.get((role, step, rank), {})
        return sum(acc.total_us for path, acc in tree.items() if len(path) == 1)

    def wall_us(self, role: str, step: int | None, rank: int | None) -> float | None:
        """A role's step wall time on a rank (µs, from the metrics log); None when not logged."""
        return self._walls.get((role, step, rank))

    def step_time_us(self, role: str, step: int | None, rank: int | None) -> float:
        """What a share is a part of: the role's step wall time on the rank where the metrics
        log has it, else the sum of its outermost stages."""
        wall = self.wall_us(role, step, rank)
        return self.step_total_us(role, step, rank) if wall is None else wall

    def step_spreads(self) -> dict[tuple[int | None, str], StageSpread]:
        """Each role's whole step, across the ranks whose metrics log has its wall time:
        ``(step)``, its wall time as its total and the time outside any of its stages as its
        self time (never below 0)."""
        groups: dict[tuple[int | None, str], list[tuple[int | None, float, float]]] = defaultdict(list)
        for role, step, rank in self.keys():
            wall = self.wall_us(role, step, rank)
            if wall is not None:
                groups[(step, role)].append((rank, wall, max(wall - self.step_total_us(role, step, rank), 0.0)))
        result = {}
        for (step, role), items in groups.items():
            f = over_ranks((rank, wall) for rank, wall, _ in items)
            self_us = statistics.median(o for _, _, o in items)
            result[(step, role)] = StageSpread(
                role, step, (STEP_ROW,), f.ranks, f.ranks, f.least, f.median, f.most, f.slowest, self_us, 0.0
            )
        return result

    def spread(self) -> list[StageSpread]:
        """Each (step, role, path) across its ranks, steps in order, then roles and stages in
        the order they first ran."""
        groups: dict[tuple[str, int | None, tuple[str, ...]], list[StageNode]] = defaultdict(list)
        for node in self.nodes:
            groups[(node.role, node.step, node.path)].append(node)
        result = []
        for (role, step, path), nodes in groups.items():
            f = over_ranks((n.rank, n.total_us) for n in nodes)
            result.append(
                StageSpread(
                    role,
                    step,
                    path,
                    f.ranks,
                    sum(n.count for n in nodes),
                    f.least,
                    f.median,
                    f.most,
                    f.slowest,
                    statistics.median(n.self_us for n in nodes),
                    min(n.first_us for n in nodes),
                    any(n.interleaved for n in nodes),
                )
            )
        return _tree_order(result)

    def spans(self) -> list[tuple[Artifact, list[Span]]]:
        """The outermost regions of every trace, per artifact (the timeline): :meth:`regions` 1 deep."""
        return self.regions(1)

    def regions(self, depth: int) -> list[tuple[Artifact, list[Span]]]:
        """Every region of every trace less than ``depth`` deep (1: the outermost, as
        :meth:`spans`), per artifact, in the order they were nested."""
        return [(artifact, [span for span in spans if span.depth < depth]) for artifact, spans in self._regions]

    def paths(self, key: Key) -> dict[tuple[str, ...], tuple[float, float]]:
        """Every stage path of one (role, step, rank) → (total µs, self µs)."""
        return {path: (acc.total_us, acc.self_us) for path, acc in self._acc.get(key, {}).items()}

    def placed(self) -> list[tuple[Artifact, tuple[str, ...], Piece]]:
        """Every region event with the path it sits at, per artifact, in the order they were
        nested (what ``profdsl export --hta`` marks iterations by)."""
        return list(self._placed)

    def interleaved(self) -> set[str]:
        """The labels of stages whose regions cross others on their thread somewhere (see the
        module docstring): their totals add overlapping time."""
        return {node.stage for node in self.nodes if node.interleaved}

    def keys(self) -> list[Key]:
        """Every (role, step, rank) with stage time."""
        return sorted(self._acc, key=lambda k: (k[0], number(k[1]), number(k[2])))

    def rows(self) -> list[dict[str, Any]]:
        """One JSON-friendly row per node (``summary --json``: a :class:`StageRow`'s fields, in
        order): the node, its share of its role's stage time at the step on its rank (the sum of
        its outermost stages; None when that is 0; ``summary --by`` measures against the step's
        wall time instead, :meth:`step_time_us`), and its stage's spread across ranks at that step."""
        spreads = {(s.role, s.step, s.path): s for s in self.spread()}
        result = []
        for node in self.nodes:
            spread = spreads[(node.role, node.step, node.path)]
            total = self.step_total_us(node.role, node.step, node.rank)
            row = StageRow(
                role=node.role,
                stage=node.stage,
                path=list(node.path),
                depth=node.depth,
                step=node.step,
                rank=node.rank,
                count=node.count,
                total_ms=_ms(node.total_us),
                self_ms=_ms(node.self_us),
                mean_ms=_ms(node.total_us / node.count),
                share=round(node.total_us / total, 6) if total else None,
                ranks=spread.ranks,
                min_ms=_ms(spread.min_us),
                median_ms=_ms(spread.median_us),
                max_ms=_ms(spread.max_us),
                slowest_rank=spread.slowest_rank,
                parallel=self.parallel(node.role, node.step, node.rank),
                interleaved=node.interleaved,
            )
            result.append(attrs.asdict(row, recurse=False))
        return result


def _uncross(stack: list[tuple[float, tuple[str, ...], float]], end: float, tree: dict[tuple[str, ...], _Acc]) -> bool:
    """Take off ``stack`` the open regions that a region ending at ``end`` crosses (it began
    inside them and ends after them), marking their paths; whether there were any."""
    crossed = False
    while stack and stack[-1][0] < end:
        tree[stack.pop()[1]].crossed = crossed = True
    return crossed


def _ms(us: float) -> float:
    """Microseconds as milliseconds, to the nanosecond (what every view prints)."""
    return round(us / 1000, 6)


def _tree_order(spreads: Sequence[StageSpread]) -> list[StageSpread]:
    """Steps in order; in a step, roles by when they first ran; under each stage its children,
    by when they first ran (a depth-first walk)."""
    children: dict[tuple[int | None, str, tuple[str, ...]], list[StageSpread]] = defaultdict(list)
    first_of_role: dict[tuple[int | None, str], float] = {}
    for spread in spreads:
        children[(spread.step, spread.role, spread.path[:-1])].append(spread)
        key = (spread.step, spread.role)
        first_of_role[key] = min(first_of_role.get(key, spread.first_us), spread.first_us)
    ordered: list[StageSpread] = []

    def walk(step: int | None, role: str, prefix: tuple[str, ...]) -> None:
        for child in sorted(children.get((step, role, prefix), ()), key=lambda s: (s.first_us, s.path)):
            ordered.append(child)
            walk(step, role, child.path)

    for step, role in sorted(first_of_role, key=lambda k: (number(k[0]), first_of_role[k], k[1])):
        walk(step, role, ())
    return ordered
