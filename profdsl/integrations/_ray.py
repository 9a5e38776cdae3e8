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
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, SupportsIndex

import attrs

from profdsl._runtime.process import PROCESS
from profdsl._runtime.profiler import Profiler
from profdsl.collect._requests import new_id
from profdsl.config import FinishHook, ProfilerConfig
from profdsl.core._log import described, logger, once
from profdsl.metrics._exporters import OnStep, call_on_step, export_alert
from profdsl.metrics._slow import SlowRanks, StragglerAlert, StragglerWatch, rank_times
from profdsl.metrics._timings import StepTimings
from profdsl.metrics.aggregate import StepSummary, aggregate
from profdsl.records.fields import RecordError
from profdsl.records.requests import CaptureRequest, capture_request
from profdsl.rollout._nodes import current_node, node_of, run_on_node
from profdsl.rollout._window import rollout_window

__all__ = [
    "DEFAULT_NSIGHT_OPTIONS",
    "ProfiledWorker",
    "RayStepProfiler",
    "WorkerCallError",
    "current_node",
    "node_of",
    "run_on_node",
    "runtime_env",
]

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
# tests/test_nvtx_injection.py::TestInjectionLibraryIsSeen::test_empty_value_lets_a_preloaded_library_in,
# tests/test_nvtx_injection.py::TestGuard::test_preloaded_library_is_not_injected
NO_NVTX_INJECTION = "/dev/null/profdsl-no-nvtx-injection"


def runtime_env(
    config: ProfilerConfig, *, nsight_options: dict[str, str] | None = None, guard_cupti: bool = True
) -> dict[str, Any]:
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
        False
        3
        []
        >>> worker.finish_profile()
    """

    def init_profiler(
        self,
        config: ProfilerConfig,
        *,
        role: str,
        rank: int | None = None,
        world_size: int | None = None,
        parallel: object = None,
        on_step: OnStep | None = None,
    ) -> Profiler:
        """Create the profiler of ``role`` (rank and world size default to what the process can
        discover: explicit values, then ``RANK`` / ``WORLD_SIZE``; ``parallel`` as for
        :class:`Profiler`: call it after Megatron's parallel_state or the DeviceMesh is set up;
        ``on_step`` as ``Profiler``'s)."""
        profilers: dict[str, Profiler] = self.__dict__.setdefault("_profdsl_profilers", {})
        profilers[role] = Profiler(
            config, role=role, rank=rank, world_size=world_size, parallel=parallel, on_step=on_step
        )
        return profilers[role]

    def profiler(self, role: str) -> Profiler:
        """The profiler of ``role``."""
        return self.__dict__["_profdsl_profilers"][role]  # type: ignore[no-any-return]

    def _each(self) -> list[Profiler]:
        return list(self.__dict__.get("_profdsl_profilers", {}).values())

    def start_profile(
        self, step: SupportsIndex, *, requests: Sequence[CaptureRequest] = (), alerts: Sequence[StragglerAlert] = ()
    ) -> bool:
        """Begin step ``step`` for every role (called remotely by the trainer). ``requests``:
        capture requests the driver passes on (each taken once, by the roles it names, before
        the step begins); ``alerts``: straggler episodes of the driver's, shown by this rank's
        metrics exporters (docs/on-demand.md). Returns whether a role of this worker profiles
        the step (the driver counts a requested step traced only when a worker said so)."""
        for request in requests:
            PROCESS.inbox.deliver(request)
        for alert in alerts:
            for profiler in self._each():
                if profiler.role == alert.role and profiler.rank == alert.rank:
                    export_alert(getattr(profiler.meter, "exporters", []), alert)
        for profiler in self._each():
            profiler.start(step)
        return any(profiler.is_profiling for profiler in self._each())

    def stop_profile(self) -> list[StepTimings]:
        """End the step for every role: flush and collect, and the hook after the last step.
        Returns the step's timings of the roles with ``metrics.enabled`` (for the trainer)."""
        timings = [profiler.stop() for profiler in self._each()]
        return [t for t in timings if t is not None]

    def finish_profile(self) -> None:
        """Training is over: close every role, running a finish hook still owed."""
        for profiler in self._each():
            profiler.close()


def _timings(answer: Any) -> list[StepTimings]:
    """The step timings of a worker's ``stop_profile`` answer (none from a worker that failed)."""
    return [t for t in answer if isinstance(t, StepTimings)] if isinstance(answer, list) else []


def _ranks(started: list[Any], stopped: list[Any]) -> set[int]:
    """The ranks of the workers that said they trace the step (``start_profile``'s answers),
    from their step timings (``stop_profile``'s)."""
    return {t.rank for answer, timings in zip(started, stopped) if answer is True for t in _timings(timings)}


def _distinct(workers: Sequence[Any]) -> list[Any]:
    """The worker actors, each once (an actor listed twice, compared by actor id, is driven once),
    in the order first listed."""
    distinct: dict[Any, Any] = {}
    for handle in workers:
        actor_id = getattr(handle, "_actor_id", None)
        distinct.setdefault(actor_id.hex() if actor_id is not None else id(handle), handle)
    return list(distinct.values())


def _driver_clock(config: ProfilerConfig) -> Profiler:
    """The driver's step clock: it follows the profiled steps but captures nothing itself (and
    exports nothing: a worker of this host may listen on the metrics port)."""
    clock_config = attrs.evolve(config, finish_hook=FinishHook(), metrics=attrs.evolve(config.metrics, exporters=()))
    return Profiler(clock_config, role="driver", rank=0, world_size=1, capture=False)


@attrs.frozen
class WorkerCallError:
    """A worker that failed or hung in a profiling call."""

    worker: int
    call: str
    error: str


#: How long a capture's follow-up waits for the traced ranks' traces to be written, at most (the
#: config's ``export_timeout_s`` when shorter), and how long ``close()`` waits for follow-ups.
FOLLOW_UP_WAIT_S, FOLLOW_UP_CLOSE_S = 300.0, 60.0


class _FollowUps:
    """The follow-up of each capture asked for (docs/ledger.md): once the traced ranks' traces of
    the step are written (their writers export after the step), what they say about who made
    the others wait, logged as a warning when an alert asked for the capture (a worker's slow
    step, the driver's slow rank), at INFO when a person did. Each runs on a daemon thread:
    training never waits for it; ``close()`` waits for them, bounded."""

    def __init__(self, save_path: str, timeout_s: float) -> None:
        self.save_path, self.timeout_s = save_path, timeout_s
        self.lines: list[str] = []
        self._threads: list[threading.Thread] = []

    def start(self, step: int, ranks: set[int], *, asked: bool) -> None:
        thread = threading.Thread(
            target=self._run, args=(step, ranks, asked), name=f"profdsl-follow-up-{step}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def _run(self, step: int, ranks: set[int], asked: bool) -> None:
        try:
            from profdsl.analysis.culprits import await_traces, follow_up  # (the trace reader: only when needed)

            missing = await_traces(self.save_path, step, ranks, self.timeout_s)
            lines = follow_up(self.save_path, step, missing=missing)
        except Exception as exc:  # never into training
            once("ray-follow-up", logging.ERROR, "profdsl: reading the capture of step %s failed: %r", step, exc)
            return
        for line in lines:
            logger.log(logging.INFO if asked else logging.WARNING, "profdsl: follow-up: %s", line)
        self.lines += lines

    def close(self) -> None:
        """Wait for the follow-ups still going, at most :data:`FOLLOW_UP_CLOSE_S` (a daemon thread
        left then ends with the process)."""
        deadline = time.monotonic() + FOLLOW_UP_CLOSE_S
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]


class _Requests:
    """The capture requests the driver passes on to its workers (docs/on-demand.md)."""

    def __init__(self) -> None:
        self.heard: list[CaptureRequest] = []  # requests delivered here, to pass on at the next step
        self.requested: set[int] = set()  # steps requests passed on asked for
        self.asked: set[int] = set()  # of those, the steps a person's request asked for

    def hear(self, request: CaptureRequest) -> None:
        """A request was delivered in this process (``request()``, a request file, an automatic
        capture): pass it on at the next step (never waits: on any thread)."""
        self.heard.append(request)

    def pass_on(self, step: int) -> list[CaptureRequest]:
        """The requests heard since the last step, each pinned to the steps it traces (from
        ``step``, or its own ``at_step`` when later), noted as requested."""
        heard, self.heard = self.heard, []
        pinned = []
        for request in heard:
            start = request.at_step if request.at_step is not None else step
            pinned.append(attrs.evolve(request, at_step=start))
            steps = range(max(start, step), start + (request.steps or 1))
            self.requested.update(steps)
            if request.source != "auto":  # a person's request: its capture is no alert's follow-up
                self.asked.update(steps)
        self.requested = {s for s in self.requested if s >= step}
        self.asked = {s for s in self.asked if s >= step}
        return pinned


class _RankWatch:
    """The driver's comparison of its ranks, step by step: stragglers (``metrics.stragglers``)
    and a slow rank (``auto``), from each step's timings."""

    def __init__(self, config: ProfilerConfig) -> None:
        self.alerts: list[StragglerAlert] = []  # straggler episodes begun or ended, to pass on
        self._slow = SlowRanks(config.auto) if config.enable and config.auto is not None else None
        stragglers = config.metrics.stragglers
        self._stragglers = StragglerWatch(stragglers) if config.metrics.enabled and stragglers.enabled else None

    def pass_on(self) -> list[StragglerAlert]:
        """The straggler episodes begun or ended since the last call, for the workers' exporters."""
        alerts, self.alerts = self.alerts, []
        return alerts

    def summary(self, step: int, own: StepTimings, answers: list[Any], *, traced: bool) -> StepSummary:
        """The step's summary over the driver's timings (``own``) and the workers' (their
        ``stop_profile`` answers), its ranks compared; its fleet lines logged."""
        timings = [own] + [t for answer in answers for t in _timings(answer)]
        summary = aggregate(step, timings)
        try:
            summary = self.compare(step, summary, traced=traced)
        except Exception as exc:  # never into training
            once("ray-compare-ranks", logging.ERROR, "profdsl: comparing the ranks of step %s failed: %r", step, exc)
        for line in summary.fleet:  # where the fleet sat idle (docs/ledger.md): said, never loud
            logger.info("profdsl: fleet: %s", line)
        return summary

    def compare(self, step: int, summary: StepSummary, *, traced: bool) -> StepSummary:
        """Stragglers (logged once per episode, passed on to the workers' exporters) and a slow
        rank (its next step and a typical rank's requested), from one step's timings."""
        times = rank_times(t for t in summary.timings if t.role != "driver")
        if self._stragglers is not None:
            for alert in self._stragglers.observe(step, times, traced=traced):
                logger.log(logging.WARNING if alert.active else logging.INFO, "profdsl: %s", alert.message())
                self.alerts.append(alert)
            summary = attrs.evolve(summary, stragglers=tuple(self._stragglers.active()))
        if self._slow is not None:
            found = self._slow.observe(step, times, traced=traced)
            if found is not None:
                logger.warning(
                    "profdsl: slow rank: %s; tracing step %s on ranks %s (automatic capture %s of %s)",
                    found.reason(),
                    step + 1,
                    ", ".join(map(str, found.ranks())),
                    self._slow.captures,
                    self._slow.auto.max_captures,
                )
                PROCESS.inbox.deliver(
                    CaptureRequest(
                        id=f"auto-ranks-s{step + 1}",
                        steps=1,
                        ranks=found.ranks(),
                        roles=tuple(sorted({t.role for t in summary.timings if t.role != "driver"})) or None,
                        at_step=step + 1,
                        reason=found.reason(),
                        source="auto",
                    )
                )
        return summary


def _call(
    workers: list[Any], errors: list[WorkerCallError], method: str, *args: Any, timeout: float, **kwargs: Any
) -> list[Any]:
    """Call ``method`` on every worker; the answers (None for a worker that failed, noted in
    ``errors``)."""
    if not workers:
        return []
    import ray

    refs = [getattr(w, method).remote(*args, **kwargs) for w in workers]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    answers: list[Any] = [None] * len(refs)
    for index, ref in enumerate(refs):
        error = f"no answer within {timeout:g}s"
        if ref in ready:
            try:
                answers[index] = ray.get(ref)
                continue
            except Exception as exc:
                error = described(exc)
        errors.append(WorkerCallError(index, method, error))
        once(
            f"ray-{method}-{index}",
            logging.ERROR,
            "profdsl: worker %s (%r) %s failed: %s",
            index,
            workers[index],
            method,
            error,
        )
    return answers


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
        on_step: with ``config.metrics.enabled``, called as ``on_step(step, metrics)`` after
            each step with the spread over ranks, flat (``metrics.flat()``).

    Capture requests (docs/on-demand.md): :meth:`request`, and the request files the driver finds
    in ``save_path``, are passed on to every worker with the step they begin at, so that every
    rank traces the same steps; the workers are driven on those steps. With ``config.auto`` the
    driver compares the ranks of each step and requests the next step of a slow rank and of a
    typical one; with metrics on, ``config.metrics.stragglers`` finds stragglers (logged once per
    episode, in ``metrics.flat()`` and on the straggling rank's Prometheus endpoint).

    With ``config.metrics.enabled`` every step starts and stops the workers (not only profiled
    steps), and ``metrics`` is the last step's :class:`~profdsl.metrics.StepSummary`: each
    rank's stage timings, gathered at stop, and per role and stage their min, mean, max and
    slowest rank, with the driver's own (``rollout``) as role ``"driver"``; and its fleet lines
    (``metrics.fleet``, logged at INFO): per role, the kind of work the others did while its
    ranks sat idle longest (``actor ranks idle 92.0% of step 7 while generation ran (...)``:
    the step ledger, docs/ledger.md).

    Examples:
        >>> from profdsl import ProfilerConfig
        >>> trainer = RayStepProfiler(ProfilerConfig(), workers=[])
        >>> with trainer.step(1):
        ...     with trainer.rollout():
        ...         pass
        >>> trainer.close()
    """

    def __init__(
        self,
        config: ProfilerConfig,
        *,
        workers: Sequence[Any],
        engines: Sequence[Any] = (),
        replica_world_size: int = 1,
        call_timeout_s: float = 300.0,
        on_step: OnStep | None = None,
    ) -> None:
        self.config = config
        self.workers = _distinct(workers)
        self.engines = list(engines)
        self.replica_world_size = replica_world_size
        self.call_timeout_s = call_timeout_s
        self.errors: list[WorkerCallError] = []
        self.metrics: StepSummary | None = None
        self._on_step = on_step
        self.clock = _driver_clock(config)
        self._requests = _Requests()
        self._follow = _FollowUps(config.save_path, min(config.torch.export_timeout_s, FOLLOW_UP_WAIT_S))
        self._watch = _RankWatch(config)
        PROCESS.inbox.listen(self._requests.hear)

    def request(
        self,
        steps: SupportsIndex,
        *,
        ranks: Iterable[SupportsIndex] | str | None = None,
        roles: Iterable[str] | None = None,
        reason: str | None = None,
    ) -> str | None:
        """Trace the next ``steps`` steps on the workers' ``ranks`` (a list, ``"all"`` or a rank
        selector; default: the config's) and ``roles`` (default: every role; ``"rollout"``: the
        engines). Every worker begins at the same step: the next one this driver begins. Returns
        the request's id, or None when it is malformed (logged). Never raises."""
        try:
            request = capture_request(
                steps, ranks=ranks, roles=roles, reason=reason, source="ray", request_id=new_id("ray")
            )
        except RecordError as exc:
            logger.warning("profdsl: RayStepProfiler.request(...) is no capture request (%s): ignored", exc)
            return None
        PROCESS.inbox.deliver(request)
        return request.id

    def _stop_timeout(self) -> float:
        return self.config.finish_hook.timeout_s + self.config.rollout.stop_timeout_s

    @contextlib.contextmanager
    def step(self, step: SupportsIndex) -> Iterator[RayStepProfiler]:
        """Profile RL step ``step`` (any integer: ``numpy.int64``, a 0-d tensor) on the workers, if
        it is a profiled step."""
        self.clock.start(step)
        number = self.clock.current_step
        passed = self._requests.pass_on(number) if number is not None else []
        stepping = self.clock.step_context
        planned = number is not None and stepping is not None and stepping.profiled
        driven = number is not None and (planned or number in self._requests.requested or self.config.metrics.enabled)
        started: list[Any] = []
        if driven:  # the workers get the step as a plain int
            # only what there is: a worker's own start_profile may take neither
            extra = {key: value for key, value in (("requests", passed), ("alerts", self._watch.pass_on())) if value}
            started = _call(self.workers, self.errors, "start_profile", number, timeout=self.call_timeout_s, **extra)
        elif passed:
            self._requests.heard[:0] = passed  # not driven (no step number): the next step passes them on
        # a requested step is traced where a worker took the request: one every worker
        # refused (too many steps, a rank or role no worker has) leaves the times untouched
        traced = planned or any(answer is True for answer in started)  # somewhere: skewed times
        captured = traced and not planned  # a capture asked for: an alert's, or a person's
        try:
            yield self
        finally:
            answers = _call(self.workers, self.errors, "stop_profile", timeout=self._stop_timeout()) if driven else []
            own = self.clock.stop()
            if own is not None and number is not None:
                self.metrics = self._watch.summary(number, own, answers, traced=traced)
                call_on_step(self._on_step, number, self.metrics.flat(), "RayStepProfiler")
            if captured and number is not None:
                self._follow.start(number, _ranks(started, answers), asked=number in self._requests.asked)

    def rollout(self, name: str = "rollout") -> rollout_window:
        """``rollout_window`` over the engines, for the current step (timed as stage ``name``)."""
        return rollout_window(self.engines, replica_world_size=self.replica_world_size, profiler=self.clock, name=name)

    @property
    def follow_ups(self) -> list[str]:
        """The follow-up lines of the captures asked for so far (docs/ledger.md): each capture's
        culprit at collectives, or why none; complete after :meth:`close`."""
        return self._follow.lines

    def close(self) -> None:
        """Training is over: every worker closes, running a finish hook still owed; the
        captures' follow-ups still going are waited for (bounded)."""
        PROCESS.inbox.unlisten(self._requests.hear)
        _call(self.workers, self.errors, "finish_profile", timeout=self._stop_timeout())
        self.clock.close()
        self._follow.close()
