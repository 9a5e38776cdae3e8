"""``rollout_window``: profile the selected rollout engine replicas around generation."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl.config.validate import MAX_WIDE_INDEX, require_int
from profdsl.core.ranks import replicas_for_ranks
from profdsl.errors import ConfigError
from profdsl.rollout.calls import call_all, call_all_async, in_daemon_thread
from profdsl.rollout.run import RolloutRun
from profdsl.runtime import context
from profdsl.runtime.meter import leave_span, open_span
from profdsl.runtime.process import PROCESS

if TYPE_CHECKING:
    from profdsl.runtime.profiler import Profiler

__all__ = ["rollout_window"]

F = TypeVar("F", bound=Callable[..., Any])


class rollout_window:
    """Profile the rollout engine replicas of the current profiled step around generation.

    ``engines[r]`` is replica ``r``: an object with ``start_profile()`` and ``stop_profile()``
    (plain or ``async``), or a Ray actor handle. Config ranks are global GPU ranks; replica ``r``
    owns ``[r*W, (r+1)*W)`` with ``W = replica_world_size``. Selected replicas are started and
    stopped concurrently, each call bounded; failures are logged and recorded, never raised.
    After stop, their traces move from ``rollout_trace_dir(save_path, r)`` into ``save_path``.
    An unprofiled step, a disabled config or no started profiler touches no engine. One object
    may be entered from several threads or tasks: each entry keeps its own state. With
    ``Metrics(enabled=True)`` every entry is also timed as stage ``name`` (docs/metrics.md),
    profiled step or not.

    Args:
        engines: the replicas, in replica order.
        replica_world_size: GPUs per replica (``tp * dp * pp``).
        profiler: the profiler whose step decides (otherwise the one in a profiled step for
            ``role``, or the first).
        role: which profiler in a profiled step to follow.
        name: the stage name of its always-on timing (e.g. ``"gen"``, as verl logs it).

    Raises:
        ConfigError: ``replica_world_size`` is not an integer >= 1, the replicas' ranks would
            not fit in trace names (``MAX_WIDE_INDEX`` ranks in all), or ``name`` is not a
            non-empty string.

    Examples:
        >>> engines = []                       # e.g. [VllmEngine(llm) for llm in replicas]
        >>> with rollout_window(engines, replica_world_size=4):
        ...     outputs = ["generated"]
        >>> @rollout_window(engines, replica_world_size=4)
        ... def generate(prompts):
        ...     return prompts
        >>> generate(["p"])
        ['p']
    """

    def __init__(self, engines: Sequence[Any], *, replica_world_size: int = 1,
                 profiler: Profiler | None = None, role: str | None = None,
                 name: str = "rollout") -> None:
        if name.__class__ is not str or not name:
            raise ConfigError(f"rollout_window name must be a non-empty string, got {name!r}")
        self.name = name
        self.engines = list(engines)
        # a replica's ranks must fit trace names: no more than MAX_WIDE_INDEX ranks in all
        require_int("rollout_window replica_world_size", replica_world_size, 1,
                    MAX_WIDE_INDEX // max(1, len(self.engines)))
        self.replica_world_size = replica_world_size
        self.profiler, self.role = profiler, role

    def _plan(self) -> RolloutRun | None:
        profiler = self.profiler
        if profiler is None:
            profiler = PROCESS.registry.find_stepping(self.role)
        elif profiler not in PROCESS.registry.stepping:
            profiler = None
        if profiler is None or not profiler.config.enable or not self.engines:
            return None
        config = profiler.config
        replicas = sorted(replicas_for_ranks(config.ranks, self.replica_world_size,
                                             all_ranks=config.all_ranks, num_replicas=len(self.engines)))
        return RolloutRun(profiler, self.engines, replicas, self.replica_world_size) if replicas else None

    def _nested(self) -> bool:
        """Whether an outer entry of this object is open in this context: a nested entry starts
        nothing (the engines already run) and marks its place, so its exit stops nothing."""
        if context.holds(self, context.top()):
            context.push(self, None)
            return True
        return False

    def _push(self, run: RolloutRun | None) -> None:
        if run is not None:
            context.push(self, run)

    def _pop(self) -> RolloutRun | None:
        entry = context.remove(self, by_key=True)
        return None if entry is None else entry.value

    def _time(self) -> None:
        """Open this entry's metrics span (generation only: after the engines started)."""
        if PROCESS.registry.meters:
            open_span(self, self.name, self.role, self.profiler)

    def __enter__(self) -> rollout_window:
        if self._nested():
            self._time()
            return self
        run = self._plan()
        if run is not None:
            run.started_from(call_all(run.selected, "start_profile", run.start_kwargs(),
                                      run.config.rollout.start_timeout_s))
        self._push(run)
        self._time()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        leave_span(self)
        run = self._pop()
        if run is not None:
            run.record(call_all(run.started, "stop_profile", {}, run.config.rollout.stop_timeout_s),
                       "stop_profile")
            run.relocate()

    async def __aenter__(self) -> rollout_window:
        if self._nested():
            self._time()
            return self
        run = self._plan()
        if run is not None:
            run.started_from(await call_all_async(run.selected, "start_profile", run.start_kwargs(),
                                                  run.config.rollout.start_timeout_s))
        self._push(run)
        self._time()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        leave_span(self)
        run = self._pop()
        if run is not None:
            run.record(await call_all_async(run.started, "stop_profile", {},
                                            run.config.rollout.stop_timeout_s), "stop_profile")
            await in_daemon_thread(run.relocate)

    def __call__(self, func: F) -> F:
        """Decorate a generation function (plain, method, ``async def`` or generator)."""
        registry = PROCESS.registry
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if not registry.stepping and not registry.meters:  # nothing profiled or timed
                    return await func(*args, **kwargs)
                async with self:
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
                if not registry.stepping and not registry.meters:  # nothing profiled or timed
                    return (yield from func(*args, **kwargs))
                with self:
                    return (yield from func(*args, **kwargs))

            return generator_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not registry.stepping and not registry.meters:  # nothing profiled or timed
                return func(*args, **kwargs)
            with self:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
