"""What a config will capture, before a run (pure): the prediction ``profdsl plan`` prints.

Every answer comes from the rule's one home: sessions from
:meth:`~profdsl.core.step_plan.StepPlan.from_config`, ranks from
:func:`~profdsl.core._decide.decide` for each rank, windows from :func:`~profdsl.core._schedule.recorded_windows`.

Examples:
    >>> from profdsl.config import ProfilerConfig
    >>> p = preview(ProfilerConfig(enable=True, steps=[1, 2, 4], continuous_steps=True), world_size=2)
    >>> p.sessions, p.ranks, p.traces_per_rank
    (((1, 2), (4, 4)), (0,), 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from profdsl.config import ProfilerConfig
from profdsl.config._checks import MAX_WIDE_INDEX, require_int
from profdsl.core._decide import decide
from profdsl.core._naming import TraceName
from profdsl.core._schedule import recorded_windows
from profdsl.core._selection import Selection
from profdsl.core._topology import GridLayout, Topology
from profdsl.core.step_plan import StepPlan
from profdsl.errors import ConfigError

__all__ = ["Preview", "mini_batch_windows", "preview"]

#: A fixed time for example file names, so that a preview is reproducible.
EXAMPLE_TIME_MS = 1_795_000_000_000


#: The most mini-batches per step a preview computes windows for (each is walked once).
MAX_MINI_BATCHES = 1_000_000
#: The largest world a rank selector is previewed over (each rank is resolved once).
MAX_SELECTOR_WORLD = 1 << 20


def mini_batch_windows(config: ProfilerConfig, mini_batches: int) -> tuple[tuple[int, int], ...]:
    """The windows ``mini_batches`` update mini-batches record: those of the schedule (in a
    scheduled discrete stage, one trace each; in a continuous step, listed in its trace), or all
    of them as one window without a schedule."""
    require_int("mini_batches", mini_batches, 0, MAX_MINI_BATCHES)
    schedule = config.torch.schedule
    if schedule is not None:
        return tuple(recorded_windows(schedule, mini_batches))
    return ((0, mini_batches - 1),) if mini_batches else ()


def _candidate_ranks(config: ProfilerConfig, world_size: int) -> Sequence[int]:
    """The ranks of ``world_size`` that the rank rules (:class:`~profdsl.core._selection.Selection`) may select:
    every rank when a rule says all, else rank 0 and the ranks named. The rules still decide; this
    only spares a large world a walk over every rank."""
    hook = config.finish_hook
    if config.all_ranks or hook.all_ranks or config.select is not None:
        return range(world_size)
    return sorted(r for r in {0, *config.ranks, *hook.ranks} if r < world_size)


@attrs.frozen(kw_only=True)
class Preview:
    """What a config captures in a run of ``world_size`` ranks.

    Attributes:
        enabled: whether anything is profiled at all.
        tool: ``"torch"`` or ``"nsys"``.
        discrete: a trace per outermost stage (else one per step or run of steps).
        steps: the profiled steps.
        sessions: inclusive ``(first, last)`` steps of each capture (continuous: one trace each;
            discrete: each step's stages write their own traces).
        ranks: the profiled ranks.
        hook_ranks: the ranks that run the finish hook.
        hook_step: the step after which the hook runs (or at ``close()`` if never reached).
        replicas: rollout replicas profiled, when ``replica_world_size`` is given.
        mini_batches: update mini-batches per step the windows are computed for.
        windows: the mini-batch windows recorded (see :func:`mini_batch_windows`).
        traces_per_rank: trace files a profiled rank writes in continuous mode (one per session);
            in discrete mode, per profiled step, one per outermost stage (a scheduled stage: one
            per window).
        example: an example trace file name.
        layout: the grid layout the ranks were resolved on (``tp``, ``pp``, ``cp``, ``dp``,
            ``nodes``), when one was given or a selector needed one.
        coords: each profiled rank's coordinates and node (``{"tp": 0, ..., "node": 0}``), in
            the order of ``ranks``, with a layout.
    """

    enabled: bool
    tool: str
    discrete: bool
    steps: tuple[int, ...]
    sessions: tuple[tuple[int, int], ...]
    ranks: tuple[int, ...]
    hook_ranks: tuple[int, ...]
    hook_step: int | None
    replicas: tuple[int, ...] | None
    mini_batches: int
    windows: tuple[tuple[int, int], ...]
    traces_per_rank: int | None
    example: str
    layout: dict[str, int] | None = None
    coords: tuple[dict[str, int], ...] = ()

    def to_mapping(self) -> dict[str, Any]:
        """Plain lists and numbers (``profdsl plan --json``)."""
        return attrs.asdict(self, value_serializer=lambda _i, _f, v: list(v) if isinstance(v, tuple) else v)


def preview(
    config: ProfilerConfig,
    *,
    world_size: int,
    mini_batches: int = 8,
    replica_world_size: int | None = None,
    layout: GridLayout | None = None,
) -> Preview:
    """Predict what ``config`` captures on ``world_size`` ranks (laid out as ``layout``; a rank
    selector without one sees the plain layout: tp = pp = cp = 1, one node).

    Raises:
        ConfigError: ``world_size`` is not an integer in ``1..MAX_WIDE_INDEX``, ``mini_batches``
            not >= 0, ``replica_world_size`` not >= 1; a layout of another world size; a selector
            over more than ``MAX_SELECTOR_WORLD`` ranks, or one whose terms the layout cannot
            answer (``ep``).
    """
    require_int("world_size", world_size, 1, MAX_WIDE_INDEX)
    if layout is not None and layout.world_size != world_size:
        raise ConfigError(f"the layout is for world size {layout.world_size}, not {world_size}")
    selection = Selection.of(config)
    if selection.select is not None and layout is None:
        layout = GridLayout(world_size=world_size)
    if selection.select is not None and world_size > MAX_SELECTOR_WORLD:
        raise ConfigError(
            f"a rank selector is previewed over at most {MAX_SELECTOR_WORLD} ranks, got world size {world_size}"
        )
    plan = StepPlan.from_config(config)
    candidates = _candidate_ranks(config, world_size) if config.enable else ()
    place = (lambda r: Topology(rank=r, world_size=world_size)) if layout is None else layout.topology
    decided = [decide(config, place(r), selection=selection, steps=plan) for r in candidates]
    traced = [d.topology for d in decided if d.traced]
    ranks = tuple(t.rank for t in traced)
    hook_ranks = tuple(d.topology.rank for d in decided if d.runs_hook)
    replicas = None
    if replica_world_size is not None:
        width = require_int("replica_world_size", replica_world_size, 1)
        replicas = tuple(sorted(selection.replicas(width, max(world_size // width, 1))))
    windows = mini_batch_windows(config, mini_batches)
    scheduled = config.discrete and config.torch.schedule is not None
    first = ranks[0] if ranks else 0
    coords: dict[str, Any] = {} if layout is None else dict(layout.topology(first).parallel.coords())
    example = TraceName(
        role="actor",
        stage="update_actor" if config.discrete else None,
        step=plan.steps[0] if plan.steps else 0,
        rank=first,
        world_size=world_size,
        window=windows[0] if windows and scheduled else None,
        host="HOST",
        pid=1234,
        time_ms=EXAMPLE_TIME_MS,
        **coords,
    )
    return Preview(
        enabled=config.enable,
        tool=config.tool,
        discrete=config.discrete,
        steps=plan.steps,
        sessions=plan.sessions,
        ranks=ranks,
        hook_ranks=hook_ranks,
        hook_step=plan.hook_step if hook_ranks else None,
        replicas=replicas,
        mini_batches=mini_batches,
        windows=windows,
        traces_per_rank=None if config.discrete else len(plan.sessions),
        example=example.format(),
        layout=None
        if layout is None
        else {"tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "dp": layout.dp, "nodes": layout.nodes},
        coords=() if layout is None else tuple({**t.parallel.coords(), "node": layout.node_of(t.rank)} for t in traced),
    )
