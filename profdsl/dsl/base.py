"""The ``with`` and decorator behaviour shared by the DSL words.

When nothing is being profiled, a ``with`` block costs one attribute check at entry and one at
exit (``hot``), and a decorated call one (``recorders``): no torch call, no allocation. Otherwise
each entry asks the recorder of its role for a handle of its own, which lives on the entering
context's stack (:mod:`profdsl.runtime.context`), never on the shared DSL object. A fault inside
profdsl is logged once and swallowed; the wrapped code's results and exceptions pass through.

Generator and ``async def`` bodies are driven in slices (:mod:`profdsl.dsl.slices`): their region
is open only while their own code runs, never across a ``yield`` or ``await``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl.dsl.slices import drive_async_generator, drive_coroutine, drive_generator
from profdsl.runtime import context
from profdsl.runtime.handles import Handle, fault
from profdsl.runtime.process import PROCESS
from profdsl.runtime.recorder import NULL_RECORDER

if TYPE_CHECKING:
    from profdsl.runtime.context import Entry
    from profdsl.runtime.profiler import Profiler
    from profdsl.runtime.recorder import NullRecorder, Recorder

__all__ = ["Annotation"]

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY = PROCESS.registry  # the same object for the life of the process (reset in place)
_STACK = context.STACK
_OPENED = _REGISTRY.opened


def _entered_elsewhere(key: object) -> Entry | None:
    """The latest open entry of ``key`` in another context (a generator whose ``with`` block
    began on one thread and ends on another): marked done there, to be closed here."""
    for entry in reversed(list(_OPENED)):
        if entry.key is key and entry.live:
            entry.live = False
            return entry
    return None


class Annotation:
    """A DSL word: subclasses say what one entry opens (:meth:`_open`) and fill the slots
    ``profiler`` and ``role``."""

    __slots__ = ("profiler", "role")
    profiler: Profiler | None
    role: str | None

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
        top = _STACK.get()
        handle = self._handle(top)
        # An entry that opened nothing still marks its place when an outer entry of this same
        # object is open here: the nested exit must not close the outer entry's handle.
        if handle is not None or context.holds(self, top):
            entry = context.Entry(self, handle, top)
            _STACK.set(entry)
            _OPENED[entry] = None
            _REGISTRY.hot = True  # (see Registry: set after the entry is added, never cleared here)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not _REGISTRY.hot:
            return
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
        return _decorate(func, self._handle)  # type: ignore[return-value]


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


def _decorate(func: Callable[..., Any],
              handle_for: Callable[[Entry | None], Handle | None]) -> Callable[..., Any]:
    registry = _REGISTRY

    def begin() -> _Scoped | None:
        # Through the module: a decorated function pickled by value (Ray ships classes defined in
        # __main__) takes its globals along, and a ContextVar cannot be pickled; a module can.
        handle = handle_for(context.STACK.get())
        return None if handle is None else _Scoped(handle)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.recorders:
                return await func(*args, **kwargs)
            scoped = begin()
            if scoped is None:
                return await func(*args, **kwargs)
            try:
                return await drive_coroutine(func(*args, **kwargs), scoped)
            finally:
                scoped.close()

        return async_wrapper
    if inspect.isasyncgenfunction(func):

        @functools.wraps(func)
        async def async_generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            body = func(*args, **kwargs)
            scoped = begin() if registry.recorders else None
            driven = body if scoped is None else drive_async_generator(body, scoped)
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
                if scoped is not None:
                    scoped.close()

        return async_generator_wrapper
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.recorders:
                return (yield from func(*args, **kwargs))
            scoped = begin()
            if scoped is None:
                return (yield from func(*args, **kwargs))
            try:
                return (yield from drive_generator(func(*args, **kwargs), scoped))
            finally:
                scoped.close()

        return generator_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not registry.recorders:
            return func(*args, **kwargs)
        scoped = begin()
        if scoped is None:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        finally:
            scoped.close()

    return wrapper
