"""Always-on stage metrics: the wall time of every DSL entry, per step, role and rank.

The same annotations that mark profiled regions (``profile_stage``, ``mini_batch_window``,
``rollout_window``) time every entry of every step on every rank when ``Metrics(enabled=True)``:
``tree`` holds a step's timings by stage path, ``spans`` the open entries of each context,
``timings`` the finished step and its flat mapping (``timing_s/update_actor``...), ``aggregate``
the spread over ranks, ``exporters`` (``prometheus``, ``otel``) where steps go, and ``device``
the CUDA time of stages. See ``docs/metrics.md``.
"""

from profdsl.metrics.aggregate import Spread, StepSummary, aggregate
from profdsl.metrics.timings import NAMES, StageTiming, StepTimings

__all__ = ["NAMES", "Spread", "StageTiming", "StepSummary", "StepTimings", "aggregate"]
