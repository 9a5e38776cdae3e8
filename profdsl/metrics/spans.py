"""The open stage entries of each context, for nesting: a stack per thread and per asyncio task.

A span is a tuple ``(key, node, below, start)`` (plus the device start event when the step has
device timing): the DSL object entered (None for a decorated call), the :class:`Node` it adds its
time to, the span it is nested in, and ``time.perf_counter()`` at entry. The stack is an immutable
linked list in a ``ContextVar``: a task copies its creator's context and must not share a mutable
stack with it. The DSL's metrics-only path (``profdsl.dsl.base``) opens and closes spans inline,
with the same rules as :func:`enter` and :func:`leave`.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from profdsl.metrics.tree import Node, child

__all__ = ["ACCESS", "SPANS", "Access", "Metered", "Span", "close", "enter", "leave", "live", "nest",
           "remove"]

Span = tuple[Any, ...]

#: The current context's innermost open span.
SPANS: ContextVar[Span | None] = ContextVar("profdsl_spans", default=None)

clock = time.perf_counter  # monotonic (CLOCK_MONOTONIC on Linux); a float, cheaper than _ns


def access() -> Access:
    """The process's :data:`ACCESS` (what a pickled one becomes on the other side)."""
    return ACCESS


class Access:
    """The stack's accessors for the DSL's inlined path, held by decorated functions: pickled
    by reference (Ray ships functions defined in ``__main__`` by value, and a ``ContextVar`` or
    its bound methods cannot be pickled)."""

    __slots__ = ("clock", "get", "set")

    def __init__(self) -> None:
        self.get, self.set, self.clock = SPANS.get, SPANS.set, clock

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (access, ())


#: The accessors of :data:`SPANS` (immutable).
ACCESS = Access()


def live(span: Span | None) -> Span | None:
    """``span``, or the first span below it whose step has not ended."""
    while span is not None and span[1].closed:
        span = span[2]
    return span


def nest(below: Span | None, root: Node) -> Node:
    """The node an entry of ``root``'s tree nests in: the innermost open span's node of that
    tree (an entry of another role in between is skipped), else the root."""
    span = below
    while span is not None:
        node = span[1]
        if node.root is root and not node.closed:
            return node  # type: ignore[no-any-return]
        span = span[2]
    return root


def enter(key: object, name: str, parent: Node) -> Span:
    """Open a span of ``name`` nested in ``parent`` and make it the context's innermost."""
    node = parent.children.get(name) or child(parent, name)
    device = node.root.device
    below = live(SPANS.get())  # spans of an ended step left here are dropped
    span: Span
    if device is None:
        span = (key, node, below, clock())
    else:
        mark = device.mark()
        span = (key, node, below, clock(), mark)
    SPANS.set(span)
    return span


def leave(key: object) -> None:
    """Close the innermost span of ``key`` in this context and add its time to its node; nothing
    when this context holds none (it was entered elsewhere, or before the step began)."""
    end = clock()
    span = SPANS.get()
    if span is not None and span[0] is key:
        SPANS.set(span[2])
    else:
        span = remove(key, span)
        if span is None:
            return
    close(span, end)


def close(span: Span, end: float) -> None:
    """Add a span's time to its node (the span is already off the stack)."""
    node = span[1]
    node.total += end - span[3]
    node.count += 1
    if len(span) > 4:
        device = node.root.device
        device.add(node, span[4], device.mark())


def remove(key: object, top: Span | None) -> Span | None:
    """Take the innermost span of ``key`` out of the middle of the stack (entries closed out of
    order, as interleaved generators do): the spans above it are rebuilt without it."""
    above: list[Span] = []
    span = top
    while span is not None:
        if span[0] is key:
            rest = span[2]
            for kept in reversed(above):
                rest = (kept[0], kept[1], rest, *kept[3:])
            SPANS.set(rest)
            return span
        above.append(span)
        span = span[2]
    return None


class Metered:
    """A span opened and closed in slices (a generator's body runs between its yields): the
    node gets one entry whose time is the sum of the slices. Open when made."""

    __slots__ = ("below", "mark", "node", "opened", "start", "total")

    def __init__(self, node: Node) -> None:
        self.node, self.total, self.opened = node, 0.0, False
        self.below: Span | None = None
        self.start = 0.0
        self.mark: Any = None
        self.resume()

    def resume(self) -> None:
        if not self.opened:
            self.opened = True
            device = self.node.root.device
            self.mark = None if device is None else device.mark()
            self.below = live(SPANS.get())
            self.start = clock()
            SPANS.set((None, self.node, self.below, self.start))

    def suspend(self) -> None:
        if self.opened:
            end = clock()
            self.opened = False
            SPANS.set(self.below)
            self.total += end - self.start
            device = self.node.root.device
            if device is not None:
                device.add(self.node, self.mark, device.mark())

    def close(self) -> None:
        """The body is done: one entry of the slices' total."""
        self.suspend()
        self.node.total += self.total
        self.node.count += 1
