"""Resolve once: what a :class:`~profdsl.runtime.profiler.Profiler` turns its config, role, rank,
world and topology into at construction, and what its parts receive instead of the raw config.

Every decision that depends on who this process is (is this rank traced, does it run the finish
hook, which steps are profiled, how its traces are named) is taken here, once.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket

import attrs

from profdsl.collect.export import ExportPolicy, TraceLabel
from profdsl.config import ProfilerConfig
from profdsl.config.checks import text_without_nul
from profdsl.core.parallel_discovery import process_topology
from profdsl.core.ranks import discover_world, is_hook_rank, is_rank_selected
from profdsl.core.step_plan import StepPlan
from profdsl.core.topology import Topology
from profdsl.runtime.writer.hook import HookPlan

__all__ = ["RolePlan", "resolve"]


@attrs.frozen(kw_only=True)
class RolePlan:
    """One role of one process, resolved.

    Attributes:
        config: the options the parts read (torch, rollout, metrics...); never the rank rules.
        role: the role's name.
        topology: this process's rank, world size and parallel coordinates.
        traced: whether this role captures anything here (enabled, its rank selected, a
            capturing profiler).
        member: whether it takes part in its save_path's finish-hook round (enabled and
            capturing, selected or not: a hook rank need not be profiled).
        hook: the hook this rank runs, or None.
        steps: the profiled steps and how they group.
        label: who its traces are by (the step and stage set per trace).
    """

    config: ProfilerConfig
    role: str
    topology: Topology
    traced: bool
    member: bool
    hook: HookPlan | None
    steps: StepPlan
    label: TraceLabel

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self.topology.rank

    @property
    def world_size(self) -> int:
        """The job's world size."""
        return self.topology.world_size

    @property
    def save_path(self) -> str:
        """Where this role's artifacts go."""
        return self.config.save_path

    def request_hook(self, traced: bool) -> HookPlan | None:
        """The hook this rank runs for a capture request it takes (``traced``: whether the
        request traces this rank): on ``finish_hook.ranks`` (or every rank with ``all_ranks``),
        else on the ranks the request traces; None for a step clock or without a command."""
        hook = self.config.finish_hook
        if (
            not self.member
            or hook.cmd is None
            or not is_hook_rank(
                self.rank,
                hook_ranks=hook.ranks,
                hook_all_ranks=hook.all_ranks,
                profiled_ranks=(),
                profiled_all_ranks=False,
                profiled=traced,
            )
        ):
            return None
        return _hook_plan(self.config, self.role, self.topology, self.label.host)


def resolve(
    config: ProfilerConfig,
    *,
    role: str,
    rank: int | None,
    world_size: int | None,
    capture: bool = True,
    parallel: object = None,
) -> RolePlan:
    """The plan of ``role`` on this process (``capture`` False: a step clock that captures
    nothing and runs no hook, such as a driver's).

    Raises:
        ConfigError: ``role`` is blank or holds NUL, or the rank, world size or parallel
            coordinates are invalid.
    """
    text_without_nul("Profiler role", role, blank=False)
    rank, world_size = discover_world(rank, world_size)
    topology = process_topology(rank, world_size, parallel, select=config.select)
    member = capture and config.enable
    selected = member and is_rank_selected(
        rank, config.ranks, all_ranks=config.all_ranks, select=config.select, topology=topology
    )
    host = socket.gethostname()
    hook = config.finish_hook
    runs_hook = (
        member
        and hook.cmd is not None
        and is_hook_rank(
            rank,
            hook_ranks=hook.ranks,
            hook_all_ranks=hook.all_ranks,
            profiled_ranks=config.ranks,
            profiled_all_ranks=config.all_ranks,
            profiled=selected,
        )
    )
    config_hash = hashlib.sha256(json.dumps(config.to_mapping(), sort_keys=True).encode()).hexdigest()[:12]
    label = TraceLabel(
        role=role,
        stage=None,
        step=None,
        rank=rank,
        world_size=world_size,
        save_path=config.save_path,
        host=host,
        pid=os.getpid(),
        config_hash=config_hash,
        export=ExportPolicy.of(config.torch),
        parallel=topology.parallel,
    )
    return RolePlan(
        config=config,
        role=role,
        topology=topology,
        traced=selected,
        member=member,
        hook=_hook_plan(config, role, topology, host) if runs_hook else None,
        steps=StepPlan.from_config(config),
        label=label,
    )


def _hook_plan(config: ProfilerConfig, role: str, topology: Topology, host: str) -> HookPlan:
    hook = config.finish_hook
    return HookPlan(
        save_path=config.save_path,
        cmd=hook.cmd or "",
        timeout_s=hook.timeout_s,
        background=hook.background,
        tool=config.tool,
        role=role,
        rank=topology.rank,
        world_size=topology.world_size,
        host=host,
        coords=dict(topology.parallel.coords()),
    )
