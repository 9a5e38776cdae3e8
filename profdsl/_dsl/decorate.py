"""The DSL's one decorator, split by the kind of callable it wraps.

Every piece keeps the wrapped function's name, docstring, signature and kind (a coroutine
function stays one, a generator function stays one), returns its results and raises its
exceptions. When nothing is profiled or timed, a call costs one attribute check
(``Registry.on``, read through the process state at every call: a reset replaces the registry);
otherwise the call is one entry (:meth:`Entries._begin` /
:meth:`Entries._end`), begun when the body first runs: an ``async def`` entry spans its
awaits, a generator's spans its life from the first item, and the bodies of both run in slices
(:mod:`profdsl._dsl.slices`).

A decorated function pickled by value (Ray ships classes defined in ``__main__``) takes what its
wrapper names along: the annotation, module functions (pickled by reference) and the process
state (which reduces to the receiving process's own), never a ``ContextVar``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from profdsl._dsl.slices import Driven, Slices, drive
from profdsl._runtime.process import PROCESS
from profdsl.errors import ConfigError

if TYPE_CHECKING:
    from profdsl._runtime.context import Entry
    from profdsl._runtime.process import Process
    from profdsl._runtime.profiler import Profiler

__all__ = ["Word", "decorate"]

Func = Callable[..., Any]


class Word(Protocol):
    """What :func:`decorate` uses of a DSL word (:class:`profdsl._dsl.base.Annotation`, which
    imports this module: declared here, so that this module imports nothing of it)."""

    name: str
    profiler: Profiler | None
    _binds: bool

    def _bound(self, args: tuple[Any, ...]) -> Profiler | None: ...
    def _begin(self, profiler: Profiler | None) -> Entry: ...
    async def _abegin(self, profiler: Profiler | None) -> Entry: ...
    def _end(self, entry: Entry) -> None: ...
    async def _aend(self, entry: Entry) -> None: ...
    def _call(self, func: Func, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


def decorate(annotation: Word, func: Any) -> Any:
    """``func`` as entries of ``annotation``: a plain function or method, a ``staticmethod`` or
    ``classmethod`` (above or below it), an ``async def``, a generator or an async generator
    function; above a ``property`` or ``functools.cached_property``, its getter (the attribute
    stays one). Anything else that cannot be called is a ConfigError, raised here."""
    if isinstance(func, (staticmethod, classmethod)):
        return type(func)(decorate(annotation, func.__func__))
    if isinstance(func, property):
        if func.fget is None:
            raise ConfigError(f"{annotation.name!r} decorates a property with no getter: nothing to time")
        return func.getter(decorate(annotation, func.fget))
    if isinstance(func, functools.cached_property):
        cached = functools.cached_property(decorate(annotation, func.func))
        cached.attrname, cached.__doc__ = func.attrname, func.__doc__
        return cached
    if not callable(func):
        raise ConfigError(
            f"{annotation.name!r} cannot decorate a {type(func).__name__} object: "
            "decorate a function, a method or a property"
        )
    if inspect.iscoroutinefunction(func):
        return _coroutine(annotation, func)
    if inspect.isasyncgenfunction(func):
        return _async_generator(annotation, func)
    if inspect.isgeneratorfunction(func):
        return _generator(annotation, func)
    return _plain(annotation, func)


def _process(annotation: Word) -> Process:
    """The process state whose registry says whether a call of ``annotation`` is an entry: its
    profiler's (fixed for the profiler's life), else this process's. A word that binds its
    profiler from the call's arguments (verl's ``annotate``) binds one of this process."""
    profiler = annotation.profiler
    return PROCESS if profiler is None else profiler.process


def _plain(annotation: Word, func: Func) -> Func:
    process = _process(annotation)

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        if process.registry.on:
            return annotation._call(func, args, kwargs)
        return func(*args, **kwargs)

    return call


def _coroutine(annotation: Word, func: Func) -> Func:
    process, binds = _process(annotation), annotation._binds

    @functools.wraps(func)
    async def call(*args: Any, **kwargs: Any) -> Any:
        if not process.registry.on:
            return await func(*args, **kwargs)
        entry = await annotation._abegin(annotation._bound(args) if binds else annotation.profiler)
        try:
            return await Driven(func(*args, **kwargs), Slices(entry))
        finally:
            await annotation._aend(entry)

    return call


def _generator(annotation: Word, func: Func) -> Func:
    process, binds = _process(annotation), annotation._binds

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not process.registry.on:
            return (yield from func(*args, **kwargs))
        entry = annotation._begin(annotation._bound(args) if binds else annotation.profiler)
        try:
            return (yield from drive(func(*args, **kwargs), Slices(entry), True))
        finally:
            annotation._end(entry)

    return call


def _async_generator(annotation: Word, func: Func) -> Func:
    process, binds = _process(annotation), annotation._binds

    @functools.wraps(func)
    async def call(*args: Any, **kwargs: Any) -> Any:
        body = func(*args, **kwargs)
        entry = None
        if process.registry.on:
            entry = await annotation._abegin(annotation._bound(args) if binds else annotation.profiler)
        slices = None if entry is None else Slices(entry)
        send: Any = None
        error: BaseException | None = None
        try:  # delegate (no `yield from` in an async generator): values out, asend/athrow/aclose in
            while True:
                step = body.asend(send) if error is None else body.athrow(error)
                try:
                    value = await (step if slices is None else Driven(step, slices))
                except StopAsyncIteration:
                    return
                if slices is not None:
                    slices.suspend(True)
                try:
                    send, error = (yield value), None
                except GeneratorExit:
                    await _closed(body, slices)
                    raise
                except BaseException as exc:  # handed to the body, which decides
                    send, error = None, exc
                if slices is not None:
                    slices.resume(True)
        finally:
            if entry is not None:
                await annotation._aend(entry)

    return call


async def _closed(body: Any, slices: Slices | None) -> None:
    """An async generator closed at a ``yield``: its entries back, then its own cleanup (what
    it held that the event loop closed first ends here)."""
    if slices is None:
        await body.aclose()
        return
    slices.resume(True)
    await Driven(body.aclose(), slices)
    slices.closed()
