"""Per-context stacks of open DSL entries: each thread and each asyncio task has its own.

A ``with profile_stage(...)`` object may be shared (a module-level constant) and entered from
several threads or tasks at once, so what one entry opened cannot live on the object: it is
pushed here, on the stack of the context that entered, and found again at exit by the object's
identity. An entry that opened nothing pushes a sentinel when an outer entry of the same object
is open in its context, so that the nested exit never closes the outer entry's state. A
decorated call pushes its handle only when mini-batches inside must find it (a stage that owns
a capture, or one refused its own).

The stack is an immutable linked list in a ``ContextVar``: a task copies its creator's context,
and must not share a mutable list with it. An entry removed from the middle (entries closed out
of order, as interleaved generators do) is marked dead and skipped, then dropped once the
entries above it are gone: entries keep their identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["STACK", "Entry", "clear", "holds", "push", "remove", "top", "walk"]


class Entry:
    """One open entry: ``key`` (the DSL object, None for a decorated call) and what it opened
    (``value``: a handle, or None for an entry that opened nothing)."""

    __slots__ = ("below", "key", "live", "value")

    def __init__(self, key: object, value: Any, below: Entry | None) -> None:
        self.key, self.value, self.below = key, value, below
        self.live = True


#: The current context's innermost entry (the DSL's hot path reads and sets it directly).
STACK: ContextVar[Entry | None] = ContextVar("profdsl_entries", default=None)


def top() -> Entry | None:
    """The innermost open entry of the current context."""
    return STACK.get()


def walk(entry: Entry | None) -> Iterator[Entry]:
    """``entry`` and every live entry below it, innermost first."""
    while entry is not None:
        if entry.live:
            yield entry
        entry = entry.below


def holds(key: object, entry: Entry | None) -> bool:
    """Whether ``entry`` or a live entry below it has ``key``."""
    while entry is not None:
        if entry.key is key and entry.live:
            return True
        entry = entry.below
    return False


def push(key: object, value: Any) -> Entry:
    """Push an entry onto the current context's stack."""
    entry = Entry(key, value, STACK.get())
    STACK.set(entry)
    return entry


def remove(match: object, *, by_key: bool) -> Entry | None:
    """Remove the innermost live entry whose key (``by_key``) or identity is ``match``; None
    when the current context holds none (it was entered elsewhere, or opened nothing)."""
    for entry in walk(STACK.get()):
        if (entry.key is match) if by_key else (entry is match):
            entry.live = False
            innermost = STACK.get()
            while innermost is not None and not innermost.live:  # drop it and dead ones below
                innermost = innermost.below
            STACK.set(innermost)
            return entry
    return None


def clear() -> None:
    """Empty the current context's stack (a test's reset; other contexts are not reachable)."""
    STACK.set(None)
