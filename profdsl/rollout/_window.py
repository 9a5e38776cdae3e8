"""``rollout_window``: profile the selected rollout engine replicas around generation."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from profdsl._dsl.base import Annotation, registry_of, stop
from profdsl._dsl.stage import check_binding, check_name
from profdsl._runtime import context
from profdsl._runtime.handles import Handle
from profdsl.config._checks import MAX_WIDE_INDEX, require_int
from profdsl.core._kinds import GENERATION
from profdsl.core._log import internal_error
from profdsl.rollout._calls import call_all, call_all_async, in_daemon_thread
from profdsl.rollout._run import RolloutRun

if TYPE_CHECKING:
    from profdsl._capture.annotators import Annotator
    from profdsl._runtime.context import Entry
    from profdsl._runtime.profiler import Profiler
    from profdsl._runtime.recorder import NullRecorder, Recorder
    from profdsl._runtime.step import StepContext

__all__ = ["rollout_window"]


class _Engines(Handle):
    """A rollout entry's handle: its region in the trainer's trace, when the trainer's step
    records one (none: no annotator), which follows a suspended body as every region does; and
    the replicas its run started (``run``), profiled for the whole entry (a suspended decorated
    body does not stop them)."""

    __slots__ = ("run",)

    def __init__(
        self,
        run: RolloutRun | None,
        annotator: Annotator | None,
        name: str,
        color: int | None = None,
        owner: Recorder | None = None,
    ) -> None:
        self.run = run
        super().__init__(annotator, name, color, owner)

    def _close_region(self) -> RolloutRun | None:
        """Close the region, once; the run whose replicas are still to stop (None: none, or
        closed already)."""
        if self.closed:
            return None
        super().close()
        run, self.run = self.run, None
        return run

    def close(self) -> None:
        """Close the region (what stopping the engines costs is not generation), then stop the
        started replicas and move their traces into save_path (the step's profiling overhead);
        once."""
        run = self._close_region()
        if run is not None:
            with run.waiting():
                run.record(call_all(*run.stop_call()), "stop_profile")
                run.relocate()

    async def aclose(self) -> None:
        """:meth:`close` for an event loop."""
        run = self._close_region()
        if run is not None:
            with run.waiting():
                run.record(await call_all_async(*run.stop_call()), "stop_profile")
                await in_daemon_thread(run.relocate)


class rollout_window(Annotation):
    """Profile the rollout engine replicas of the current profiled step around generation.

    ``engines[r]`` is replica ``r``: an object with ``start_profile()`` and ``stop_profile()``
    (plain or ``async``), or a Ray actor handle. Config ranks are global GPU ranks; replica ``r``
    owns ``[r*W, (r+1)*W)`` with ``W = replica_world_size``. Selected replicas are started and
    stopped concurrently, each call bounded; failures are logged and recorded, never raised.
    After stop, their traces move from ``rollout_trace_dir(save_path, r)`` into ``save_path``.
    An unprofiled step, a disabled config or no started profiler touches no engine. One object
    may be entered from several threads or tasks: each entry keeps its own state. With
    ``Metrics(enabled=True)`` every entry is also timed as stage ``name`` (docs/metrics.md),
    profiled step or not. Its kind of work in the step ledger is ``generation``
    (``docs/ledger.md``), whatever its name; the time the caller waits on the engines' profilers
    (their start, their stop and moving their traces) is the step's profiling ``overhead``.

    Args:
        engines: the replicas, in replica order.
        replica_world_size: GPUs per replica (``tp * dp * pp``).
        profiler: the profiler whose step decides (otherwise the one in a profiled step for
            ``role``, or the first).
        role: which profiler in a profiled step to follow.
        name: the stage name of its always-on timing (e.g. ``"gen"``, as verl logs it).

    Raises:
        ConfigError: ``replica_world_size`` is not an integer >= 1, the replicas' ranks would
            not fit in trace names (``MAX_WIDE_INDEX`` ranks in all), ``name`` or ``role`` is
            not a non-empty string, or ``profiler`` is not a Profiler.

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

    __slots__ = ("engines", "name", "replica_world_size")
    #: Its region and timing are generation in the step ledger (``docs/ledger.md``).
    kind = GENERATION

    def __init__(
        self,
        engines: Sequence[Any],
        *,
        replica_world_size: int = 1,
        profiler: Profiler | None = None,
        role: str | None = None,
        name: str = "rollout",
    ) -> None:
        self.name = check_name("rollout_window", name)
        self.engines = list(engines)
        # a replica's ranks must fit trace names: no more than MAX_WIDE_INDEX ranks in all
        require_int(
            "rollout_window replica_world_size", replica_world_size, 1, MAX_WIDE_INDEX // max(1, len(self.engines))
        )
        self.replica_world_size = replica_world_size
        check_binding("rollout_window", role, profiler)
        self.profiler, self.role = profiler, role

    def _run(self, profiler: Profiler | None, steps: tuple[StepContext, ...], top: Entry | None) -> RolloutRun | None:
        """This entry's rollout, or None: nothing profiled, or an outer entry of this object that
        started the engines is open in this context (they already run; this exit must stop
        nothing). The step that decides is ``profiler``'s, else the first profiled one among
        ``steps`` (of ``role``): profiled whatever its rank, so that a driver's step clock,
        which captures nothing itself, decides when the engines are profiled."""
        try:
            if any(e.key is self and e.handle is not None for e in context.walk(top)):
                return None
            if profiler is None:
                step = next((s for s in steps if s.profiled and self.role in (None, s.role)), None)
            else:
                step = profiler.step_context
            if step is None or not step.profiled or not step.config.enable or not self.engines:
                return None
            replicas = sorted(step.plan.selection.replicas(self.replica_world_size, len(self.engines)))
            return RolloutRun(step, self.engines, replicas, self.replica_world_size) if replicas else None
        except Exception as exc:
            internal_error("rollout_window entry", exc)
            return None

    def _opened(
        self, run: RolloutRun | None, profiler: Profiler | None, steps: tuple[StepContext, ...], top: Entry | None
    ) -> _Engines | None:
        """This entry's handle: ``run``'s engines and, when the trainer's step records one (in
        discrete mode, only inside a stage), its region there. None when it has neither.
        Opened once the engines run (starting them is no generation). Never raises."""
        try:
            recorder: Recorder | NullRecorder | None = (
                next((s.recorder for s in steps if s.recorder is not None and self.role in (None, s.role)), None)
                if profiler is None
                else profiler.recorder
            )
            if recorder is not None and recorder.active:
                handle = recorder.region(self.name, top, functools.partial(_Engines, run), self.kind)
                if handle is not None:
                    return handle
        except Exception as exc:
            internal_error("rollout_window region", exc)
        return None if run is None else _Engines(run, None, self.name)

    def _handle(self, profiler: Profiler | None, steps: tuple[StepContext, ...], top: Entry | None) -> _Engines | None:
        run = self._run(profiler, steps, top)
        if run is not None:
            with run.waiting():
                run.started_from(call_all(*run.start_call()))
        return self._opened(run, profiler, steps, top)

    async def _ahandle(
        self, profiler: Profiler | None, steps: tuple[StepContext, ...], top: Entry | None
    ) -> _Engines | None:
        run = self._run(profiler, steps, top)
        if run is not None:
            with run.waiting():
                run.started_from(await call_all_async(*run.start_call()))
        return self._opened(run, profiler, steps, top)

    async def _aend(self, entry: Entry) -> None:
        handle = stop(entry)
        if handle is not None:
            await handle.aclose()

    async def __aenter__(self) -> rollout_window:
        if registry_of(self.profiler).on:
            await self._abegin(self.profiler, True)
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if registry_of(self.profiler).on:
            entry = self._leaving()
            if entry is not None:
                await self._aend(entry)
