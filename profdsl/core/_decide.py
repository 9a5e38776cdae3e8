"""The one resolver: what a config decides for one rank of a job (pure: no host, pid, clock or
environment), read by the runtime's plan and by ``profdsl plan``'s preview alike.

Examples:
    >>> from profdsl.config import ProfilerConfig
    >>> from profdsl.core._topology import Topology
    >>> d = decide(ProfilerConfig(enable=True, ranks=[1], steps=[2]), Topology(rank=1, world_size=2))
    >>> d.traced, d.member, d.runs_hook, d.steps.steps
    (True, True, False, (2,))
"""

from __future__ import annotations

import attrs

from profdsl.config import ProfilerConfig
from profdsl.core._selection import Selection
from profdsl.core._topology import Topology
from profdsl.core.step_plan import StepPlan

__all__ = ["Decisions", "decide"]


@attrs.frozen(kw_only=True)
class Decisions:
    """What one rank does under one config.

    Attributes:
        topology: the rank asked about.
        selection: the config's rank rules (for the questions asked later: replicas, requests).
        member: whether it takes part in its save_path's finish-hook round (enabled and
            capturing, traced or not: a hook rank need not be profiled).
        traced: whether it captures anything.
        runs_hook: whether it runs the finish hook.
        steps: the profiled steps and how they group.
    """

    topology: Topology
    selection: Selection
    member: bool
    traced: bool
    runs_hook: bool
    steps: StepPlan


def decide(
    config: ProfilerConfig,
    topology: Topology,
    *,
    capture: bool = True,
    selection: Selection | None = None,
    steps: StepPlan | None = None,
) -> Decisions:
    """Decide for the rank of ``topology`` (``capture`` False: a step clock that captures nothing
    and runs no hook). ``selection`` and ``steps``, when given, must be ``config``'s (they spare
    building them again when many ranks are decided).

    Raises:
        ConfigError: a selector term needs something ``topology`` lacks.
    """
    selection = Selection.of(config) if selection is None else selection
    member = capture and selection.enabled
    traced = member and selection.matches(topology)
    return Decisions(
        topology=topology,
        selection=selection,
        member=member,
        traced=traced,
        runs_hook=member and selection.runs_hook(topology.rank, traced),
        steps=StepPlan.from_config(config) if steps is None else steps,
    )
