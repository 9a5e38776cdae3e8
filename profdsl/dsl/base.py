"""The ``with`` and decorator behaviour shared by the DSL words.

When nothing is being profiled or timed, a ``with`` block costs one attribute check at entry and
one at exit (``hot``), and a decorated call one: no torch call, no allocation. With only the
always-on metrics on (``hot`` and not ``traced``), an entry opens a span inline
(:mod:`profdsl.metrics.spans`: the same rules as ``spans.enter`` and ``spans.leave``, written out
here because this path runs for every entry of every step). Otherwise (``traced``) each entry
opens its span through those functions and asks the recorder of its role for a handle of its
own, which lives on the entering context's stack (:mod:`profdsl.runtime.context`), never on the
shared DSL object. A fault inside profdsl is logged once and swallowed; the wrapped code's
results and exceptions pass through.

Generator and ``async def`` bodies are driven in slices (:mod:`profdsl.dsl.slices`): their region
is open only while their own code runs, never across a ``yield`` or ``await``. Their metrics span
times an ``async def`` call whole (its awaits included) and a generator's own slices (an async
generator's steps, awaits included), never the consumer's time between items.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl.dsl.slices import drive_async_generator, drive_coroutine, drive_generator, time_steps
from profdsl.metrics import spans
from profdsl.metrics.tree import Node, child
from profdsl.runtime import context
from profdsl.runtime.handles import Handle, fault
from profdsl.runtime.meter import close_span, leave_span, metered, open_span, parent_for
from profdsl.runtime.process import PROCESS
from profdsl.runtime.recorder import NULL_RECORDER

if TYPE_CHECKING:
    from profdsl.metrics.spans import Span
    from profdsl.runtime.context import Entry
    from profdsl.runtime.profiler import Profiler
    from profdsl.runtime.recorder import NullRecorder, Recorder

__all__ = ["Annotation"]

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY = PROCESS.registry  # the same object for the life of the process (reset in place)
_STACK = context.STACK
_OPENED = _REGISTRY.opened
_SPAN_GET, _SPAN_SET, _CLOCK = spans.SPANS.get, spans.SPANS.set, spans.clock
_ACCESS = spans.ACCESS  # what decorated functions use (see _decorate)


def _entered_elsewhere(key: object) -> Entry | None:
    """The latest open entry of ``key`` in another context (a generator whose ``with`` block
    began on one thread and ends on another): marked done there, to be closed here."""
    for entry in reversed(list(_OPENED)):
        if entry.key is key and entry.live:
            entry.live = False
            return entry
    return None


def _node(annotation: Annotation, below: Span | None) -> Node | None:
    """The inlined paths' slow case: a nested entry under an ended step, an entry bound to a
    role or profiler, or a stage's first entry in this step."""
    try:
        parent = parent_for(annotation.role, annotation.profiler, below)
        return None if parent is None else (parent.children.get(annotation.name)
                                            or child(parent, annotation.name))
    except Exception as exc:
        fault("metrics entry", exc)
        return None


class Annotation:
    """A DSL word: subclasses say what one entry opens (:meth:`_open`) and fill the slots
    ``profiler``, ``role`` and ``name``."""

    __slots__ = ("profiler", "role")
    profiler: Profiler | None
    role: str | None
    name: str

    def _open(self, recorder: Recorder | NullRecorder, top: Entry | None) -> Handle | None:
        raise NotImplementedError

    def _handle(self, top: Entry | None) -> Handle | None:
        """This entry's handle from its role's recorder; None when nothing is opened."""
        try:
            profiler = self.profiler
            if profiler is not None:
                recorder: Recorder | NullRecorder = profiler.recorder
            elif self.role is None:
                recorders = _REGISTRY.recorders
                recorder = recorders[0] if recorders else NULL_RECORDER
            else:
                recorder = _REGISTRY.find(self.role) or NULL_RECORDER
            return self._open(recorder, top)
        except Exception as exc:
            fault(f"{type(self).__name__} entry", exc)
            return None

    def __enter__(self) -> Any:
        if not _REGISTRY.hot:
            return self
        if _REGISTRY.traced:
            return self._enter_traced()
        below = _SPAN_GET()  # metrics only: spans.enter, inlined
        if self.role is not None or self.profiler is not None:
            node = _node(self, below)
        elif below is None:
            try:
                node = _REGISTRY.first.get(self.name) or _node(self, below)  # type: ignore[union-attr]
            except AttributeError:  # the step ended since `hot` was read
                return self
        elif below[1].closed:  # entered in an ended step, never left here: dropped from the stack
            below = spans.live(below)
            node = _node(self, below)
        else:
            node = below[1].children.get(self.name) or _node(self, below)
        if node is not None:
            _SPAN_SET((self, node, below, _CLOCK()))
        return self

    def _enter_traced(self) -> Any:
        top = _STACK.get()
        handle = self._handle(top)
        # An entry that opened nothing still marks its place when an outer entry of this same
        # object is open here: the nested exit must not close the outer entry's handle.
        if handle is not None or context.holds(self, top):
            entry = context.Entry(self, handle, top)
            _STACK.set(entry)
            _OPENED[entry] = None
            _REGISTRY.traced = True  # (see Registry: set after the entry is added, never cleared here)
            _REGISTRY.hot = True
        if _REGISTRY.meters:
            open_span(self, self.name, self.role, self.profiler)  # times the body, not the region
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not _REGISTRY.hot:
            return
        if _REGISTRY.traced:
            return self._exit_traced()
        span = _SPAN_GET()  # metrics only: spans.leave, inlined
        try:
            key, node, below, start = span  # type: ignore[misc]
        except (TypeError, ValueError):  # no span here, or one with a device mark
            if span is not None:
                leave_span(self)
            return
        if key is self:
            node.total += _CLOCK() - start
            _SPAN_SET(below)
            node.count += 1
        else:
            leave_span(self)

    def _exit_traced(self) -> None:
        if _SPAN_GET() is not None:
            leave_span(self)
        entry = _STACK.get()
        if entry is not None and entry.key is self and entry.live:  # the usual case: innermost
            entry.live = False
            below = entry.below
            while below is not None and not below.live:
                below = below.below
            _STACK.set(below)
        else:
            entry = context.remove(self, by_key=True) or _entered_elsewhere(self)
            if entry is None:
                return
        _OPENED.pop(entry, None)
        if not _REGISTRY.recorders:  # profiling stopped while this entry was open
            _REGISTRY.refresh()
        if entry.value is not None:
            entry.value.close()

    def __call__(self, func: F) -> F:
        """Decorate a function, method, ``staticmethod``, ``classmethod``, ``async def`` or
        generator function."""
        if isinstance(func, (staticmethod, classmethod)):  # decorated above the descriptor
            return type(func)(self(func.__func__))
        return _decorate(func, self)  # type: ignore[return-value]


class _Scoped:
    """A decorated call's handle. One that numbers mini-batches (a stage with its own capture) or
    refuses them is current in its context exactly while the body runs, for the mini-batches
    inside to find; a plain region needs no place on the stack."""

    __slots__ = ("entry", "handle", "stacked")

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.stacked = handle.batches is not None or handle.opaque
        self.entry: Entry | None = context.push(None, handle) if self.stacked else None

    def suspend(self) -> None:
        if self.entry is not None:
            context.remove(self.entry, by_key=False)
            self.entry = None
        self.handle.suspend()

    def resume(self) -> None:
        self.handle.resume()
        if self.stacked and self.entry is None:
            self.entry = context.push(None, self.handle)

    def close(self) -> None:
        if self.entry is not None:
            context.remove(self.entry, by_key=False)
            self.entry = None
        self.handle.close()


class _Both:
    """A decorated generator's profiled region and metrics span, suspended and resumed together
    (the span inside the region: it times the body, not the region's own cost)."""

    __slots__ = ("metered", "scoped")

    def __init__(self, scoped: _Scoped | None, metered: spans.Metered | None) -> None:
        self.scoped, self.metered = scoped, metered

    def suspend(self) -> None:
        if self.metered is not None:
            self.metered.suspend()
        if self.scoped is not None:
            self.scoped.suspend()

    def resume(self) -> None:
        if self.scoped is not None:
            self.scoped.resume()
        if self.metered is not None:
            self.metered.resume()

    def close(self) -> None:
        if self.metered is not None:
            self.metered.close()
        if self.scoped is not None:
            self.scoped.close()


def _begin(annotation: Annotation) -> _Scoped | None:
    """A decorated call's profiled region, or None."""
    handle = annotation._handle(_STACK.get())
    return None if handle is None else _Scoped(handle)


def _regions(annotation: Annotation) -> _Both | None:
    """A decorated generator's profiled region and metrics span, or None when it has neither."""
    scoped = _begin(annotation) if _REGISTRY.traced else None
    meter = metered(annotation.name, annotation.role, annotation.profiler) if _REGISTRY.meters else None
    return None if scoped is None and meter is None else _Both(scoped, meter)


def _traced_call(func: Callable[..., Any], annotation: Annotation, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
    """A decorated call while something is profiled: its region, and its span inside it."""
    scoped = _begin(annotation)
    span = open_span(None, annotation.name, annotation.role, annotation.profiler) if _REGISTRY.meters else None
    try:
        return func(*args, **kwargs)
    finally:
        if span is not None:
            close_span(span)
        if scoped is not None:
            scoped.close()


def _decorate(func: Callable[..., Any], annotation: Annotation) -> Callable[..., Any]:
    # A decorated function pickled by value (Ray ships classes defined in __main__) takes the
    # globals it names along: the wrappers name only module functions (pickled by reference),
    # the registry and spans.ACCESS (both reduce to this process's own), never a ContextVar.
    registry = _REGISTRY

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.hot:
                return await func(*args, **kwargs)
            scoped = _begin(annotation) if registry.traced else None
            span = open_span(None, annotation.name, annotation.role, annotation.profiler) \
                if registry.meters else None
            try:  # the span times the call whole, its awaits included; the region is sliced
                if scoped is None:
                    return await func(*args, **kwargs)
                try:
                    return await drive_coroutine(func(*args, **kwargs), scoped)
                finally:
                    scoped.close()
            finally:
                if span is not None:
                    close_span(span)

        return async_wrapper
    if inspect.isasyncgenfunction(func):

        @functools.wraps(func)
        async def async_generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            body = func(*args, **kwargs)
            scoped = _begin(annotation) if registry.traced else None
            driven = body if scoped is None else drive_async_generator(body, scoped)
            meter = metered(annotation.name, annotation.role, annotation.profiler) \
                if registry.meters else None
            if meter is not None:  # each step timed whole, its awaits included
                driven = time_steps(driven, meter)
            try:  # delegate: values out, asend / athrow / aclose in (no `yield from` here)
                try:
                    value = await driven.__anext__()
                except StopAsyncIteration:
                    return
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        await driven.aclose()
                        raise
                    except BaseException as exc:  # handed to the body, which decides
                        try:
                            value = await driven.athrow(exc)
                        except StopAsyncIteration:
                            return
                    else:
                        try:
                            value = await driven.asend(sent)
                        except StopAsyncIteration:
                            return
            finally:
                if meter is not None:
                    meter.close()
                if scoped is not None:
                    scoped.close()

        return async_generator_wrapper
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.hot:
                return (yield from func(*args, **kwargs))
            both = _regions(annotation)
            if both is None:
                return (yield from func(*args, **kwargs))
            try:
                return (yield from drive_generator(func(*args, **kwargs), both))
            finally:
                both.close()

        return generator_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not registry.hot:
            return func(*args, **kwargs)
        if registry.traced:
            return _traced_call(func, annotation, args, kwargs)
        below = _ACCESS.get()  # metrics only: spans.enter and spans.close, inlined
        if annotation.role is not None or annotation.profiler is not None:
            node = _node(annotation, below)
        elif below is None:
            try:
                node = registry.first.get(annotation.name) or _node(annotation, below)  # type: ignore[union-attr]
            except AttributeError:  # the step ended since `hot` was read
                return func(*args, **kwargs)
        elif below[1].closed:
            node = _node(annotation, below)
        else:
            node = below[1].children.get(annotation.name) or _node(annotation, below)
        if node is None:
            return func(*args, **kwargs)
        start = _ACCESS.clock()
        _ACCESS.set((None, node, below, start))
        try:
            return func(*args, **kwargs)
        finally:
            node.total += _ACCESS.clock() - start
            _ACCESS.set(below)
            node.count += 1

    return wrapper
