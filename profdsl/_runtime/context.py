"""The open DSL entries of each context: one stack per thread and per asyncio task.

Every entry of ``profile_stage``, ``mini_batch_window`` and ``rollout_window`` (``with`` block
or decorated call) is one :class:`Entry` on the stack of the context that entered it: what it
opened in the trace (``handle``), the metrics node it adds its time to (``node``), and when it
began. A DSL object may be shared (a module-level constant) and entered from several threads or
tasks at once, so an entry's state never lives on the object: a ``with`` exit finds its entry
again by the object's identity (``key``), a decorated call holds its own.

The stack is a linked list in a ``ContextVar`` (a task copies its creator's context and must not
share a mutable list with it). An entry removed from the middle (closed out of order, as
interleaved generators do) is marked dead and skipped (its node :data:`ENDED`: it keeps nothing
of its step), then dropped once the entries above it are gone: entries keep their identity.
So is the usual timed ``with`` entry (:class:`Timed`) when its exit finds it on top: it stays
there, dead and holding nothing of its step (its node is :data:`ENDED`), until the next entry
begun in that context drops it (one ``ContextVar`` set per entry instead of two: a set makes a
new context mapping, about 40 ns, as much as a clock read).
A suspended generator stage takes the entries above its own with it (:func:`detach`) and puts
them back wherever it resumes (:func:`reattach`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from profdsl.core._log import internal_error
from profdsl.metrics import _tree as tree

if TYPE_CHECKING:
    from profdsl.metrics._tree import Node

__all__ = [
    "ENDED",
    "STACK",
    "Entry",
    "Timed",
    "clear",
    "detach",
    "find",
    "make",
    "push",
    "reattach",
    "remove",
    "segment",
    "top",
    "walk",
]


class Entry:
    """One open entry: ``key`` (the DSL object entered), ``handle`` (what it opened in the trace,
    or None), ``node`` (the metrics node its time goes to, or None) and its clock: ``start`` is
    when its current stretch began (None while paused), ``spent`` the seconds of earlier
    stretches, ``mark`` the device event of the stretch (CUDA device time)."""

    __slots__ = ("below", "handle", "kept", "key", "live", "mark", "node", "spent", "start")
    # No __init__: made by :func:`make` (or inlined: a plain `Entry()` is the cheapest object).

    key: object
    handle: Any
    node: Node | None
    below: Entry | None
    live: bool
    spent: float
    mark: Any
    start: float | None
    kept: list[float]  # a suspended top-level stage's stretches (set when it becomes a Held)

    def run(self) -> None:
        """Start (or restart) the clock of a timed entry."""
        device = self.node.root.device  # type: ignore[union-attr]
        if device is not None:
            self.mark = device.mark()
        self.start = tree.clock()

    def pause(self, hold: bool = True) -> None:
        """Stop the clock, keeping the stretch's seconds (a generator's ``yield``), and the
        stretch itself when the entry is a top-level stage: ``hold``, on the entry (a
        :class:`Held` from now on) until it ends, so that one still open when its step ends
        leaves none; else (at its end) for the ledger."""
        start = self.start
        if start is None:
            return
        if self.__class__ is Timed:  # its spent is its class's, never written: a plain Entry from now on
            _HANDLE.__set__(self, None)  # (its slots set first: a reader on another thread sees
            _SPENT.__set__(self, 0.0)  # the same values before and after the switch)
            self.__class__ = Entry  # type: ignore[assignment]
        now = tree.clock()
        self.spent += now - start
        self.start = None
        node: Node = self.node  # type: ignore[assignment]
        device = node.root.device
        if device is not None:
            end = device.mark()
            with node.root.lock:
                device.add(node, self.mark, end)
        if node.spans is not None and not node.closed:
            if not hold:
                tree.stretch(node, start, now)
            elif self.__class__ is Held:
                self.kept += (start, now)
            else:
                self.kept = [start, now]
                self.__class__ = Held

    def end(self, innermost: bool = False) -> None:
        """The entry ended: its node gets one entry of the seconds it ran (unless its step has ended
        since); it leaves the stack (``innermost``: found on top of this context's). Never raises."""
        node = self.node
        if node is not None:
            try:
                start = self.start
                root = node.root
                if start is not None and root.device is None:  # pause(), inlined
                    now = tree.clock()
                    spent = self.spent + (now - start)  # (not kept: an ended entry's clock is never read)
                    self.start = None
                    spans = node.spans  # a top-level stage's: its stretch goes to the step's ledger
                else:
                    self.pause(False)  # (which keeps the stretch)
                    spent, spans = self.spent, None
                if not node.closed:  # node.add(spent) and tree.stretch(), inlined: this runs for every timed entry
                    ended = node.ended
                    ended.append(spent)
                    if len(ended) >= tree.FOLD_AT:
                        node.fold()
                    if spans is not None:
                        if len(spans) < root.room:
                            spans += (start, now, node)  # type: ignore[arg-type]  # (start: not None here)
                        else:
                            unkept = root.unkept
                            unkept.append(None)
                            if len(unkept) >= tree.FOLD_AT:
                                tree.drop(root)
            except Exception as exc:  # a device error
                internal_error("metrics exit", exc)
        self.live = False
        top = self if innermost else STACK.get()
        if top is self:  # the usual case: the innermost entry ends
            top = self.below
            while top is not None and not top.live:
                top = top.below
            STACK.set(top)
        else:  # off the top (ended out of order, or a Timed left dead above it)
            remove(self)


class Timed(Entry):
    """An entry timed on the host with no handle, begun and ended without a call by a ``with``
    block (:class:`~profdsl._dsl.base.Annotation`): its ``handle`` (None) and ``spent`` (0.0) are
    the class's, two slot stores fewer, and its class alone says that its exit may be inlined. No
    code writes either on it: :meth:`Entry.pause` first makes it a plain :class:`Entry`, and
    :meth:`Entry.end` keeps no ``spent``."""

    __slots__ = ()
    handle = None  # (hiding the slot of the same name: read-only on a Timed)
    spent = 0.0


class Held(Entry):
    """A top-level stage's entry that was suspended (:meth:`Entry.pause`): the stretches it ran
    (``kept``) go to its step's ledger when it ends, with its count (:meth:`Entry.end`), unless
    its step has ended since (then neither)."""

    __slots__ = ()

    def end(self, innermost: bool = False) -> None:
        node: Node = self.node  # type: ignore[assignment]
        try:
            self.pause()  # its last stretch, when it runs
            if not node.closed:  # its stretches, then its count (Entry.end)
                kept = self.kept
                for i in range(0, len(kept), 2):
                    tree.stretch(node, kept[i], kept[i + 1])
        except Exception as exc:  # a device error
            internal_error("metrics exit", exc)
        Entry.end(self, innermost)


_HANDLE: Any = Entry.__dict__["handle"]  # the slots themselves, which a Timed's class hides
_SPENT: Any = Entry.__dict__["spent"]

#: The node of a :class:`Timed` its exit left on the stack: the root of no step, ended, so that
#: the entry keeps nothing of its own step's tree and whatever looks for an open entry to nest
#: in (even on another thread, between two reads) finds it closed, as it would an ended step's.
ENDED = tree.Root("", 0, tree.Paths(0))
tree.close(ENDED)

#: The current context's innermost entry.
STACK: ContextVar[Entry | None] = ContextVar("profdsl_entries", default=None)


def top() -> Entry | None:
    """The innermost open entry of the current context."""
    entry = STACK.get()
    while entry is not None and not entry.live:  # (a Timed's exit leaves it on top, dead)
        entry = entry.below
    return entry


def walk(entry: Entry | None) -> Iterator[Entry]:
    """``entry`` and every live entry below it, innermost first."""
    while entry is not None:
        if entry.live:
            yield entry
        entry = entry.below


def make(key: object, handle: Any, node: Node | None, below: Entry | None) -> Entry:
    """A new entry of ``key`` above ``below`` (not yet on the stack), its clock started when it
    is timed (``node`` not None)."""
    entry = Entry()
    entry.key = key
    entry.handle = handle
    entry.node = node
    entry.below = below
    entry.live = True
    entry.spent = 0.0
    entry.mark = entry.start = None
    if node is not None:
        if node.root.device is None:
            entry.start = tree.clock()  # run(), inlined: this runs for every timed entry
        else:
            entry.run()
    return entry


def push(key: object, handle: Any = None, node: Node | None = None) -> Entry:
    """A new entry on top of the current context's stack."""
    entry = make(key, handle, node, STACK.get())
    STACK.set(entry)
    return entry


def find(key: object) -> Entry | None:
    """The innermost live entry of ``key`` in the current context."""
    for entry in walk(STACK.get()):
        if entry.key is key:
            return entry
    return None


def remove(entry: Entry) -> None:
    """Take ``entry`` off the stack (marked dead wherever it is, where it may stay below live
    entries: its node :data:`ENDED`, it keeps nothing of its step); the dead entries on top are
    dropped from the current context's stack."""
    entry.live = False
    entry.node = ENDED
    innermost = STACK.get()
    if innermost is not None and not innermost.live:
        while innermost is not None and not innermost.live:
            innermost = innermost.below
        STACK.set(innermost)


def segment(entry: Entry) -> list[Entry]:
    """The live entries of the current context from the innermost down to ``entry``, innermost
    first: ``entry`` and what opened inside it; just ``[entry]`` when it is not on this stack."""
    held: list[Entry] = []
    for found in walk(STACK.get()):
        held.append(found)
        if found is entry:
            return held
    return [entry]


def detach(held: list[Entry]) -> None:
    """Take a segment (from :func:`segment`) off the current context's stack, leaving what was
    below its last entry: a generator body's entries, which it takes along across a ``yield``."""
    below = held[-1].below
    while below is not None and not below.live:
        below = below.below
    if next(walk(STACK.get()), None) is held[0]:  # (not when the segment is another context's)
        STACK.set(below)


def reattach(held: list[Entry]) -> None:
    """Put a detached segment back on top of the current context's stack (which may be another
    context's than the one it was detached from: the generator resumed elsewhere)."""
    below = STACK.get()
    for entry in reversed(held):
        entry.below = below
        below = entry
    STACK.set(below)


def clear() -> None:
    """Empty the current context's stack (a test's reset; other contexts are not reachable)."""
    STACK.set(None)
