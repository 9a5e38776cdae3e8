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
import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

from profdsl.capture import make_annotator, make_backend
from profdsl.collect.export import TraceLabel
from profdsl.config import ProfilerConfig
from profdsl.core.log import logger, once
from profdsl.core.ranks import discover_rank, is_rank_selected
from profdsl.runtime.finisher import Finisher
from profdsl.runtime.process import PROCESS
from profdsl.runtime.recorder import NULL_RECORDER, NullRecorder, Recorder
from profdsl.runtime.steps import StepSessions

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
                 world_size: int | None = None, capture: bool = True) -> None:
        info = discover_rank(rank, world_size)
        self.config, self.role, self.rank, self.world_size = config, role, info.rank, info.world_size
        selected = capture and config.enable and is_rank_selected(
            self.rank, config.ranks, all_ranks=config.all_ranks)
        self._backend = make_backend(config) if selected else None
        self.selected = self._backend is not None
        self._annotator = make_annotator(config, role) if self.selected else None
        self._hash = hashlib.sha256(
            json.dumps(config.to_mapping(), sort_keys=True).encode()).hexdigest()[:12]
        self._state = State.IDLE
        self._step: int | None = None
        self._recorder: Recorder | NullRecorder = NULL_RECORDER
        finisher = Finisher(config, role=role, rank=self.rank, world_size=self.world_size,
                            selected=self.selected, rendezvous=PROCESS.hooks, hooks=capture)
        self._steps = StepSessions(config, backend=self._backend, coordinator=PROCESS.coordinator,
                                   label=self._label, finisher=finisher)
        PROCESS.live.add(self)

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
    def recorder(self) -> Recorder | NullRecorder:
        """What the DSL uses for this role now: the step's recorder, or the null recorder."""
        return self._recorder

    def start(self, step: int) -> None:
        """Begin step ``step``; profiles it when this rank and step are selected."""
        if self._state is State.CLOSED:
            once(f"closed-start:{id(self)}", logging.WARNING,
                 "[profdsl rank %s] %s: start(%s) after close() ignored", self.rank, self.role, step)
            return
        if self._step is not None:
            logger.warning("[profdsl rank %s] %s: start(%s) while step %s is open; stopping it",
                           self.rank, self.role, step, self._step)
            self.stop()
        self._step = step
        if self._steps.begin(step):
            PROCESS.registry.set_stepping(self, True)
        if self.selected and self._steps.tracker.is_open:
            self._state = State.ARMED if self.config.discrete else State.RECORDING
            self._recorder = self._new_recorder(step)
            PROCESS.registry.activate(self._recorder)

    def stop(self) -> None:
        """End the current step: flush its traces and, after the last profiled step, the hook."""
        if self._step is None:
            if self._state is not State.CLOSED:
                logger.warning("[profdsl rank %s] %s: stop() without start() ignored",
                               self.rank, self.role)
            return
        self._step = None
        self._end_recorder()
        PROCESS.registry.set_stepping(self, False)
        self._steps.end()
        if self._state is not State.IDLE:
            self._state = State.STOPPED  # a run of continuous steps keeps its capture between steps

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[Profiler]:
        """``start(step)`` … ``stop()`` as a ``with`` block."""
        self.start(step)
        try:
            yield self
        finally:
            self.stop()

    def close(self) -> None:
        """Close what is open and run a finish hook that is still owed. Idempotent."""
        if self._state is State.CLOSED:
            return
        self._step = None
        self._state = State.CLOSED
        self._end_recorder()
        PROCESS.registry.set_stepping(self, False)
        self._steps.finish()
        PROCESS.live.discard(self)

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError("a Profiler holds this process's profiling state and cannot be shipped to "
                        "another process: create it inside the Ray actor (ProfiledWorker.init_profiler)")

    def _label(self, step: int | None) -> TraceLabel:
        return TraceLabel(role=self.role, stage=None, step=step, rank=self.rank,
                          world_size=self.world_size, save_path=self.config.save_path,
                          host=socket.gethostname(), pid=os.getpid(), config_hash=self._hash)

    def _new_recorder(self, step: int) -> Recorder:
        assert self._backend is not None
        return Recorder(self._label(step), annotator=self._annotator, backend=self._backend,
                        coordinator=PROCESS.coordinator, discrete=self.config.discrete,
                        schedule=self.config.torch.schedule, claim=self._steps.claim)

    def _end_recorder(self) -> None:
        recorder, self._recorder = self._recorder, NULL_RECORDER
        if isinstance(recorder, Recorder):
            PROCESS.registry.deactivate(recorder)
            recorder.close()
