"""A finished step's stage timings, and the flat mapping loggers take.

The flat names follow the step timings trainers already log (verl's ``timing_s/gen``,
``timing_s/update_actor``): one prefix per statistic, then the stage's path, so that no stage
name can collide with a statistic's name. :data:`NAMES` is the one home of these names.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from profdsl.metrics._ledger import StepLedger, kind_for
from profdsl.metrics._tree import Node, Root

__all__ = ["NAMES", "StageTiming", "StepTimings", "from_tree"]


@attrs.frozen
class _Names:
    """The prefixes of the flat mapping's keys (``f"{prefix}/{path}"``)."""

    total: str = "timing_s"  #: seconds inside the stage this step, all entries
    own: str = "timing_self_s"  #: of which not inside a nested stage of the same role
    count: str = "timing_count"  #: entries this step
    mean: str = "timing_mean_s"  #: seconds per entry
    device: str = "timing_device_s"  #: CUDA time between entry and exit (CUDA only)
    step: str = "timing_step_s"  #: the step's wall time, start() to stop() (no path)
    overflow: str = "timing_overflow_count"  #: entries of paths beyond Metrics.max_stages (no path)
    straggler_factor: str = "timing_straggler_factor"  #: a straggler's time over the other ranks' median
    straggler_rank: str = "timing_straggler_rank"  #: which rank straggles
    straggler_steps: str = "timing_straggler_steps"  #: for how many consecutive steps
    ledger: str = "ledger_s"  #: the step's wall time split: seconds per bucket (a kind of work, overhead, outside)
    concurrent: str = "ledger_concurrent_s"  #: stage time beside the stage its instant went to (no path)
    ledger_device: str = "ledger_device_s"  #: the device span of the stages split: per kind, outside (CUDA only)


#: The flat mapping's key prefixes.
NAMES = _Names()


@attrs.frozen
class StageTiming:
    """One stage path in one step of one role.

    ``self_s`` is ``total_s`` less the time of the stages nested in it (never below zero: nested
    entries running concurrently, in tasks or threads, may add up to more than the stage's own
    wall time). ``device_s`` is None without CUDA device timing. ``kind``: its kind of work
    (:func:`profdsl.core._kinds.kind_of`: declared, else by name; derived from the path, so not
    compared).
    """

    total_s: float
    self_s: float
    count: int
    device_s: float | None = None
    kind: str | None = attrs.field(default=None, eq=False)

    @property
    def mean_s(self) -> float:
        """Seconds per entry."""
        return self.total_s / self.count if self.count else 0.0


@attrs.frozen(eq=True)
class StepTimings:
    """One role's stage timings in one step on one rank (what ``Profiler.stop()`` returns).

    ``stages`` maps each stage path (``"update_actor"``, ``"update_actor/mini_batch"``; ``/``
    inside a name is written ``%2F``) to its timing, in the order first entered. ``wall_s`` is
    the step's wall time; ``overflow`` counts entries of paths beyond ``Metrics.max_stages``.
    ``ledger`` splits ``wall_s`` into buckets that add up to it (seconds per kind of work,
    ``overhead`` and ``outside``: ``docs/ledger.md``), with the stage time that ran beside the
    stage its instant went to per kind (``ledger_beside``) and in all (``concurrent_s``), and
    where each kind worked (``ledger_spans``: seconds from ``began_s``, the step's beginning on
    the wall clock, seconds since 1970); None, and
    ``ledger_why`` says why, when the step has none (derived from the stages' stretches, which
    are not kept: not compared). ``ledger_engines_s``: of its ``overhead``, the seconds the step
    waited on rollout engines' profilers. ``ledger_waits_s``: profiling's waits inside the step as
    the metrics timed them (its ``overhead`` before any cap). ``ledger_device``: with device time on CUDA, the
    device span of the step's stages (from the first one's entry to the last one's exit, on the
    device) split per kind of work and ``outside`` (no stage's work); None without.

    Examples:
        >>> t = StepTimings(role="actor", rank=0, step=3, wall_s=2.0, stages={
        ...     "update_actor": StageTiming(total_s=1.5, self_s=0.3, count=1)})
        >>> t.flat()["timing_s/update_actor"], t.flat()["timing_step_s"]
        (1.5, 2.0)
    """

    role: str
    rank: int
    step: int
    wall_s: float
    stages: Mapping[str, StageTiming] = attrs.field(factory=dict)
    overflow: int = 0
    ledger: Mapping[str, float] | None = attrs.field(default=None, eq=False)
    concurrent_s: float | None = attrs.field(default=None, eq=False)
    ledger_beside: Mapping[str, float] | None = attrs.field(default=None, eq=False)
    ledger_spans: Mapping[str, tuple[tuple[float, float], ...]] | None = attrs.field(default=None, eq=False)
    began_s: float | None = attrs.field(default=None, eq=False)
    ledger_why: str | None = attrs.field(default=None, eq=False)
    ledger_engines_s: float | None = attrs.field(default=None, eq=False)
    ledger_device: Mapping[str, float] | None = attrs.field(default=None, eq=False)
    ledger_waits_s: float | None = attrs.field(default=None, eq=False)

    def flat(self) -> dict[str, float]:
        """The flat mapping for a logger (``wandb.log``, TensorBoard's ``add_scalar``, MLflow's
        ``log_metrics``): per stage path its total, self, count, mean (and device) figures, the
        step's wall time, its ledger (``ledger_s/<bucket>``, ``ledger_concurrent_s``) when it
        has one, its device split (``ledger_device_s/<bucket>``) when it has one, and the
        overflow count when there was any."""
        out: dict[str, float] = {}
        for path, timing in self.stages.items():
            out[f"{NAMES.total}/{path}"] = timing.total_s
            out[f"{NAMES.own}/{path}"] = timing.self_s
            out[f"{NAMES.count}/{path}"] = timing.count
            out[f"{NAMES.mean}/{path}"] = timing.mean_s
            if timing.device_s is not None:
                out[f"{NAMES.device}/{path}"] = timing.device_s
        out[NAMES.step] = self.wall_s
        if self.ledger is not None:
            out.update((f"{NAMES.ledger}/{bucket}", seconds) for bucket, seconds in self.ledger.items())
            out[NAMES.concurrent] = self.concurrent_s or 0.0
        if self.ledger_device is not None:
            out.update((f"{NAMES.ledger_device}/{bucket}", seconds) for bucket, seconds in self.ledger_device.items())
        if self.overflow:
            out[NAMES.overflow] = self.overflow
        return out


def from_tree(
    root: Root,
    nodes: list[Node],
    *,
    rank: int,
    wall_s: float,
    device: Mapping[Node, float] | None = None,
    ledger: StepLedger | None = None,
    began_s: float | None = None,
) -> StepTimings:
    """The timings of a closed step tree (``nodes``: its nodes, depth first), with its ledger
    (:func:`profdsl.metrics._ledger.step_ledger`) when given."""
    stages: dict[str, StageTiming] = {}
    for node in nodes:
        if not node.reported or not node.count:
            continue
        nested = sum(c.total for c in node.children.values())
        device_s = None if device is None else device.get(node, 0.0)
        stages[node.path] = StageTiming(
            total_s=node.total,
            self_s=max(0.0, node.total - nested),
            count=node.count,
            device_s=device_s,
            kind=kind_for(root.paths, node),
        )
    return StepTimings(
        role=root.role,
        rank=rank,
        step=root.step,
        wall_s=wall_s,
        stages=stages,
        overflow=root.overflow.count + root.overflow_top.count,
        ledger=None if ledger is None else ledger.buckets_s,
        concurrent_s=None if ledger is None or ledger.buckets_s is None else ledger.concurrent_s,
        ledger_beside=None if ledger is None or ledger.buckets_s is None else ledger.beside_s,
        ledger_why=None if ledger is None else ledger.why,
        ledger_spans=None if ledger is None else ledger.spans_s,
        began_s=began_s,
        ledger_engines_s=None if ledger is None or ledger.buckets_s is None else ledger.engines_s,
        ledger_device=None if ledger is None or ledger.buckets_s is None else ledger.device_s,
        ledger_waits_s=None if ledger is None or ledger.buckets_s is None else ledger.waits_s,
    )
