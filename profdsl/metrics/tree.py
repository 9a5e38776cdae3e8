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
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profdsl.metrics.device import DeviceTimes

__all__ = ["OVERFLOW", "Node", "Paths", "Root", "child", "clock", "close", "segment"]

#: The metrics' clock: monotonic (CLOCK_MONOTONIC on Linux), in seconds, cheaper than ``_ns``.
clock = time.perf_counter

#: The name of the node that counts the entries of stage paths beyond the cap.
OVERFLOW = "(overflow)"


def segment(name: str) -> str:
    """A stage name as one segment of a path: ``%`` and ``/`` escaped, so that a name holding a
    ``/`` cannot pass for a nested stage."""
    if "/" in name or "%" in name:
        return name.replace("%", "%25").replace("/", "%2F")
    return name


class Node:
    """One stage path's entries in one step: ``total`` seconds and ``count``."""

    __slots__ = ("children", "closed", "count", "name", "path", "reported", "root", "total")

    def __init__(self, name: str, path: str, root: Root | None, reported: bool = True) -> None:
        self.name, self.path, self.reported = name, path, reported
        self.root: Root = self if root is None else root  # type: ignore[assignment]
        self.children: dict[str, Node] = {}
        self.total = 0.0
        self.count = 0
        self.closed = False

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

    __slots__ = ("limit", "lock", "seen", "stages")

    def __init__(self, limit: int, stages: frozenset[str] = frozenset()) -> None:
        self.limit, self.stages = limit, stages
        self.seen: set[str] = set()
        self.lock = threading.Lock()

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
    """One step of one role: the top of its tree, what the registry lists while the step runs."""

    __slots__ = ("device", "lock", "overflow", "paths", "role", "step")

    def __init__(self, role: str, step: int, paths: Paths, device: DeviceTimes | None = None) -> None:
        self.lock = threading.Lock()  # every node's total and count (Node.add)
        super().__init__("", "", None)
        self.role, self.step, self.paths, self.device = role, step, paths, device
        self.overflow = Node(OVERFLOW, OVERFLOW, self, reported=False)


def child(parent: Node, name: str) -> Node:
    """The node of ``name`` nested in ``parent``, made on first use; the overflow node when the
    role's cap on distinct paths is reached (entries nested in it count as overflow too)."""
    root = parent.root
    if parent is root.overflow:
        return parent
    node = parent.children.get(name)
    if node is not None:
        return node
    part = segment(name)
    path = part if parent is root else f"{parent.path}/{part}"
    if not root.paths.admit(path):
        return root.overflow
    made = Node(name, path, root, root.paths.reported(name, path))
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
        root.overflow.closed = True
    return nodes
