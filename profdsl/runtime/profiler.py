"""``Profiler``: one role's profiling lifecycle in one process.

An explicit state machine (idle, armed: discrete stages will capture, recording: a continuous
step is captured, stopped: between steps, closed) over a backend and an annotator chosen at
construction. Each profiled step gets a :class:`~profdsl.runtime.recorder.Recorder`, which the
DSL finds in the registry; a rank, step or config that is not profiled registers nothing, so the
DSL costs it one attribute check. Misuse (a second ``stop()``, ``start()`` after ``close()``) is
logged and ignored, never raised into training.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex

from profdsl.config import ProfilerConfig
from profdsl.config.validate import text_without_nul, to_index
from profdsl.core.log import logger, once
from profdsl.core.parallel_discovery import process_topology
from profdsl.core.ranks import discover_world, is_rank_selected
from profdsl.errors import ConfigError
from profdsl.runtime.finisher import Finisher
from profdsl.runtime.meter import make_meter
from profdsl.runtime.process import PROCESS
from profdsl.runtime.recorder import NullRecorder, Recorder
from profdsl.runtime.role_capture import RoleCapture
from profdsl.runtime.steps import StepSessions

if TYPE_CHECKING:
    from profdsl.metrics.exporters import OnStep
    from profdsl.metrics.timings import StepTimings

__all__ = ["Profiler", "State"]


class State(enum.Enum):
    """Where a :class:`Profiler` is in its lifecycle."""

    IDLE = "idle"
    ARMED = "armed"
    RECORDING = "recording"
    STOPPED = "stopped"
    CLOSED = "closed"


class Profiler:
    """Profiles one role (``"actor"``, ``"ref"``, ...) of one process on the configured steps.

    Args:
        config: what to profile.
        role: the role's name, in trace names and metadata.
        rank: this process's global rank (default: discovered).
        world_size: the job's world size (default: discovered).
        capture: False makes a step clock (a driver's): it follows the profiled steps, for
            ``rollout_window``, but captures nothing and runs no hook.
        parallel: this process's parallel coordinates (``{"tp": 1, "pp": 0, "dp": 3}``, a
            :class:`~profdsl.config.parallel.Parallel` or a named ``DeviceMesh``); default:
            discovered from Megatron's ``parallel_state`` or a named ``DeviceMesh``. They go into
            trace names, metadata and the manifest, and ``config.select`` is resolved on them.
        on_step: called as ``on_step(step, profiler.metrics)`` after each step (docs/metrics.md).

    Examples:
        >>> from profdsl import ProfilerConfig, profile_stage
        >>> profiler = Profiler(ProfilerConfig(enable=False), role="actor", rank=0, world_size=1)
        >>> with profiler.step(1):
        ...     with profile_stage("update_actor"):
        ...         pass
        >>> @profile_stage("compute_log_prob")
        ... def compute_log_prob(batch): return batch
        >>> compute_log_prob(3)
        3
        >>> profiler.close()
    """

    def __init__(self, config: ProfilerConfig, *, role: str, rank: int | None = None,
                 world_size: int | None = None, capture: bool = True, parallel: object = None,
                 on_step: OnStep | None = None) -> None:
        text_without_nul("Profiler role", role, blank=False)
        self.config, self.role = config, role
        self.rank, self.world_size = discover_world(rank, world_size)
        self.topology = process_topology(self.rank, self.world_size, parallel, select=config.select)
        selected = capture and config.enable and is_rank_selected(
            self.rank, config.ranks, all_ranks=config.all_ranks, select=config.select,
            topology=self.topology)
        self._capture = RoleCapture(config, role, self.topology, selected=selected)
        self.selected = self._capture.selected
        self._state = State.IDLE
        self._step: int | None = None
        self._unnumbered = False  # in a step whose number was no step number (not profiled)
        finisher = Finisher(config, role=role, rank=self.rank, world_size=self.world_size,
                            selected=self.selected, rendezvous=PROCESS.hooks, hooks=capture,
                            topology=self.topology)
        self._steps = StepSessions(config, backend=self._capture.backend, coordinator=PROCESS.coordinator,
                                   label=self._capture.label, finisher=finisher)
        self._pid = os.getpid()  # a forked child inherits this object, but no duty: see _inherited
        self.meter = make_meter(config.metrics, role, self.rank, self.world_size, on_step, device=capture)
        if capture and config.enable:
            _supersede(self)
        PROCESS.live.add(self)

    def _inherited(self) -> bool:
        """Whether this is a forked child's copy: it profiles nothing, stops nothing, owes no
        hook (the parent does all of that)."""
        return os.getpid() != self._pid

    @property
    def state(self) -> State:
        """The lifecycle state."""
        return self._state

    @property
    def current_step(self) -> int | None:
        """The step between ``start`` and ``stop``, or None."""
        return self._step

    @property
    def is_profiling(self) -> bool:
        """Whether this profiler is profiling the current step (stages find it)."""
        return self._state in (State.ARMED, State.RECORDING)

    @property
    def metrics(self) -> dict[str, float]:
        """The last finished step's stage timings, flat (``timing_s/<stage>``...; docs/metrics.md)."""
        return self.meter.metrics

    @property
    def recorder(self) -> Recorder | NullRecorder:
        """What the DSL uses for this role now: the step's recorder, or the null recorder."""
        return self._capture.recorder

    def start(self, step: SupportsIndex) -> None:
        """Begin step ``step``; profiles it when this rank and step are selected.

        ``step`` is any integer, plain or not (``numpy.int64``, a 0-d integer tensor). Anything
        else (``-1``, ``True``, ``1.5``, ``"3"``) is logged once and begins a step that is not
        profiled."""
        if self._inherited():
            return
        if self._state is State.CLOSED:
            PROCESS.coordinator.flush()  # a close() from another thread left this thread's session
            once(f"closed-start:{id(self)}", logging.WARNING,
                 "[profdsl rank %s] %s: start(%s) after close() ignored", self.rank, self.role, step)
            return
        if self._step is not None:
            logger.warning("[profdsl rank %s] %s: start(%s) while step %s is open; stopping it",
                           self.rank, self.role, step, self._step)
            self.stop()
        number = _step_number(self, step)
        self._unnumbered = number is None
        if number is None:
            self._steps.begin(None)  # ends a capture the loop walked out of; profiles nothing
            return
        step = self._step = number
        if self._steps.begin(step):
            PROCESS.registry.set_stepping(self, True)
        if self.selected and self._steps.tracker.is_open:
            self._state = State.ARMED if self.config.discrete else State.RECORDING
            self._capture.open(step, self._steps.claim)
        self.meter.begin(step)

    def stop(self) -> StepTimings | None:
        """End the current step: flush its traces and, after the last profiled step, the hook.
        Returns the step's stage timings with ``config.metrics.enabled`` (else None)."""
        if self._inherited():
            return None
        if self._step is None:
            PROCESS.coordinator.flush()
            if self._state is not State.CLOSED and not self._unnumbered:
                logger.warning("[profdsl rank %s] %s: stop() without start() ignored",
                               self.rank, self.role)
            self._unnumbered = False
            return None
        self._step = None
        timings = self.meter.end()
        self._capture.end()
        PROCESS.registry.set_stepping(self, False)
        self._steps.end()
        if self._state is not State.IDLE:
            self._state = State.STOPPED  # a run of continuous steps keeps its capture between steps
        return timings

    @contextlib.contextmanager
    def step(self, step: SupportsIndex) -> Iterator[Profiler]:
        """``start(step)`` … ``stop()`` as a ``with`` block."""
        self.start(step)
        try:
            yield self
        finally:
            self.stop()

    def close(self) -> None:
        """Close what is open and run a finish hook that is still owed. Idempotent."""
        if self._inherited():
            return
        if self._state is State.CLOSED:
            PROCESS.coordinator.flush()  # a close() from another thread left this thread's session
            return
        self._step = None
        if self._state is not State.IDLE:
            self._state = State.STOPPED
        self.meter.close()
        self._capture.end()
        PROCESS.registry.set_stepping(self, False)
        self._steps.finish()  # interrupted (Ctrl-C)? then not closed: the next close() finishes
        self._state = State.CLOSED
        PROCESS.live.discard(self)

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError("a Profiler holds this process's profiling state and cannot be shipped to "
                        "another process: create it inside the Ray actor (ProfiledWorker.init_profiler)")


def _supersede(profiler: Profiler) -> None:
    """A profiler re-created for the same role, rank and save_path (a trainer re-initialised)
    takes the earlier one's place in the finish hook's wait: an abandoned profiler must not
    hold the hook up. Only profilers that capture (enabled, selected or hook-owing) count."""
    key = PROCESS.hooks.key(profiler.config.save_path)
    for other in list(PROCESS.live):
        if other is not profiler and other.role == profiler.role and other.rank == profiler.rank \
                and other.config.enable and PROCESS.hooks.key(other.config.save_path) == key:
            logger.info("[profdsl rank %s] %s: a new Profiler for this role and save_path "
                        "replaces an earlier one in the finish hook's wait", profiler.rank, profiler.role)
            other._steps.replaced()


def _step_number(profiler: Profiler, step: SupportsIndex) -> int | None:
    """``step`` as a plain int, or None (logged once per profiler) when it is no step number."""
    try:
        return to_index("step", step)
    except ConfigError as exc:
        once(f"step-number:{id(profiler)}", logging.WARNING,
             "[profdsl rank %s] %s: not a step number (%s): such a step is not profiled",
             profiler.rank, profiler.role, exc)
        return None
