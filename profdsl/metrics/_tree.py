"""A role's stage timings in one step: a tree of stage paths.

Each profiled entry (``profile_stage``, ``mini_batch_window``, ``rollout_window``) adds its wall
time to the :class:`Node` of its path: its name under the node of the entry it is nested in. A
:class:`Root` is one step of one role; its children are the top-level stages. A new root is made
for every step, so a node's timings belong to exactly one step, and a node of an ended step
(``closed``) is never nested under again.

Entries of one step may end on several threads at once, so a node's ``total`` and ``count`` are
changed only by :meth:`Node.add`, under its step's lock (a read-modify-write such as ``total +=
seconds`` is not atomic: a thread switch, or another core on free-threaded Python, may fall
between the read and the write). Finding a child is one ``dict.get``; creating one
(:func:`child`) takes the role's lock, since it also checks the role's cap on distinct paths.

For the step ledger (``docs/ledger.md``), the entries of the top-level stages (the root's
children: a role's outermost stages on each thread or task) also leave their stretches of time,
``start, end, node`` on the metrics clock, in the step's ``stretches`` (flat: three items per
stretch, no object made for it): at most :data:`MAX_SPANS` per step, further ones are counted
(``dropped``) and the step gets no ledger.
Nested entries leave none: their time is their outermost stage's.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profdsl.metrics._device import DeviceTimes

__all__ = [
    "MAX_SPANS",
    "OVERFLOW",
    "Node",
    "Paths",
    "Root",
    "Stretches",
    "child",
    "clock",
    "close",
    "segment",
    "stretch",
]

#: The metrics' clock: monotonic (CLOCK_MONOTONIC on Linux), in seconds, cheaper than ``_ns``.
clock = time.perf_counter

#: The name of the node that counts the entries of stage paths beyond the cap.
OVERFLOW = "(overflow)"
#: The most stretches of top-level entries one step keeps for its ledger (about 100 bytes each).
MAX_SPANS = 4096

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
    """One stage path's entries in one step: ``total`` seconds and ``count``; ``kind``: the kind
    of work its first entry declared (None: by its name); ``spans``: its step's stretches of
    top-level entries, when it is a top-level stage (else None: its entries leave none)."""

    __slots__ = ("children", "closed", "count", "kind", "name", "path", "reported", "root", "spans", "total")

    def __init__(self, name: str, path: str, root: Root | None, reported: bool = True, kind: str | None = None) -> None:
        self.name, self.path, self.reported, self.kind = name, path, reported, kind
        self.root: Root = self if root is None else root  # type: ignore[assignment]
        self.children: dict[str, Node] = {}
        self.total = 0.0
        self.count = 0
        self.closed = False
        self.spans: Stretches | None = None

    def add(self, seconds: float) -> None:
        """One entry of ``seconds`` ended; nothing once the step has ended (it is not counted)."""
        lock = self.root.lock
        lock.acquire()  # (no `with`: a third cheaper, and nothing between can raise)
        if not self.closed:
            self.total += seconds
            self.count += 1
        lock.release()

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
        self.lock = threading.Lock()
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
    :data:`MAX_SPANS` as it was when the step began), ``dropped`` (those beyond), ``waited``
    (seconds profiling held the step up: a discrete stage's capture start and stop, a rollout
    engine's profiler start and stop), of which ``engines`` the rollout engines'.
    Entries of top-level paths beyond the cap go to ``overflow_top``, nested ones to ``overflow``."""

    __slots__ = (
        "device",
        "dropped",
        "engines",
        "lock",
        "overflow",
        "overflow_top",
        "paths",
        "role",
        "room",
        "step",
        "stretches",
        "waited",
    )

    def __init__(self, role: str, step: int, paths: Paths, device: DeviceTimes[Node] | None = None) -> None:
        self.lock = threading.Lock()  # every node's total and count (Node.add)
        super().__init__("", "", None)
        self.role, self.step, self.paths, self.device = role, step, paths, device
        self.stretches: Stretches = []
        self.room = 3 * MAX_SPANS
        self.dropped = 0
        self.waited = 0.0
        self.engines = 0.0
        self.overflow = Node(OVERFLOW, OVERFLOW, self, reported=False)
        self.overflow_top = Node(OVERFLOW, OVERFLOW, self, reported=False)
        self.overflow_top.spans = self.stretches

    def wait(self, seconds: float, engines: bool = False) -> None:
        """Profiling held the step up ``seconds`` (a capture's start or stop; ``engines``: a
        rollout engine's profiler start or stop), not in any stage."""
        with self.lock:
            if not self.closed:
                self.waited += seconds
                if engines:
                    self.engines += seconds


def stretch(node: Node, start: float, end: float) -> None:
    """A top-level entry of ``node`` ran ``[start, end)`` (call with its step's lock held, while
    the step is open): kept for the ledger, or counted beyond :data:`MAX_SPANS`."""
    spans = node.spans
    if spans is not None:
        if len(spans) < node.root.room:
            spans += (start, end, node)
        else:
            node.root.dropped += 1


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
    """End the step: no entry nests under its nodes any more. Returns its nodes, depth first."""
    with root.lock:
        nodes = root.walk()
        root.closed = True
        for node in nodes:
            node.closed = True
        root.overflow.closed = root.overflow_top.closed = True
    return nodes
