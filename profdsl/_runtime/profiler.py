"""``Profiler``: one role's profiling lifecycle in one process.

One lifecycle table (:mod:`profdsl._runtime.lifecycle`: idle, armed: discrete stages will
capture, recording: a continuous step is captured, stopped: between steps, closed) over the
role's resolved plan (:mod:`profdsl._runtime.plan`). Each numbered step that has anything on (profiled, captured here
with a :class:`~profdsl._runtime.recorder.Recorder`, or timed) is one
:class:`~profdsl._runtime.step.StepContext`, registered once where the DSL finds it; a rank, step
or config with nothing on registers nothing, so the DSL costs it one attribute check. Misuse (a
second ``stop()``, ``start()`` after ``close()``, ``start(S)`` while S is open) is logged and
ignored, never raised into training. What the calling thread waits for, and for how long, is in
docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex

from profdsl._runtime.demand import deliver_request
from profdsl._runtime.lifecycle import Call, Lifecycle, State
from profdsl._runtime.plan import resolve
from profdsl._runtime.process import PROCESS, Process
from profdsl._runtime.recorder import NullRecorder, Recorder
from profdsl.config import ProfilerConfig

if TYPE_CHECKING:
    from profdsl._runtime.step import StepContext
    from profdsl.metrics._exporters import OnStep
    from profdsl.metrics._timings import StepTimings

__all__ = ["Profiler", "State"]


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
            :class:`~profdsl.config._parallel.Parallel` or a named ``DeviceMesh``); default:
            discovered from Megatron's ``parallel_state`` or a named ``DeviceMesh``. They go into
            trace names, metadata and the manifest, and ``config.select`` is resolved on them.
        on_step: called as ``on_step(step, profiler.metrics)`` after each step, once the step's
            capture has ended (docs/metrics.md).
        process: the process state it lives in (default: this process's one; tests may give
            their own).

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

    def __init__(
        self,
        config: ProfilerConfig,
        *,
        role: str,
        rank: int | None = None,
        world_size: int | None = None,
        capture: bool = True,
        parallel: object = None,
        on_step: OnStep | None = None,
        process: Process | None = None,
    ) -> None:
        self.process = process = PROCESS if process is None else process
        self.plan = plan = resolve(
            config, role=role, rank=rank, world_size=world_size, capture=capture, parallel=parallel
        )
        self.config, self.role, self.rank, self.world_size = config, role, plan.rank, plan.world_size
        self.topology = plan.topology
        self._lifecycle = Lifecycle(self, config=config, plan=plan, process=process, on_step=on_step, device=capture)
        self._capture, self.meter = self._lifecycle.capture, self._lifecycle.meter
        if plan.member:
            _supersede(self)
        process.live.add(self)

    @property
    def selected(self) -> bool:
        """Whether this role captures anything on this rank (the plan traces it, or a capture
        request did)."""
        return self._capture.selected

    @property
    def state(self) -> State:
        """The lifecycle state."""
        return self._lifecycle.where.state

    @property
    def current_step(self) -> int | None:
        """The step between ``start`` and ``stop``, or None."""
        return self._lifecycle.where.step

    @property
    def is_profiling(self) -> bool:
        """Whether this profiler is profiling the current step (stages find it)."""
        return self._lifecycle.where.capturing

    @property
    def step_context(self) -> StepContext | None:
        """The current step, while it has anything on (registered where the DSL finds it)."""
        return self._lifecycle.step

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
        profiled. ``start(S)`` while step S is open changes nothing (logged once)."""
        self._lifecycle.call(Call.START, step)

    def stop(self) -> StepTimings | None:
        """End the current step: hand its traces to the writer and, after the last profiled
        step, run the finish hook (waiting for it unless it runs in the background). Then the
        step's timings go to the exporters and ``on_step``; returned with
        ``config.metrics.enabled`` (else None)."""
        return self._lifecycle.call(Call.STOP)

    def request(
        self,
        steps: SupportsIndex,
        *,
        ranks: Iterable[SupportsIndex] | str | None = None,
        roles: Iterable[str] | None = None,
        at_step: SupportsIndex | None = None,
        reason: str | None = None,
    ) -> str | None:
        """Ask this process to trace ``steps`` steps (from the next step it begins, or from
        ``at_step``) on the roles ``roles`` (default: every role of the process) if ``ranks``
        names this process's rank (a list, ``"all"`` or a rank selector; default: the ranks the
        config traces). What the roles said is logged; never raises. Returns the request's id,
        or None when the request is malformed (logged). See ``docs/on-demand.md``."""
        return deliver_request(
            self.process.inbox, steps, ranks=ranks, roles=roles, at_step=at_step, reason=reason, who=self.plan
        )

    @contextlib.contextmanager
    def step(self, step: SupportsIndex) -> Iterator[Profiler]:
        """``start(step)`` … ``stop()`` as a ``with`` block."""
        self.start(step)
        try:
            yield self
        finally:
            self.stop()

    def close(self) -> None:
        """Close what is open, record what cannot be ended here, and run a finish hook that is
        still owed, waiting for it (bounded). Idempotent."""
        self._lifecycle.call(Call.CLOSE)

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a Profiler holds this process's profiling state and cannot be shipped to "
            "another process: create it inside the Ray actor (ProfiledWorker.init_profiler)"
        )


def _supersede(profiler: Profiler) -> None:
    """A profiler re-created for the same role, rank and save_path (a trainer re-initialised)
    closes the earlier one: its open step ends (its capture too, when this thread may end it),
    and it no longer holds up the finish hook, which the new one's last step owes. Only
    profilers that take part in a round count."""
    rounds = profiler.process.rounds
    key = rounds.key(profiler.plan.save_path)
    for other in list(profiler.process.live):
        if (
            isinstance(other, Profiler)
            and other is not profiler
            and other.role == profiler.role
            and other.rank == profiler.rank
            and other.plan.member
            and rounds.key(other.plan.save_path) == key
        ):
            profiler.plan.say(logging.INFO, "a new Profiler for this role and save_path closes an earlier one")
            try:
                other.close()
            except Exception as exc:  # never raised into the new profiler's construction
                profiler.plan.say(logging.ERROR, "closing the earlier Profiler failed: %r", exc)
