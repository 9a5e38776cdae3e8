"""Always-on stage metrics: the wall time of every DSL entry, per step, role and rank.

The same annotations that mark profiled regions (``profile_stage``, ``mini_batch_window``,
``rollout_window``) time every entry of every step on every rank when ``Metrics(enabled=True)``:
``tree`` holds a step's timings by stage path (each DSL entry adds to its node when it ends),
``timings`` the finished step and its flat mapping (``timing_s/update_actor``...), ``aggregate``
the spread over ranks, ``exporters`` (``prometheus``, ``otel``) where steps go, and ``device``
the CUDA time of stages. See ``docs/metrics.md``.

Examples:
    >>> from profdsl import Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage
    >>> config = ProfilerConfig(metrics=Metrics(enabled=True))   # nothing traced, all timed
    >>> logged = []
    >>> profiler = Profiler(config, role="actor", rank=0, world_size=1,
    ...                     on_step=lambda step, metrics: logged.append(step))
    >>> @profile_stage("update_actor")
    ... def update_actor(batches):
    ...     for batch in mini_batch_window(batches):
    ...         with profile_stage("forward_backward"):
    ...             pass
    >>> with profiler.step(1):
    ...     update_actor([1, 2, 3])
    >>> profiler.metrics["timing_count/update_actor/mini_batch"], logged
    (3, [1])
    >>> sorted(k for k in profiler.metrics if k.startswith("timing_s/"))
    ['timing_s/update_actor', 'timing_s/update_actor/mini_batch', 'timing_s/update_actor/mini_batch/forward_backward']
    >>> profiler.close()
"""

from profdsl.metrics._timings import NAMES, StageTiming, StepTimings
from profdsl.metrics.aggregate import Spread, StepSummary, aggregate

__all__ = ["NAMES", "Spread", "StageTiming", "StepSummary", "StepTimings", "aggregate"]
