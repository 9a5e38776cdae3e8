"""verl's profiler surface over profdsl: ``DistProfiler``, its ``annotate`` decorator and the
``DistProfilerExtension`` worker mixin, so that a verl-style worker runs unchanged after
swapping ``from verl.utils.profiler import ...`` for ``from profdsl.integrations.verl import ...``.

Behind it: one :class:`~profdsl._runtime.profiler.Profiler` per ``DistProfiler``;
``annotate(role=..., scheduled=...)`` is :class:`~profdsl._dsl.stage.profile_stage`; ``step()``, called
by verl's update loops once per mini-batch, ends one update mini-batch
(:class:`~profdsl._dsl.mini_batch.mini_batch_window`'s unit). Inside a ``scheduled=True`` stage,
mini-batch ``i`` spans from the stage's start (or the ``step()`` before) to the ``i``-th ``step()``;
the one the last ``step()`` opens holds nothing and is withdrawn when the stage ends, so no empty
window is written (verl's bugs B1 and B2). Elsewhere (verl's critic and SFT loops, which call
``step()`` outside an annotated stage) a ``step()`` counts a mini-batch without pausing collection.
The mini-batch regions are the worker's own ``record_function(f"mini_batch{i}")``; profdsl opens none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl._dsl.base import FROM_RECORDER as _FROM_RECORDER
from profdsl._dsl.stage import profile_stage
from profdsl._runtime import context
from profdsl._runtime.handles import Handle
from profdsl._runtime.plan import resolve
from profdsl._runtime.profiler import Profiler
from profdsl.config import ProfilerConfig
from profdsl.config._checks import COLOR_NAMES, is_int, to_color
from profdsl.core._discovery import discover_world
from profdsl.core._log import internal_error
from profdsl.errors import ConfigError
from profdsl.integrations.verl._trainer_steps import TrainerSteps
from profdsl.integrations.verl.config import MISSING, map_block, plain

if TYPE_CHECKING:
    from profdsl._runtime.context import Entry

__all__ = ["DistProfiler", "DistProfilerExtension", "annotate"]

F = TypeVar("F", bound=Callable[..., Any])

#: The mini-batch base name of verl's update loops (``mini_batch{i}``).
MINI_BATCH = "mini_batch"
#: Colour names verl's workers use that NVTX's short list lacks.
_MORE_COLORS = {
    "olive": "#808000",
    "black": "#000000",
    "gray": "#808080",
    "grey": "#808080",
    "magenta": "#FF00FF",
    "brown": "#A52A2A",
    "pink": "#FFC0CB",
}


class _Scope:
    """The mini-batches of one ``scheduled=True`` stage call, on its context's stack."""

    __slots__ = ("current", "profiler")

    def __init__(self, profiler: Profiler) -> None:
        self.profiler = profiler
        self.current: Handle | None = None

    def open_next(self) -> None:
        self.current = self.profiler.recorder.mini_batch(MINI_BATCH, context.top(), region=False)

    def step(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            current.close()
        self.open_next()

    def end(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            current.withdraw()


def _open_scope(profiler: Profiler) -> None:
    """The mini-batches of a scheduled stage's call, counted by ``step()`` inside it."""
    try:
        scope = _Scope(profiler)
        context.push(scope)
        scope.open_next()
    except Exception as exc:
        internal_error("verl mini-batch scope", exc)


def _close_scope(stage: Entry) -> None:
    """End the scope opened above ``stage``'s entry: the mini-batch the last ``step()`` opened
    holds nothing and is withdrawn."""
    for entry in context.walk(context.top()):
        if entry is stage:
            return
        if isinstance(entry.key, _Scope):
            context.remove(entry)
            entry.key.end()
            return


class _Annotated(profile_stage):
    """``DistProfiler.annotate``'s stage: a ``profile_stage`` of the calling worker's profiler
    (``self.profiler``), with verl's mini-batch scope inside when ``scheduled``."""

    __slots__ = ()
    _binds = True

    def _bound(self, args: tuple[Any, ...]) -> Profiler | None:
        facade = getattr(args[0], "profiler", None) if args else None
        if not isinstance(facade, DistProfiler):
            return None
        if facade._steps.counting and not any(isinstance(e.key, _Annotated) for e in context.walk(context.top())):
            facade._steps.stage_begins(facade.profiler)
        return facade.profiler

    def _begin(self, profiler: Profiler | None, listed: bool = False, handle: Any = _FROM_RECORDER) -> Entry:
        if profiler is None:  # no worker profiler, or one never started: nothing to record
            return context.push(self)
        entry = super()._begin(profiler, listed, handle)
        if self.scheduled and profiler.is_profiling:
            _open_scope(profiler)
        return entry

    def _end(self, entry: Entry) -> None:
        if self.scheduled:
            _close_scope(entry)
        super()._end(entry)


def _color(value: object) -> int | None:
    if isinstance(value, str) and value not in COLOR_NAMES and value.lower() in _MORE_COLORS:
        value = _MORE_COLORS[value.lower()]
    return to_color("DistProfiler.annotate color", value)


def annotate(
    message: str | None = None,
    color: str | int | None = None,
    domain: str | None = None,
    category: str | None = None,
    **kwargs_outer: Any,
) -> Callable[[F], F]:
    """Decorate a worker method as a stage: ``@DistProfiler.annotate(role="actor_update",
    color="red", scheduled=True)``. The stage is named ``message or role or`` the method's
    name, and uses the instance's ``self.profiler``; ``domain`` and ``category`` are NVTX
    details profdsl does not use (its ranges live in the ``profdsl`` domain).

    Raises:
        ConfigError: a colour that is neither a colour name nor ``#RRGGBB``.
    """
    scheduled = bool(kwargs_outer.get("scheduled", False))
    ink = None if color is None else _color(color)

    def decorate(func: F) -> F:
        name = message or kwargs_outer.get("role") or func.__name__
        return _Annotated(name, scheduled=scheduled, color=ink)(func)

    return decorate


class DistProfiler:
    """verl's per-worker profiler, backed by a profdsl :class:`Profiler`.

    Args:
        rank: this worker's global rank.
        config: a profdsl :class:`ProfilerConfig` (the trainer's, from
            :func:`~profdsl.integrations.verl.profiler_configs`), or verl's role block (a mapping
            or verl's ``ProfilerConfig``), or None (nothing profiled).
        tool_config: with a verl block, its ``tool_config.<tool>`` (verl passes it apart).
        save_file_prefix: the worker's role (``actor_rollout_ref``, ``ref``, ...), profdsl's role.
        steps: with a verl block, the profiled steps (``global_profiler.steps``, which a role block
            lacks).
        continuous_steps: with a verl block, ``global_profiler.profile_continuous_steps``.
        world_size: the job's world size (default: discovered).
        parallel: this process's parallel coordinates, as for :class:`Profiler`.
        **kwargs: verl's backend options, not used.

    Raises:
        ConfigError: a verl block that enables profiling without ``steps``, or what mapping it
            refuses (:func:`~profdsl.integrations.verl.map_block`).

    Examples:
        >>> class Worker(DistProfilerExtension):
        ...     def __init__(self):
        ...         DistProfilerExtension.__init__(self, DistProfiler(rank=0, config=None))
        ...     @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        ...     def update_actor(self, batches):
        ...         for mb in batches:
        ...             self.profiler.step()
        ...         return len(batches)
        >>> worker = Worker()
        >>> worker.start_profile(role="train", profile_step=1); worker.update_actor([1, 2])
        2
        >>> worker.stop_profile(run_command=True)
    """

    def __init__(
        self,
        rank: int,
        config: ProfilerConfig | Mapping[str, Any] | None = None,
        tool_config: Mapping[str, Any] | None = None,
        save_file_prefix: str | None = None,
        *,
        steps: Any = None,
        continuous_steps: bool = False,
        world_size: int | None = None,
        parallel: object = None,
        **kwargs: Any,
    ) -> None:
        self.save_file_prefix = save_file_prefix
        self.config = _config_of(config, tool_config, steps, continuous_steps)
        # resolved once, as the profiler made at the first start() resolves it (verl infers a
        # world that holds a rank given without one)
        self.plan = resolve(
            self.config, role=self.role, rank=rank, world_size=_world_holding(rank, world_size), parallel=parallel
        )
        self.rank, self.world_size, self.topology = self.plan.rank, self.plan.world_size, self.plan.topology
        # Made at the first start(): verl builds profilers the trainer never starts (the inner
        # TrainingWorker's), which must not hold the finish hook of this save_path back.
        self.profiler: Profiler | None = None
        self._steps = TrainerSteps()  # the steps verl's calls leave without a call of their own

    #: ``@DistProfiler.annotate(...)``: a worker method as a stage (:func:`annotate`).
    annotate = staticmethod(annotate)

    @property
    def role(self) -> str:
        """profdsl's role: ``save_file_prefix``, or ``"worker"``."""
        return self.save_file_prefix or "worker"

    def _profiling(self) -> Profiler | None:
        profiler = self.profiler
        return profiler if profiler is not None and profiler.is_profiling else None

    # -- verl's queries ----------------------------------------------------------------------
    def check_enable(self) -> bool:
        """Whether this role is enabled."""
        return self.config.enable

    def check_this_rank(self) -> bool:
        """Whether this rank is profiled."""
        return self.plan.traced

    def check_this_step(self) -> bool:
        """Whether the current step is being profiled."""
        return self._profiling() is not None

    def is_discrete_mode(self) -> bool:
        """Whether each annotated stage writes its own trace."""
        return self.config.discrete

    # -- the lifecycle -----------------------------------------------------------------------
    def start(self, **kwargs: Any) -> None:
        """Begin step ``profile_step`` (or ``global_step``); ``role`` (verl's scope label, e.g.
        ``"train"``) is not needed: trace names carry role, stage and step.

        Without a step (verl's SFT trainers, which start at ``start_profile_step`` and stop at
        ``end_profile_step``), the step begun is the first configured step after the last one
        this profiler began, and the facade counts the steps from there: each outermost
        annotated call (the SFT step's ``train_batch``) after the first ends the step and begins
        the next, until ``stop()`` (:mod:`~profdsl.integrations.verl._trainer_steps`)."""
        given = kwargs.get("profile_step", kwargs.get("global_step"))
        step = self._steps.step_of(given, self.config.steps, f"[profdsl rank {self.rank}] {self.role}")
        if step is None:
            return
        if self.profiler is None:
            self.profiler = Profiler(
                self.config, role=self.role, rank=self.rank, world_size=self.world_size, parallel=self.topology.parallel
            )
        self._steps.begin(self.profiler, step, counting=given is None)

    def stop(self, run_command: bool = True) -> None:
        """End the step. The finish hook runs after the last profiled step whatever
        ``run_command`` says (verl's trainers passed False where they should not: B4, B5).

        With ``continuous_steps``, verl's trainers start a run of consecutive profiled steps at
        its first step and stop it at its last, calling nothing in between: the run's capture
        ends here, with every step of the run
        (:meth:`~profdsl.integrations.verl._trainer_steps.TrainerSteps.end_run`)."""
        if self.profiler is not None:
            self._steps.end_run(self.profiler)
            self.profiler.stop()

    def step(self) -> None:
        """One update mini-batch ended (verl calls it once per mini-batch)."""
        scope = next((e.key for e in context.walk(context.top()) if isinstance(e.key, _Scope)), None)
        if scope is not None:
            scope.step()
            return
        profiler = self._profiling()
        if profiler is not None:
            handle = profiler.recorder.mini_batch(MINI_BATCH, context.top(), region=False)
            if handle is not None:
                handle.close()

    def run_finish_hook(self, run_command: bool = True) -> None:
        """Training is over: close, running a finish hook still owed (:meth:`Profiler.close`)."""
        self.close()

    def close(self) -> None:
        """Close the profiler (idempotent)."""
        if self.profiler is not None:
            self.profiler.close()


def _config_of(
    config: object, tool_config: Mapping[str, Any] | None, steps: Any, continuous_steps: bool
) -> ProfilerConfig:
    if config is None:
        return ProfilerConfig()
    if isinstance(config, ProfilerConfig):
        return config
    if not isinstance(config, Mapping):
        raise ConfigError(
            "DistProfiler config must be a profdsl ProfilerConfig, a verl profiler block "
            f"(a mapping or verl's ProfilerConfig) or None, got {config!r}"
        )
    block = dict(plain(config))
    tool = block.get("tool")
    if tool_config is not None and isinstance(tool, str) and tool != MISSING:
        # verl's dataclass leaves tool_config at OmegaConf's "???" (MISSING) and passes the
        # tool's own config apart: it takes the place of tool_config.<tool>
        given = block.get("tool_config")
        tools = dict(given) if isinstance(given, Mapping) else {}
        block["tool_config"] = {**tools, tool: plain(tool_config)}
    mapped = map_block(
        block,
        global_profiler={"steps": steps, "profile_continuous_steps": continuous_steps},
        where="DistProfiler config",
    )
    if mapped.enable and not mapped.steps:
        raise ConfigError(
            "DistProfiler config: a verl role block holds no steps (they are "
            "global_profiler.steps, which workers do not see): pass steps=[...], or "
            "build the role's config on the trainer with profdsl.integrations.verl."
            "profiler_configs(cfg) and hand the worker that"
        )
    return mapped


class DistProfilerExtension:
    """verl's worker mixin: ``self.profiler`` and the entry points the trainer calls on every
    worker (verl registers them ONE_TO_ALL; under Ray they are plain actor methods here)."""

    def __init__(self, profiler: DistProfiler) -> None:
        self.profiler = profiler

    def start_profile(self, **kwargs: Any) -> None:
        """Begin a profiled step (``profile_step=``)."""
        self.profiler.start(**kwargs)

    def stop_profile(self, run_command: bool = True) -> None:
        """End it; the hook follows the last profiled step (see :meth:`DistProfiler.stop`)."""
        self.profiler.stop(run_command=run_command)

    def step_profile(self) -> None:
        """One mini-batch (or SFT step) ended."""
        self.profiler.step()

    def finish_profile(self) -> None:
        """Training is over: close, running a finish hook still owed."""
        self.profiler.close()


def _world_holding(rank: int | None, world_size: int | None) -> int | None:
    """``world_size``, or, when neither it nor ``WORLD_SIZE`` says and the discovered world
    cannot hold ``rank``, ``rank + 1`` (verl's inference; a bad ``rank`` is left to the plan)."""
    if world_size is not None or not is_int(rank) or rank < 0 or os.environ.get("WORLD_SIZE") is not None:
        return world_size
    _, found = discover_world()
    return found if rank < found else rank + 1
