"""Per-context stacks of open DSL entries: each thread and each asyncio task has its own.

A ``with profile_stage(...)`` object may be shared (a module-level constant) and entered from
several threads or tasks at once, so what one entry opened cannot live on the object: it is
pushed here, on the stack of the context that entered, and found again at exit by the object's
identity. An entry that opened nothing pushes a sentinel while anything is open, so that a nested
re-entry of the same object never closes its outer entry's state. Decorated calls push their
handle too (without a key), so that a mini-batch finds the stage it belongs to.

The stack is an immutable linked list in a ``ContextVar``: a task copies its creator's context,
and must not share a mutable list with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["STACK", "Entry", "clear", "holds", "push", "remove", "top", "walk"]


class Entry:
    """One open entry: ``key`` (the DSL object, None for a decorated call) and what it opened
    (``value``: a handle, or None for an entry that opened nothing)."""

    __slots__ = ("below", "key", "value")

    def __init__(self, key: object, value: Any, below: Entry | None) -> None:
        self.key, self.value, self.below = key, value, below


#: The current context's innermost entry (the DSL's hot path reads and sets it directly).
STACK: ContextVar[Entry | None] = ContextVar("profdsl_entries", default=None)


def top() -> Entry | None:
    """The innermost open entry of the current context."""
    return STACK.get()


def walk(entry: Entry | None) -> Iterator[Entry]:
    """``entry`` and every entry below it, innermost first."""
    while entry is not None:
        yield entry
        entry = entry.below


def holds(key: object, entry: Entry | None) -> bool:
    """Whether ``entry`` or an entry below it has ``key``."""
    while entry is not None:
        if entry.key is key:
            return True
        entry = entry.below
    return False


def push(key: object, value: Any) -> Entry:
    """Push an entry onto the current context's stack."""
    entry = Entry(key, value, STACK.get())
    STACK.set(entry)
    return entry


def remove(match: object, *, by_key: bool) -> Entry | None:
    """Remove the innermost entry whose key (``by_key``) or identity is ``match``; None when the
    current context holds none (it was entered elsewhere, or opened nothing)."""
    innermost = STACK.get()
    if innermost is not None and ((innermost.key is match) if by_key else (innermost is match)):
        STACK.set(innermost.below)  # the usual case: entries close in the order they opened
        return innermost
    above: list[Entry] = []
    for entry in walk(STACK.get()):
        if (entry.key is match) if by_key else (entry is match):
            below = entry.below
            for kept in reversed(above):  # rebuild what was pushed on top of it (rare)
                below = Entry(kept.key, kept.value, below)
            STACK.set(below)
            return entry
        above.append(entry)
    return None


def clear() -> None:
    """Empty the current context's stack (a test's reset; other contexts are not reachable)."""
    STACK.set(None)
