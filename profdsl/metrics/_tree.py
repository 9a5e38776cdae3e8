"""A role's stage timings in one step: a tree of stage paths.

Each profiled entry (``profile_stage``, ``mini_batch_window``, ``rollout_window``) adds its wall
time to the :class:`Node` of its path: its name under the node of the entry it is nested in. A
:class:`Root` is one step of one role; its children are the top-level stages. A new root is made
for every step, so a node's timings belong to exactly one step, and a node of an ended step
(``closed``) is never nested under again.

Entries of one step may end on several threads at once. A read-modify-write such as ``total +=
seconds`` is not atomic (a thread switch, or another core on free-threaded Python, may fall
between the read and the write), and taking a lock at every entry's end was the largest single
cost of a timed entry; so an ended entry only appends its seconds to its node's ``ended``
(:meth:`Node.add`: ``list.append`` is atomic, with the GIL and without), and :meth:`Node.fold`
moves them into ``total`` and ``count`` under the step's lock, taking out only the items it
counted (``del ended[:n]``: one appended meanwhile stays for the next fold): when ``ended``
holds :data:`FOLD_AT` items, and for every node when the step ends (:func:`close`; the step's
timings read ``total`` and ``count`` after it). An entry that ends once its step has ended
(``closed``) is not counted; one that ends while the step ends may be counted or not. Finding a
child is one ``dict.get``; creating one (:func:`child`) takes the role's lock, since it also
checks the role's cap on distinct paths. Both locks are re-entrant, as every lock a signal handler
can meet (``docs/architecture.md``): a handler runs between two bytecodes of the main thread, which
may hold them, and its entries make nodes and fold as any; a fold never runs inside another fold of
its step on one thread (``folding``), which may be of the same node (it would count its items twice).

For the step ledger (``docs/ledger.md``), the entries of the top-level stages (the root's
children: a role's outermost stages on each thread or task) also leave their stretches of time,
``start, end, node`` on the metrics clock, in the step's ``stretches`` (flat: three items per
stretch, no object made for it; added with one ``+=`` of a tuple, which is atomic, so stretches
of two threads never mix): at most :data:`MAX_SPANS` per step, further ones are counted
(``dropped``: like an entry's seconds, each is one item appended to the step's ``unkept``, folded
into ``dropped`` under the lock) and the step gets no ledger. Without a lock, two threads may
both find room for the last stretch: :func:`close` keeps the first ``room`` items and counts the
others dropped, in a list of its own (a stretch added by an entry that ends as the step ends
goes to the old one).
Nested entries leave none: their time is their outermost stage's.

Profiling's own waits inside the step (a stage capture's start and stop, a scheduled stage's
schedule step between its mini-batches, a rollout engine's profiler start and stop) are rare (a
few per step), so each takes the step's lock, placed where it happened (:meth:`Root.wait_at`:
``start, end`` on :data:`clock`, in the step's ``placed``, at most :data:`MAX_WAITS`; one beyond
is counted in ``waits_dropped`` and kept as a duration, in ``waited``). None is kept once the step
has ended.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from profdsl.metrics._device import DeviceTimes

__all__ = [
    "FOLD_AT",
    "MAX_SPANS",
    "MAX_WAITS",
    "OVERFLOW",
    "Node",
    "Paths",
    "Root",
    "Stretches",
    "child",
    "clock",
    "close",
    "drop",
    "segment",
    "stretch",
]

#: The metrics' clock: monotonic (CLOCK_MONOTONIC on Linux), in seconds, cheaper than ``_ns``.
clock = time.perf_counter

#: The name of the node that counts the entries of stage paths beyond the cap.
OVERFLOW = "(overflow)"
#: The most stretches of top-level entries one step keeps for its ledger (about 100 bytes each).
MAX_SPANS = 4096
#: The most profiling waits one step keeps placed in time (two floats each); further ones are
#: kept as durations (``Root.waited``) and counted (``Root.waits_dropped``).
MAX_WAITS = 1024
#: How many ended entries' seconds a node holds (``Node.ended``) before it folds them into its sums.
FOLD_AT = 64

#: A step's stretches of top-level entries, flat: ``[start, end, node, start, end, node, ...]``
#: (start and end on :data:`clock`).
Stretches = list["float | Node"]


def segment(name: str) -> str:
    """A stage name as one segment of a path: ``%`` and ``/`` escaped, so that a name holding a
    ``/`` cannot pass for a nested stage."""
    if "/" in name or "%" in name:
        return name.replace("%", "%25").replace("/", "%2F")
    return name


class Node:
    """One stage path's entries in one step: ``total`` seconds and ``count`` (once folded: see
    the module docstring), ``ended``: the seconds of entries ended since the last fold; ``kind``:
    the kind of work its first entry declared (None: by its name); ``spans``: its step's
    stretches of top-level entries, when it is a top-level stage (else None: its entries leave
    none)."""

    __slots__ = (
        "children",
        "closed",
        "count",
        "ended",
        "kind",
        "name",
        "path",
        "reported",
        "root",
        "spans",
        "total",
    )

    def __init__(self, name: str, path: str, root: Root | None, reported: bool = True, kind: str | None = None) -> None:
        self.name, self.path, self.reported, self.kind = name, path, reported, kind
        self.root: Root = self if root is None else root  # type: ignore[assignment]
        self.children: dict[str, Node] = {}
        self.total = 0.0
        self.count = 0
        self.ended: list[float] = []
        self.closed = False
        self.spans: Stretches | None = None

    def add(self, seconds: float) -> None:
        """One entry of ``seconds`` ended; not counted once the step has ended. No lock."""
        if not self.closed:
            ended = self.ended
            ended.append(seconds)
            if len(ended) >= FOLD_AT:
                self.fold()

    def fold(self) -> None:
        """Move the seconds of the entries ended so far into ``total`` and ``count`` (dropped
        once the step has ended). Not inside another fold of the step on this thread (a signal
        handler's entry ending while the main thread folds: the step's lock is re-entrant, and
        the fold it interrupted may be this node's): its seconds wait for the next fold."""
        _alone(self.root, self.fold_locked)

    def fold_locked(self) -> None:
        """:meth:`fold`, with the step's lock held: the first ``n`` items, then just those taken
        out."""
        ended = self.ended
        n = len(ended)
        if not self.closed:
            self.total = sum(ended[:n], self.total)
            self.count += n
        del ended[:n]

    def walk(self) -> list[Node]:
        """This node's descendants, depth first, in the order they were first entered."""
        out: list[Node] = []
        stack = list(reversed(list(self.children.values())))
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(list(node.children.values())))
        return out


class Paths:
    """The distinct stage paths one role has seen, across its steps: at most ``limit``; names in
    ``stages`` (or every name, when empty) are reported."""

    __slots__ = ("kinds", "limit", "lock", "seen", "stages")

    def __init__(self, limit: int, stages: frozenset[str] = frozenset()) -> None:
        self.limit, self.stages = limit, stages
        self.seen: set[str] = set()
        self.lock = threading.RLock()  # re-entrant: a signal handler may enter a stage
        self.kinds: dict[tuple[str, str | None], str] = {}  # (name, declared) -> kind, for the ledger

    def admit(self, path: str) -> bool:
        """Whether ``path`` may have a node (seen before, or room for one more)."""
        with self.lock:
            if path in self.seen:
                return True
            if len(self.seen) >= self.limit:
                return False
            self.seen.add(path)
            return True

    def reported(self, name: str, path: str) -> bool:
        return not self.stages or name in self.stages or path in self.stages


class Root(Node):
    """One step of one role: the top of its tree, what the registry lists while the step runs.

    For its ledger: ``stretches`` (its top-level entries', :data:`Stretches`; ``spans`` of its
    top-level nodes is this list), ``room`` (the most items it holds: three per stretch, for
    :data:`MAX_SPANS` as it was when the step began), ``dropped`` (those beyond; ``unkept``: one
    item for each found since the last fold). Profiling's waits inside the step: ``placed``
    (where each was: ``[start, end, start, end, ...]`` on :data:`clock`, at most
    ``wait_room`` items), ``waited`` (seconds of those known only by their length, and of those
    beyond the room: ``waits_dropped`` of them), of all of which ``engines`` the rollout
    engines'.
    Entries of top-level paths beyond the cap go to ``overflow_top``, nested ones to ``overflow``."""

    __slots__ = (
        "device",
        "dropped",
        "engines",
        "folding",
        "lock",
        "overflow",
        "overflow_top",
        "paths",
        "placed",
        "role",
        "room",
        "step",
        "stretches",
        "unkept",
        "wait_room",
        "waited",
        "waits_dropped",
    )

    def __init__(self, role: str, step: int, paths: Paths, device: DeviceTimes[Node] | None = None) -> None:
        self.lock = threading.RLock()  # every node's total and count (Node.add); re-entrant (see the module)
        self.folding = False  # a fold is running under the lock (one re-entering it waits for the next)
        super().__init__("", "", None)
        self.role, self.step, self.paths, self.device = role, step, paths, device
        self.stretches: Stretches = []
        self.room = 3 * MAX_SPANS
        self.dropped = 0
        self.unkept: list[None] = []
        self.waited = 0.0
        self.engines = 0.0
        self.placed: list[float] = []
        self.wait_room = 2 * MAX_WAITS
        self.waits_dropped = 0
        self.overflow = Node(OVERFLOW, OVERFLOW, self, reported=False)
        self.overflow_top = Node(OVERFLOW, OVERFLOW, self, reported=False)
        self.overflow_top.spans = self.stretches

    def wait_at(self, start: float, end: float, engines: bool = False) -> None:
        """Profiling held the step up from ``start`` to ``end`` (:data:`clock`), placed there:
        the ledger charges that time to ``overhead`` whatever stage ran then (``engines``: a
        rollout engine's profiler start or stop). Beyond the room, kept as a duration."""
        with self.lock:
            if not self.closed:
                if len(self.placed) < self.wait_room:
                    self.placed += (start, end)
                else:
                    self.waits_dropped += 1
                    self.waited += end - start
                if engines:
                    self.engines += end - start


def stretch(node: Node, start: float, end: float) -> None:
    """A top-level entry of ``node`` ran ``[start, end)`` (call while the step is open; no lock):
    kept for the ledger, or counted beyond :data:`MAX_SPANS`."""
    spans = node.spans
    if spans is not None:
        root = node.root
        if len(spans) < root.room:
            spans += (start, end, node)  # (one `+=`: atomic)
        else:
            unkept = root.unkept
            unkept.append(None)
            if len(unkept) >= FOLD_AT:
                drop(root)


def _alone(root: Root, fold: Callable[[], None]) -> None:
    """Run ``fold`` under ``root``'s lock, unless another fold of the step runs on this thread
    (a signal handler's entry ending inside it: the lock is re-entrant), which takes its items."""
    with root.lock:
        if not root.folding:
            root.folding = True
            try:
                fold()
            finally:
                root.folding = False


def drop(root: Root) -> None:
    """Fold the stretches of ``root``'s step that found no room (``unkept``) into ``dropped``
    (not once the step has ended; not inside another fold on this thread, as :meth:`Node.fold`)."""
    _alone(root, lambda: drop_locked(root))


def drop_locked(root: Root) -> None:
    """:func:`drop`, with the step's lock held."""
    unkept = root.unkept
    n = len(unkept)
    if not root.closed:
        root.dropped += n
    del unkept[:n]


def child(parent: Node, name: str, kind: str | None = None) -> Node:
    """The node of ``name`` nested in ``parent``, made on first use (of ``kind``: its first
    entry's declared kind); an overflow node when the role's cap on distinct paths is reached
    (entries nested in it count as overflow too)."""
    root = parent.root
    if parent is root.overflow or parent is root.overflow_top:
        return root.overflow
    node = parent.children.get(name)
    if node is not None:
        return node
    part = segment(name)
    top = parent is root
    path = part if top else f"{parent.path}/{part}"
    if not root.paths.admit(path):
        return root.overflow_top if top else root.overflow
    made = Node(name, path, root, root.paths.reported(name, path), kind)
    if top:
        made.spans = root.stretches
    with root.lock:  # against the step's end walking the tree (and two threads making it: one wins)
        made.closed = parent.closed
        return parent.children.setdefault(name, made)


def close(root: Root) -> list[Node]:
    """End the step: every node's entries folded, no entry is counted or nests under its nodes
    any more, its stretches kept within its room (in a list of their own). Returns its nodes,
    depth first. A fold too (``folding``): an entry ending inside it on this thread (a signal
    handler's) does not fold the node it is folding."""
    with root.lock:
        folding, root.folding = root.folding, True
        try:
            nodes = root.walk()
            drop_locked(root)
            for node in (root, *nodes, root.overflow, root.overflow_top):
                node.fold_locked()
                node.closed = True
        finally:
            root.folding = folding
        stretches, room = root.stretches, root.room
        root.stretches = stretches[:room]
        root.dropped += max(0, len(stretches) - room) // 3
    return nodes
