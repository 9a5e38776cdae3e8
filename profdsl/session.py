"""``Profiler``: one role's profiling lifecycle in one process.

An explicit state machine — idle, armed (discrete: stages will capture), recording (continuous:
a session is open), stopped (between steps), closed — over one capture and one annotator chosen
at construction. A rank or config that is not profiled gets the null capture and never registers,
so the DSL costs it one attribute check. Misuse (a second ``stop()``, ``start()`` after
``close()``) is logged and ignored, never raised into training.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

from profdsl._collect import Collector
from profdsl._context import REGISTRY
from profdsl._regions import MINI_BATCHES, STAGES
from profdsl._log import logger, once
from profdsl.backends import NULL_CAPTURE, Capture, Session, TraceLabel, make_annotators, make_capture
from profdsl.config import ProfilerConfig
from profdsl.plan import Event, StepPlan, StepTracker
from profdsl.ranks import discover_rank, is_rank_selected

__all__ = ["Profiler", "State"]

# Profilers not yet closed: closed at interpreter exit, so a loop that forgets close() still
# flushes its last session and runs an owed finish hook (once: close() is idempotent). Strong
# references: a profiler dropped without close() must still run the hook it owes.
_LIVE: set[Profiler] = set()


@atexit.register
def _close_live() -> None:
    for profiler in list(_LIVE):
        try:
            profiler.close()
        except Exception as exc:  # interpreter exit: say it and go on with the others
            logger.error("profdsl: closing %s at exit failed: %s", profiler.role, exc)


class State(enum.Enum):
    """Where a :class:`Profiler` is in its lifecycle."""

    IDLE = "idle"
    ARMED = "armed"
    RECORDING = "recording"
    STOPPED = "stopped"
    CLOSED = "closed"


class _DslCallbacks:
    """What the DSL calls on a profiler that is profiling (kept apart from the lifecycle)."""

    config: ProfilerConfig
    _capture: Capture
    _annotator: Any
    _session: Session | None
    _mini_batch: int

    def _label(self, stage: str | None) -> TraceLabel:
        raise NotImplementedError

    def _stage_begin(self, name: str, scheduled: bool) -> Session | None:
        STAGES.add(name)
        if not self.config.discrete:
            return None
        schedule = self.config.torch.schedule if scheduled else None
        session = self._capture.open(self._label(name), schedule, join=False)
        if session is not None:
            self._mini_batch = 0
        return session

    def _push(self, name: str) -> object:
        return None if self._annotator is None else self._annotator.push(name)

    def _pop(self, token: object) -> None:
        if self._annotator is not None:
            self._annotator.pop(token)

    def _next_mini_batch(self, name: str) -> str:
        index, self._mini_batch = self._mini_batch, self._mini_batch + 1
        MINI_BATCHES.add(name)
        return f"{name}{index}"

    def _mini_batch_done(self) -> None:
        session = self._session or self._capture.current()
        if session is not None and session.scheduled:
            session.mini_batch_done()


class Profiler(_DslCallbacks):
    """Profiles one role (``"actor"``, ``"ref"``, ...) of one process on the configured steps.

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
        """``capture=False`` makes a step clock (a driver's): it follows the profiled steps, for
        ``rollout_window``, but captures nothing and runs no hook."""
        info = discover_rank(rank, world_size)
        self.config, self.role, self.rank, self.world_size = config, role, info.rank, info.world_size
        self.selected = capture and config.enable and is_rank_selected(
            self.rank, config.ranks, all_ranks=config.all_ranks)
        schedule = config.torch.schedule
        # With a schedule each step runs it afresh, so steps never share a session (verl's R6).
        grouped = config.continuous_steps and not config.discrete and schedule is None
        self._tracker = StepTracker(StepPlan(steps=config.steps if config.enable else (),
                                             continuous_steps=grouped))
        self._capture = make_capture(config) if self.selected else NULL_CAPTURE
        self._annotator: Any = make_annotators(config, role) if self.selected else None
        self._hash = hashlib.sha256(
            json.dumps(config.to_mapping(), sort_keys=True).encode()).hexdigest()[:12]
        self._state = State.IDLE
        self._step: int | None = None
        self._session_step: int | None = None
        self._session: Session | None = None
        self._mini_batch = 0
        self._profiled_steps: list[int] = []
        self._collector = Collector(config, role=role, rank=self.rank, world_size=self.world_size,
                                    selected=self.selected, hooks=capture)
        _LIVE.add(self)

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
        events = self._tracker.begin(step)
        self._step, self._mini_batch = step, 0
        if self._tracker.plan.is_profiled(step):
            self._profiled_steps.append(step)
            REGISTRY.set_stepping(self, True)
        self._apply(events)
        if self.selected and self._tracker.is_open:
            self._state = State.ARMED if self.config.discrete else State.RECORDING
            REGISTRY.add(self)

    def stop(self) -> None:
        """End the current step: flush its traces and, after the last profiled step, the hook."""
        if self._step is None:
            if self._state is not State.CLOSED:
                logger.warning("[profdsl rank %s] %s: stop() without start() ignored",
                               self.rank, self.role)
            return
        self._step = None
        REGISTRY.set_stepping(self, False)
        self._apply(self._tracker.end())
        if not self._tracker.is_open:
            REGISTRY.remove(self)
            self._state = State.STOPPED

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
        REGISTRY.remove(self)
        REGISTRY.set_stepping(self, False)
        self._apply(self._tracker.finish())
        self._collector.after_session(final=True)
        self._collector.done()
        self._collector.wait()
        _LIVE.discard(self)

    def __enter__(self) -> Profiler:
        return self

    def __reduce__(self) -> Any:
        raise TypeError("a Profiler holds this process's profiling state and cannot be shipped to "
                        "another process: create it inside the Ray actor (ProfiledWorker.init_profiler)")

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _apply(self, events: list[Event]) -> None:
        for event in events:
            if event is Event.OPEN and self.selected and not self.config.discrete:
                self._session_step = self._step
                self._session = self._capture.open(self._label(None), self.config.torch.schedule,
                                                   join=True)
            elif event is Event.CLOSE and self._session is not None:
                session, self._session = self._session, None
                session.close()
                self._collector.after_session(final=False)
            elif event is Event.HOOK:  # every artifact first, then the upload
                self._collector.after_session(final=True)
                self._collector.run_hook(self._profiled_steps)

    def _label(self, stage: str | None) -> TraceLabel:
        step = self._step if stage is not None or self._session_step is None else self._session_step
        return TraceLabel(role=self.role, stage=stage, step=step, rank=self.rank,
                          world_size=self.world_size, save_path=self.config.save_path,
                          host=socket.gethostname(), pid=os.getpid(), config_hash=self._hash)
