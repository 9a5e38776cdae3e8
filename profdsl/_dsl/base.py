"""The annotation base of every DSL word: ``with``, ``async with`` and the decorator.

One entry is one :class:`~profdsl._runtime.context.Entry` on the entering context's stack: what
it opened in the trace (a handle from its role's recorder), the metrics node its time goes to,
and its clock. Every form goes through :meth:`Entries._begin` and :meth:`Entries._end`, but
for a ``with`` block's usual timed entry (a step timed, nothing profiled, the word bound to no
role or profiler), which :meth:`Annotation.__enter__` and :meth:`Annotation.__exit__` begin and
end without a call (the same steps, inlined: this runs for every timed ``with`` block), as a
:class:`~profdsl._runtime.context.Timed` entry that its exit leaves on the stack, dead, for the
next entry begun in its context to drop; the decorator (:mod:`profdsl._dsl.decorate`) picks
the piece for the callable's kind.

When nothing is profiled or timed (``Registry.on`` is false), a ``with`` block costs one
attribute check at entry and one at exit, and a decorated call one: no torch call, no
allocation. A fault inside profdsl is logged once and swallowed; the annotated code's results
and exceptions pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from profdsl._dsl.decorate import decorate
from profdsl._runtime import context
from profdsl._runtime.context import ENDED, Entry, Timed, make
from profdsl._runtime.meter import node_for
from profdsl._runtime.process import PROCESS
from profdsl._runtime.registry import stray, unbound
from profdsl.core._log import internal_error
from profdsl.metrics import _tree as tree

if TYPE_CHECKING:
    from profdsl._runtime.handles import Handle
    from profdsl._runtime.profiler import Profiler
    from profdsl._runtime.recorder import NullRecorder, Recorder
    from profdsl._runtime.registry import Registry
    from profdsl._runtime.step import StepContext
    from profdsl.metrics._tree import Node

__all__ = ["FROM_RECORDER", "Annotation", "Entries", "registry_of", "stop"]

F = TypeVar("F", bound=Callable[..., Any])

_STACK = context.STACK
_top, _set_top = _STACK.get, _STACK.set  # (bound once: read and set at every entry and exit)
#: The default of :meth:`Entries._begin`'s ``handle``: ask the entry's recorder for it (an
#: async entry asks first, awaiting, and passes what it got, None included).
FROM_RECORDER = object()


def registry_of(profiler: Profiler | None) -> Registry:
    """The registry an entry bound to ``profiler`` reads: that profiler's process's, or this
    process's (:data:`~profdsl._runtime.process.PROCESS`) for an entry bound to none. Read at
    every entry, never kept: a reset replaces it."""
    return PROCESS.registry if profiler is None else profiler.process.registry


def stop(entry: Entry, innermost: bool = False) -> Any:
    """End ``entry`` (``innermost``: found on top of this context's stack): its time goes to its
    node, it leaves the stack and the open ``with`` entries of its registry (whose switch turns
    off when nothing else is on); returns its handle, for the caller to close. Never raises."""
    entry.end(innermost)
    handle = entry.handle
    if handle is not None:  # registry_of(), inlined: this runs for every decorated profiled call
        profiler = entry.key.profiler  # type: ignore[attr-defined]
        registry = PROCESS.registry if profiler is None else profiler.process.registry
        opened = registry.opened
        opened.pop(entry, None)
        if not opened and not registry.steps:
            registry.refresh()
    return handle


def _finish(entry: Entry | None, innermost: bool) -> None:
    """A ``with`` exit's end of ``entry`` (None: none to end; ``innermost``: as :func:`stop`'s),
    its handle, if any, closed."""
    if entry is not None:
        if entry.handle is None:  # stop(), inlined: nothing to close or unlist
            entry.end(innermost)
        else:
            stop(entry, innermost).close()


def _elsewhere(key: object, registry: Registry) -> Entry | None:
    """The latest open ``with`` entry of ``key`` in another context (a generator whose block
    began on one thread and ends on another): marked done there, to be ended here."""
    for entry in reversed(list(registry.opened)):
        if entry.key is key and entry.live:
            entry.live = False
            return entry
    return None


def _nesting(top: Entry | None) -> Recorder | None:
    """The active recorder of the innermost entry of this context that opened a region: where an
    entry bound to no role nests."""
    for entry in context.walk(top):
        owner = getattr(entry.handle, "owner", None)
        if owner is not None and owner.active:
            return owner  # type: ignore[no-any-return]
    return None


class Entries:
    """One DSL word's entries: what one opens (its handle from its role's recorder, its metrics
    node) and how it ends, for every form (:class:`Annotation`, the forms)."""

    __slots__ = ("profiler", "role")
    profiler: Profiler | None
    role: str | None
    name: str
    #: The kind of work an entry is, when the word declares one (the step ledger's:
    #: :mod:`profdsl.core._kinds`); None: by its name.
    kind: str | None = None
    #: Whether a decorated call's arguments say which profiler it uses (:meth:`_bound`).
    _binds = False

    def _open(self, recorder: Recorder | NullRecorder, top: Entry | None) -> Handle | None:
        raise NotImplementedError

    def _bound(self, args: tuple[Any, ...]) -> Profiler | None:
        """The profiler a decorated call with ``args`` uses (the word's own here)."""
        return self.profiler

    def _handle(self, profiler: Profiler | None, steps: tuple[StepContext, ...], top: Entry | None) -> Any:
        """This entry's handle from its role's recorder (its profiler's, else one of the
        registered ``steps``); None when nothing is opened."""
        try:
            if profiler is not None:
                return self._open(profiler.recorder, top)
            for first in steps:
                if first.recorder is not None:
                    break
            else:  # nothing captured (or the step ended since `on` was read)
                return None
            role = self.role
            if role is not None:
                for step in steps:
                    if step.recorder is not None and step.role == role:
                        return self._open(step.recorder, top)
                stray(self.name, role, [s.role for s in steps if s.recorder is not None], PROCESS.live)
                return None
            recorder = _nesting(top)
            if recorder is None:
                recorder = first.recorder
                if len(steps) > 1:
                    captured = [s.role for s in steps if s.recorder is not None]
                    if len(captured) > 1:
                        unbound(self.name, True, captured, first.role)
            return self._open(recorder, top)
        except Exception as exc:
            internal_error(f"{type(self).__name__} entry", exc)
            return None

    async def _ahandle(self, profiler: Profiler | None, steps: tuple[StepContext, ...], top: Entry | None) -> Any:
        return self._handle(profiler, steps, top)

    def _begin(self, profiler: Profiler | None, listed: bool = False, handle: Any = FROM_RECORDER) -> Entry:
        """Open one entry on the current context's stack: its ``handle`` (asked of its role's
        recorder unless given), then its clock. A ``listed`` entry with a handle is also listed as
        open (a ``with`` entry: its exit must close it whatever turned off meanwhile). Entries timed
        in an ended step left on the stack (exited when nothing was on) are dropped from under it,
        as are dead ones on top (a :class:`~profdsl._runtime.context.Timed` entry's exit leaves it
        there)."""
        below = _STACK.get()
        while below is not None and not below.live:  # (exited Timed entries stay on top, dead)
            below = below.below
        registry = PROCESS.registry if profiler is None else profiler.process.registry
        steps = registry.steps
        if handle is FROM_RECORDER:  # only a profiled step opens regions (one only timed: none)
            handle = self._handle(profiler, steps, below) if profiler is not None or registry.profiled else None
        if profiler is not None:
            node = self._bound_node(profiler, steps, below)
        elif not registry.timed:
            node = None
        else:
            node = None
            if self.role is None:  # node_for(), inlined for an unbound entry's usual cases
                if below is not None:
                    parent = below.node  # nested in an open timed entry
                    if parent is not None and below.live and not parent.closed:
                        node = parent.children.get(self.name)
                elif len(steps) == 1 and steps[0].root is not None:  # the top of the one tree
                    node = steps[0].root.children.get(self.name)
            if node is None:
                node = node_for(self.name, self.role, None, steps, below, PROCESS.live, self.kind)
        while below is not None and below.handle is None and below.node is not None and below.node.closed:
            below = below.below
        entry = make(self, handle, node, below)
        _STACK.set(entry)
        if listed and handle is not None:
            registry.opened[entry] = None
            registry.on = True  # (see Registry: set after the entry is listed)
        return entry

    def _bound_node(self, profiler: Profiler, steps: tuple[StepContext, ...], below: Entry | None) -> Node | None:
        """The metrics node of an entry bound to ``profiler``: in its step's tree, if timed."""
        step = profiler.step_context
        root = None if step is None else step.root
        return None if root is None else node_for(self.name, None, root, steps, below, kind=self.kind)

    async def _abegin(self, profiler: Profiler | None, listed: bool = False) -> Entry:
        registry = registry_of(profiler)
        handle = None
        if profiler is not None or registry.profiled:
            handle = await self._ahandle(profiler, registry.steps, _STACK.get())
        return self._begin(profiler, listed, handle)

    def _end(self, entry: Entry) -> None:
        """End one entry: its clock, then its handle."""
        handle = stop(entry)
        if handle is not None:
            handle.close()

    async def _aend(self, entry: Entry) -> None:
        self._end(entry)

    def _call(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A decorated plain call, as one entry."""
        entry = self._begin(self._bound(args) if self._binds else self.profiler)
        try:
            return func(*args, **kwargs)
        finally:
            handle = stop(entry)  # _end(), inlined
            if handle is not None:
                handle.close()


class Annotation(Entries):
    """A DSL word. Subclasses fill ``name``, ``role`` and ``profiler`` and say what one entry
    opens in the trace (:meth:`_open`); the rest is shared: the ``with`` block (whose usual
    timed entry, nothing profiled, is begun and ended here without a call) and the decorator."""

    __slots__ = ()

    def _leaving(self) -> Entry | None:
        """The entry a ``with`` exit ends: the innermost of this object in this context, else
        the latest one with a handle open elsewhere; None when there is none."""
        return context.find(self) or _elsewhere(self, registry_of(self.profiler))

    def __enter__(self) -> Any:
        # The switch, read through the process state: a bound profiler's own, or this process's.
        # (Slow cases return early: every jump of the usual path stays short.)
        if self.profiler is not None:
            if self.profiler.process.registry.on:
                self._begin(self.profiler, True)
            return self
        registry = PROCESS.registry
        if not registry.on:
            return self
        if not registry.plain or self.role is not None:
            self._begin(None, True)
            return self
        # A step timed on the host, nothing profiled, an entry bound to nothing: _begin(), inlined.
        below = _top()
        while below is not None and not below.live:  # exited Timed entries stay on top, dead: dropped here
            below = below.below
        if below is None:
            node = registry.tops.get(self.name)  # the top of the one tree (only a tree timed on the host)
        else:
            node = below.node  # nested in an open entry timed on the host
            if node is not None and not node.closed and node.root.device is None:
                node = node.children.get(self.name)
            else:
                node = None
        if node is None:
            node = node_for(self.name, None, None, registry.steps, below, PROCESS.live, self.kind)
            while below is not None and below.handle is None and below.node is not None and below.node.closed:
                below = below.below
            if node is None or node.root.device is not None:  # not timed, or timed on the device
                _set_top(make(self, None, node, below))
                return self
        entry = Timed()  # context.make(), inlined (its handle and spent: its class's)
        entry.key = self
        entry.node = node
        entry.below = below
        entry.live = True
        entry.start = tree.clock()
        _set_top(entry)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.profiler is not None:
            self._exit(self.profiler.process.registry)
            return
        if not PROCESS.registry.on:
            return
        entry: Timed = _top()  # type: ignore[assignment]  # (a Timed once its class is checked)
        while entry is not None and not entry.live:  # (exited Timed entries stay on top, dead)
            entry = entry.below  # type: ignore[assignment]
        # (`start is None`: a Timed is never paused, and ended first: only a race with another thread)
        if entry.__class__ is not Timed or entry.key is not self or (start := entry.start) is None:
            if entry is None or entry.key is not self:
                _finish(self._leaving(), False)
            else:
                _finish(entry, True)
            return
        node: Node = entry.node  # type: ignore[assignment]  # (a Timed's: not None)
        now = tree.clock()  # Entry.end(), inlined for a Timed on top: this runs for every timed `with`
        spent = now - start  # (a Timed's own spent is 0.0: never paused; its clock stays: never run again)
        if not node.closed:  # node.add(spent) and tree.stretch(), inlined
            ended = node.ended
            ended.append(spent)
            if len(ended) >= tree.FOLD_AT:
                node.fold()
            spans = node.spans  # a top-level stage's: its stretch goes to the step's ledger
            if spans is not None:
                root = node.root
                if len(spans) < root.room:
                    spans += (start, now, node)
                else:
                    unkept = root.unkept
                    unkept.append(None)
                    if len(unkept) >= tree.FOLD_AT:
                        tree.drop(root)
        entry.live = False  # left on top of the stack, dead (a ContextVar set fewer): the next entry
        entry.node = ENDED  # begun in this context drops it; meanwhile it keeps nothing of its step

    def _exit(self, registry: Registry) -> None:
        """The ``with`` exit of a word bound to a profiler (whose process's is ``registry``):
        whatever this object's entry is, wherever it is, when ``registry`` is on."""
        if not registry.on:
            return
        entry = _top()
        if entry is None or entry.key is not self or not entry.live:
            _finish(self._leaving(), False)
        else:
            _finish(entry, True)

    def __call__(self, func: F) -> F:
        """Decorate a function, method, ``staticmethod`` or ``classmethod`` (either order),
        ``async def``, generator or async generator function, or the getter of a ``property``
        or ``functools.cached_property`` below it."""
        return cast(F, decorate(self, func))
