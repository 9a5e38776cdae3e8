"""``rollout_window``: profile the selected rollout engine replicas around generation."""

from __future__ import annotations

import functools
import inspect

import attrs
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl import artifacts
from profdsl._context import REGISTRY
from profdsl._log import once
from profdsl._validate import is_int
from profdsl.config import ProfilerConfig
from profdsl.errors import ConfigError
from profdsl.manifest import append_record, make_record
from profdsl.ranks import replicas_for_ranks
from profdsl.rollout import rollout_trace_dir, trace_prefix
from profdsl.rollout._calls import Outcome, accepts, call_all, call_all_async, in_daemon_thread
from profdsl.rollout.relocate import plan_rollout

if TYPE_CHECKING:
    from profdsl.session import Profiler

__all__ = ["rollout_window"]

F = TypeVar("F", bound=Callable[..., Any])


class _Run:
    """One profiled rollout: the selected replicas of one step."""

    def __init__(self, profiler: Profiler, engines: Sequence[Any], replicas: list[int],
                 replica_world_size: int) -> None:
        self.config = profiler.config
        self.step = profiler.current_step
        self.width = replica_world_size
        self.world_size = len(engines) * replica_world_size
        self.selected = {r: engines[r] for r in replicas}
        self.started: dict[int, Any] = {}

    def start_kwargs(self) -> dict[int, dict[str, Any]]:
        return {r: {"profile_prefix": trace_prefix(self.step, r)}
                for r, engine in self.selected.items()
                if accepts(engine, "start_profile", "profile_prefix")}

    def started_from(self, outcomes: list[Outcome]) -> None:
        self.record(outcomes, "start_profile")
        # A replica that timed out may still have started: it is stopped too.
        self.started = {o.replica: self.selected[o.replica] for o in outcomes if o.status != "failed"}

    def record(self, outcomes: list[Outcome], call: str) -> None:
        for outcome in outcomes:
            if outcome.status == "ok":
                continue
            once(f"rollout:{call}:{outcome.replica}:{outcome.status}", logging.WARNING,
                 "profdsl: rollout replica %s %s %s at step %s: %s", outcome.replica, call,
                 outcome.status, self.step, outcome.error)
            append_record(self.config.save_path, make_record(
                "rollout", None, status=outcome.status, role="rollout", step=self.step,
                replica=outcome.replica, call=call, error=outcome.error, host=socket.gethostname(),
                pid=os.getpid()))

    def relocate(self) -> None:
        """Move the selected ranks' engine files into save_path, on the node that wrote them."""
        if not self.config.relocate_results:
            return
        here, remote = _nodes(self.selected)
        for node, replicas in remote.items():
            try:
                from profdsl.ray import run_on_node

                absolute = attrs.evolve(self.config, save_path=os.path.abspath(self.config.save_path))
                run_on_node(node, relocate_replicas, absolute, self.step, replicas, self.width,
                            self.world_size, node, timeout=self.config.rollout.flush_wait_s + 120)
            except Exception as exc:
                once(f"rollout-remote:{node}", logging.ERROR,
                     "profdsl: moving rollout traces on node %s failed: %s", node, exc)
        relocate_replicas(self.config, self.step, here, self.width, self.world_size,
                          _this_node() if remote else None)


def _this_node() -> str | None:
    from profdsl.ray import current_node

    return current_node()


def _nodes(engines: dict[int, Any]) -> tuple[list[int], dict[str, list[int]]]:
    """Replicas whose files are on this node, and those on other Ray nodes (by node id)."""
    here: list[int] = []
    remote: dict[str, list[int]] = {}
    if "ray" not in sys.modules or not any(hasattr(e, "_actor_id") for e in engines.values()):
        return sorted(engines), remote
    from profdsl.ray import current_node, node_of

    this = current_node()
    for replica, engine in sorted(engines.items()):
        node = node_of(engine) if hasattr(engine, "_actor_id") else None
        if node is None or node == this:
            here.append(replica)
        else:
            remote.setdefault(node, []).append(replica)
    return here, remote


def relocate_replicas(config: ProfilerConfig, step: int | None, replicas: Sequence[int],
                      width: int, world_size: int, node: str | None = None) -> None:
    """Move replicas' engine files into save_path on this node (runs as a pinned Ray task for
    replicas on other nodes); bounded by ``rollout.flush_wait_s``; never raises."""
    # Empty ranks select global rank 0, as on the training side.
    keep = None if config.all_ranks else set(config.ranks or (0,))
    plan: list[artifacts.Move | artifacts.Skip] = []
    for replica in replicas:
        source = rollout_trace_dir(config.save_path, replica)
        try:
            names = os.listdir(source)
        except OSError:
            continue
        plan += plan_rollout(
            names, source_dir=source, replica=replica, replica_world_size=width, keep=keep,
            step=step, world_size=world_size, host=socket.gethostname(), pid=os.getpid(),
            time_ms=time.time_ns() // 1_000_000, node=node)
    try:
        artifacts.apply(plan, config.save_path, wait_s=config.rollout.flush_wait_s,
                        record_incomplete=True)
    except Exception as exc:
        once("rollout-relocate", logging.ERROR, "profdsl: moving rollout traces failed: %s", exc)


class rollout_window:  # noqa: N801 (a lower-case DSL word)
    """Profile the rollout engine replicas of the current profiled step around generation.

    ``engines[r]`` is replica ``r``: an object with ``start_profile()`` and ``stop_profile()``
    (plain or ``async``), or a Ray actor handle. Config ranks are global GPU ranks; replica ``r``
    owns ``[r*W, (r+1)*W)`` with ``W = replica_world_size``. Selected replicas are started and
    stopped concurrently, each call bounded; failures are logged and recorded, never raised.
    After stop, their traces move from ``rollout_trace_dir(save_path, r)`` into ``save_path``.
    An unprofiled step, a disabled config or no started profiler touches no engine.

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
                 profiler: Profiler | None = None, role: str | None = None) -> None:
        if not is_int(replica_world_size) or replica_world_size < 1:
            raise ConfigError(
                f"rollout_window replica_world_size must be an integer >= 1, got {replica_world_size!r}")
        self.engines = list(engines)
        self.replica_world_size = replica_world_size
        self.profiler, self.role = profiler, role
        self._runs: list[_Run | None] = []

    def _fresh(self) -> rollout_window:
        return rollout_window(self.engines, replica_world_size=self.replica_world_size,
                              profiler=self.profiler, role=self.role)

    def _plan(self) -> _Run | None:
        profiler = self.profiler
        if profiler is None:
            profiler = REGISTRY.find_stepping(self.role)
        elif profiler not in REGISTRY.stepping:
            profiler = None
        if profiler is None or not profiler.config.enable or not self.engines:
            return None
        config = profiler.config
        replicas = sorted(replicas_for_ranks(config.ranks, self.replica_world_size,
                                             all_ranks=config.all_ranks, num_replicas=len(self.engines)))
        return _Run(profiler, self.engines, replicas, self.replica_world_size) if replicas else None

    def __enter__(self) -> rollout_window:
        run = self._plan()
        if run is not None:
            run.started_from(call_all(run.selected, "start_profile", run.start_kwargs(),
                                      run.config.rollout.start_timeout_s))
        self._runs.append(run)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        run = self._runs.pop() if self._runs else None
        if run is not None:
            run.record(call_all(run.started, "stop_profile", {}, run.config.rollout.stop_timeout_s),
                       "stop_profile")
            run.relocate()

    async def __aenter__(self) -> rollout_window:
        run = self._plan()
        if run is not None:
            run.started_from(await call_all_async(run.selected, "start_profile", run.start_kwargs(),
                                                  run.config.rollout.start_timeout_s))
        self._runs.append(run)
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        import asyncio

        run = self._runs.pop() if self._runs else None
        if run is not None:
            run.record(await call_all_async(run.started, "stop_profile", {},
                                            run.config.rollout.stop_timeout_s), "stop_profile")
            await in_daemon_thread(run.relocate)

    def __call__(self, func: F) -> F:
        """Decorate a generation function (plain, method, ``async def`` or generator)."""
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if not REGISTRY.stepping:  # nothing is profiled: no window at all
                    return await func(*args, **kwargs)
                async with self._fresh():
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self._fresh():
                    return (yield from func(*args, **kwargs))

            return generator_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not REGISTRY.stepping:  # nothing is profiled: no window at all
                return func(*args, **kwargs)
            with self._fresh():
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
