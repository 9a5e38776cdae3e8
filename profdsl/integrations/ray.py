"""Ray integration: profiled worker actors, and the trainer's side that drives them.

``import profdsl.ray`` does not import Ray; the functions that need it import it when called.

Examples:
    >>> from profdsl import ProfilerConfig
    >>> runtime_env(ProfilerConfig(enable=True))["env_vars"]
    {'NVTX_INJECTION64_PATH': '/dev/null/profdsl-no-nvtx-injection'}
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any, SupportsIndex

import attrs

from profdsl.config import FinishHook, ProfilerConfig
from profdsl.core.log import once
from profdsl.rollout.nodes import current_node, node_of, run_on_node
from profdsl.rollout.window import rollout_window
from profdsl.runtime.process import PROCESS
from profdsl.runtime.profiler import Profiler

__all__ = ["DEFAULT_NSIGHT_OPTIONS", "ProfiledWorker", "RayStepProfiler", "WorkerCallError",
           "current_node", "node_of", "run_on_node", "runtime_env"]

#: Nsight options for Ray's ``nsight`` runtime env: profdsl opens and closes capture ranges.
DEFAULT_NSIGHT_OPTIONS: dict[str, str] = {
    "t": "cuda,nvtx,cudnn,cublas",
    "capture-range": "cudaProfilerApi",
    "cuda-graph-trace": "graph",
}

#: The ``NVTX_INJECTION64_PATH`` that keeps every NVTX tool out of a process. NVTX ``dlopen``s the
#: variable's value on its first call. An empty value is no guard: glibc's ``dlopen("")`` returns
#: the main program, whose symbols include an ``LD_PRELOAD``ed tool's ``InitializeInjectionNvtx2``,
#: so the tool still attaches. A path whose parent is a character device cannot exist (ENOTDIR):
#: the ``dlopen`` fails and NVTX stays a no-op. (Ray's ``env_vars`` can set a variable, not unset it.)
NO_NVTX_INJECTION = "/dev/null/profdsl-no-nvtx-injection"


def runtime_env(config: ProfilerConfig, *, nsight_options: dict[str, str] | None = None,
                guard_cupti: bool = True) -> dict[str, Any]:
    """The pieces of a Ray ``runtime_env`` a profiled worker needs.

    ``tool="nsys"``: Ray's ``nsight`` plugin, with capture ranges driven by profdsl (one per
    profiled step, or per stage in discrete mode; ``capture-range-end`` repeats for each).
    ``tool="torch"``: ``NVTX_INJECTION64_PATH`` set to :data:`NO_NVTX_INJECTION`, a path that
    cannot exist, so that an NVTX injection library inherited from the environment (nsys, a
    profiling agent; named by the variable or preloaded) cannot take the CUPTI slot torch needs,
    which makes kernels vanish from torch traces; ``guard_cupti=False`` opts out.
    """
    if not config.enable:
        return {}
    if config.tool == "nsys":
        options = dict(DEFAULT_NSIGHT_OPTIONS, **(nsight_options or {}))
        options.setdefault("capture-range-end", f"repeat-shutdown:{max(len(config.steps), 1) * 8}")
        return {"nsight": options}
    return {"env_vars": {"NVTX_INJECTION64_PATH": NO_NVTX_INJECTION}} if guard_cupti else {}


class ProfiledWorker:
    """A mixin for Ray actor classes: one profiler per role this actor serves.

    Examples:
        >>> import profdsl
        >>> class ActorWorker(ProfiledWorker):
        ...     def __init__(self, config, rank, world_size):
        ...         self.init_profiler(config, role="actor", rank=rank, world_size=world_size)
        ...     @profdsl.profile_stage("update_actor")
        ...     def update(self, batch):
        ...         return batch
        >>> worker = ActorWorker(profdsl.ProfilerConfig(), rank=0, world_size=1)
        >>> with contextlib.ExitStack():
        ...     worker.start_profile(1); worker.update(3); worker.stop_profile()
        3
        >>> worker.finish_profile()
    """

    def init_profiler(self, config: ProfilerConfig, *, role: str, rank: int | None = None,
                      world_size: int | None = None, parallel: object = None) -> Profiler:
        """Create the profiler of ``role`` (rank and world size default to what the process can
        discover: explicit values, then ``RANK`` / ``WORLD_SIZE``; ``parallel`` as for
        :class:`Profiler`: call it after Megatron's parallel_state or the DeviceMesh is set up)."""
        profilers: dict[str, Profiler] = self.__dict__.setdefault("_profdsl_profilers", {})
        profilers[role] = Profiler(config, role=role, rank=rank, world_size=world_size, parallel=parallel)
        return profilers[role]

    def profiler(self, role: str) -> Profiler:
        """The profiler of ``role``."""
        return self.__dict__["_profdsl_profilers"][role]  # type: ignore[no-any-return]

    def _each(self) -> list[Profiler]:
        return list(self.__dict__.get("_profdsl_profilers", {}).values())

    def start_profile(self, step: SupportsIndex) -> None:
        """Begin step ``step`` for every role (called remotely by the trainer)."""
        for profiler in self._each():
            profiler.start(step)

    def stop_profile(self) -> None:
        """End the step for every role: flush and collect, and the hook after the last step."""
        for profiler in self._each():
            profiler.stop()

    def finish_profile(self) -> None:
        """Training is over: close every role, running a finish hook still owed."""
        for profiler in self._each():
            profiler.close()


def _actor_id(handle: Any) -> Any:
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else id(handle)


@attrs.frozen
class WorkerCallError:
    """A worker that failed or hung in a profiling call."""

    worker: int
    call: str
    error: str


class RayStepProfiler:
    """The trainer's side: drives worker actors and rollout engines on the profiled steps.

    Args:
        config: the run's profiler config (steps, ranks, save_path, rollout options).
        workers: ``ProfiledWorker`` actor handles; an actor listed twice (fused roles, several
            worker groups over the same actors) is driven once, compared by actor id.
        engines: rollout replicas for :meth:`rollout`.
        replica_world_size: GPUs per replica.
        call_timeout_s: bound on starting workers; stopping is bounded by the hook's timeout
            plus ``rollout.stop_timeout_s``.

    Examples:
        >>> from profdsl import ProfilerConfig
        >>> trainer = RayStepProfiler(ProfilerConfig(), workers=[])
        >>> with trainer.step(1):
        ...     with trainer.rollout():
        ...         pass
        >>> trainer.close()
    """

    def __init__(self, config: ProfilerConfig, *, workers: Sequence[Any], engines: Sequence[Any] = (),
                 replica_world_size: int = 1, call_timeout_s: float = 300.0) -> None:
        self.config = config
        distinct: dict[Any, Any] = {}
        for handle in workers:
            distinct.setdefault(_actor_id(handle), handle)
        self.workers = list(distinct.values())
        self.engines = list(engines)
        self.replica_world_size = replica_world_size
        self.call_timeout_s = call_timeout_s
        self.errors: list[WorkerCallError] = []
        # The driver's step clock: it follows the profiled steps but captures nothing itself.
        clock_config = attrs.evolve(config, finish_hook=FinishHook())
        self.clock = Profiler(clock_config, role="driver", rank=0, world_size=1, capture=False)

    def _call(self, method: str, *args: Any, timeout: float) -> None:
        if not self.workers:
            return
        import ray

        refs = [getattr(w, method).remote(*args) for w in self.workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for index, ref in enumerate(refs):
            if ref not in ready:
                error = f"no answer within {timeout:g}s"
            else:
                try:
                    ray.get(ref)
                    continue
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
            self.errors.append(WorkerCallError(index, method, error))
            once(f"ray-{method}-{index}", logging.ERROR,
                 "profdsl: worker %s (%r) %s failed: %s", index, self.workers[index], method, error)

    def _stop_timeout(self) -> float:
        return self.config.finish_hook.timeout_s + self.config.rollout.stop_timeout_s

    @contextlib.contextmanager
    def step(self, step: SupportsIndex) -> Iterator[RayStepProfiler]:
        """Profile RL step ``step`` (any integer: ``numpy.int64``, a 0-d tensor) on the workers, if
        it is a profiled step."""
        self.clock.start(step)
        profiled = self.clock.current_step is not None and self.clock in _stepping()
        if profiled:  # the workers get the step as a plain int
            self._call("start_profile", self.clock.current_step, timeout=self.call_timeout_s)
        try:
            yield self
        finally:
            if profiled:
                self._call("stop_profile", timeout=self._stop_timeout())
            self.clock.stop()

    def rollout(self) -> rollout_window:
        """``rollout_window`` over the engines, for the current step."""
        return rollout_window(self.engines, replica_world_size=self.replica_world_size,
                              profiler=self.clock)

    def close(self) -> None:
        """Training is over: every worker closes, running a finish hook still owed."""
        self._call("finish_profile", timeout=self._stop_timeout())
        self.clock.close()


def _stepping() -> tuple[Profiler, ...]:
    return PROCESS.registry.stepping
