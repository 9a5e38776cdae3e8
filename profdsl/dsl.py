"""The DSL: ``profile_stage`` and ``mini_batch_window``, as ``with`` blocks and decorators.

When nothing is being profiled each costs one attribute check (``REGISTRY.active``): no torch
call, no allocation in a decorated call. Whatever the DSL does goes through a started
:class:`~profdsl.session.Profiler`; a fault inside profdsl is logged once and swallowed, while the
wrapped code's results and exceptions pass through untouched.

Generator and ``async def`` stages open their region around each resumption of the body, not
across its ``yield``/``await`` points, so regions of interleaved tasks on one thread stay
properly nested (see ``docs/dsl.md``).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl._context import REGISTRY
from profdsl._log import once
from profdsl._slices import drive_coroutine, drive_generator
from profdsl.errors import ConfigError

if TYPE_CHECKING:
    from profdsl.session import Profiler

__all__ = ["mini_batch_window", "profile_stage"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _fault(where: str, exc: BaseException) -> None:
    once(f"dsl:{where}:{type(exc).__name__}", logging.ERROR,
         "profdsl: internal error in %s (profiling continues without it): %r", where, exc)


def _find(role: str | None, profiler: Profiler | None) -> Profiler | None:
    if profiler is not None:
        return profiler if profiler.is_profiling else None
    return REGISTRY.find(role)


class _Region:
    """What one entry of a stage or mini-batch opened; closed exactly once.

    ``suspend``/``resume`` close and reopen the annotation around the ``await``/``yield`` points
    of an async or generator body, so that it never spans code of other tasks.
    """

    __slots__ = ("profiler", "label", "session", "token", "pushed", "mini_batch")

    def __init__(self, profiler: Profiler, label: str, session: Any, mini_batch: bool) -> None:
        self.profiler, self.label, self.session, self.mini_batch = profiler, label, session, mini_batch
        self.token = profiler._push(label)
        self.pushed = True

    def suspend(self) -> None:
        try:
            if self.pushed:
                self.pushed = False
                token, self.token = self.token, None  # end the region object here, not in a GC
                self.profiler._pop(token)
        except Exception as exc:
            _fault("region suspend", exc)

    def resume(self) -> None:
        try:
            if not self.pushed:
                self.token = self.profiler._push(self.label)
                self.pushed = True
        except Exception as exc:
            _fault("region resume", exc)

    def close(self) -> None:
        self.suspend()
        try:
            if self.mini_batch:
                self.profiler._mini_batch_done()
            elif self.session is not None:
                self.session.close()
        except Exception as exc:
            _fault("region close", exc)


def _check_name(kind: str, name: object) -> str:
    if name.__class__ is not str or not name:
        raise ConfigError(f"{kind} name must be a non-empty string, got {name!r}")
    return name


class _Annotation:
    """The ``with`` and decorator behaviour shared by the DSL words; subclasses say what one
    entry opens (``_begin``) and fill the slots ``profiler`` and ``_open``."""

    __slots__ = ("profiler", "_open")
    profiler: Profiler | None
    _open: list[_Region] | None

    def _begin(self) -> _Region | None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        if not REGISTRY.active and self.profiler is None:
            return self
        region = self._begin()
        if region is not None:
            if self._open is None:
                self._open = []
            self._open.append(region)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._open:
            self._open.pop().close()

    def __call__(self, func: F) -> F:
        """Decorate a function, method, ``async def`` or generator function."""
        return _decorate(func, self._begin)  # type: ignore[return-value]


class profile_stage(_Annotation):  # noqa: N801 (a lower-case DSL word, like nvtx.annotate)
    """Mark a named stage of training: a ``record_function`` region (and NVTX range).

    In discrete mode the outermost stage of a profiled step writes its own trace; with
    ``scheduled=True`` it runs the configured schedule, one trace per recorded mini-batch window.

    Args:
        name: the stage's name, e.g. ``"update_actor"``.
        scheduled: in discrete mode, follow the ``Schedule`` over this stage's mini-batches.
        role: which started profiler to use when several roles share a process.
        profiler: an explicit profiler (otherwise the one started for ``role``).
        color: reserved for NVTX colours (the role's colour is used).

    Examples:
        >>> with profile_stage("compute_values"):
        ...     pass
        >>> @profile_stage("update_actor", scheduled=True)
        ... def update_actor(batch):
        ...     return len(batch)
        >>> update_actor([1, 2])
        2
    """

    __slots__ = ("name", "scheduled", "role", "color")

    def __init__(self, name: str, *, scheduled: bool = False, role: str | None = None,
                 profiler: Profiler | None = None, color: int | str | None = None) -> None:
        # Kept flat (no helper call, no tuple unpacking): this runs for every `with` block.
        if name.__class__ is not str or not name:
            _check_name("profile_stage", name)
        self.name = name
        self.scheduled = scheduled
        self.role = role
        self.profiler = profiler
        self.color = color
        self._open: list[_Region] | None = None

    def _begin(self) -> _Region | None:
        profiler = _find(self.role, self.profiler)
        if profiler is None:
            return None
        session = None
        try:
            session = profiler._stage_begin(self.name, self.scheduled)
            return _Region(profiler, self.name, session, False)
        except Exception as exc:
            _fault("stage begin", exc)
            if session is not None:  # never leave a session open that no region will close
                session.close()
            return None



class mini_batch_window(_Annotation):  # noqa: N801
    """One update mini-batch: a region ``f"{name}{i}"`` that advances the schedule at its end.

    Iterate it over the mini-batches, or use it as a ``with`` block around one mini-batch, or as a
    decorator of a per-mini-batch function. ``i`` counts the mini-batches of the current stage (or
    step, in continuous mode).

    Examples:
        >>> [mb for mb in mini_batch_window([10, 20])]
        [10, 20]
        >>> with mini_batch_window():
        ...     pass
        >>> @mini_batch_window(name="micro_batch")
        ... def train_micro_batch(mb):
        ...     return mb * 2
        >>> train_micro_batch(4)
        8
    """

    __slots__ = ("iterable", "name", "role")

    def __init__(self, iterable: Iterable[T] | None = None, *, name: str = "mini_batch",
                 role: str | None = None, profiler: Profiler | None = None) -> None:
        self.iterable, self.name = iterable, _check_name("mini_batch_window", name)
        self.role, self.profiler = role, profiler
        self._open: list[_Region] | None = None

    def _begin(self) -> _Region | None:
        profiler = _find(self.role, self.profiler)
        if profiler is None:
            return None
        try:
            return _Region(profiler, profiler._next_mini_batch(self.name), None, True)
        except Exception as exc:
            _fault("mini-batch begin", exc)
            return None

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("mini_batch_window() needs an iterable to be iterated; without one, "
                            "use it as a `with` block or a decorator")
        if not REGISTRY.active and self.profiler is None:
            return iter(self.iterable)  # decided once: a plain loop costs nothing per item
        return self._iterate(self.iterable)

    def _iterate(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            region = self._begin()
            try:
                yield item
            finally:
                if region is not None:
                    region.close()



def _decorate(func: Callable[..., Any], begin: Callable[[], _Region | None]) -> Callable[..., Any]:
    registry = REGISTRY
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.active:
                return await func(*args, **kwargs)
            region = begin()
            if region is None:
                return await func(*args, **kwargs)
            try:
                return await drive_coroutine(func(*args, **kwargs), region)
            finally:
                region.close()

        return async_wrapper
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.active:
                return (yield from func(*args, **kwargs))
            region = begin()
            if region is None:
                return (yield from func(*args, **kwargs))
            try:
                return (yield from drive_generator(func(*args, **kwargs), region))
            finally:
                region.close()

        return generator_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not registry.active:
            return func(*args, **kwargs)
        region = begin()
        if region is None:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        finally:
            region.close()

    return wrapper
