"""Resolve once: what a :class:`~profdsl._runtime.profiler.Profiler` turns its config, role, rank,
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

from profdsl._capture.factory import CaptureSpec
from profdsl._runtime.writer.hook import HookPlan
from profdsl.collect._export import ExportPolicy, TraceLabel
from profdsl.config import AutoCapture, Metrics, OnDemand, ProfilerConfig
from profdsl.config._checks import text_without_nul
from profdsl.core._decide import decide
from profdsl.core._discovery import discover_local_rank, discover_world
from profdsl.core._log import logger, once
from profdsl.core._parallel_discovery import process_topology
from profdsl.core._selection import Selection
from profdsl.core._topology import Topology
from profdsl.core.step_plan import StepPlan

__all__ = ["DemandSpec", "RolePlan", "resolve"]


@attrs.frozen(kw_only=True)
class DemandSpec:
    """What capture requests a role takes: whether profiling is on, the request limits and the
    slow-step rule."""

    enabled: bool
    on_demand: OnDemand
    auto: AutoCapture | None


@attrs.frozen(kw_only=True)
class RolePlan:
    """One role of one process, resolved.

    Attributes:
        role: the role's name.
        save_path: where this role's artifacts go.
        capture: what a traced role captures with.
        demand: which capture requests it takes.
        metrics: the always-on metrics options.
        topology: this process's rank, world size and parallel coordinates.
        local_rank: this process's rank on its node (``LOCAL_RANK``, else ``rank``; read only
            when metrics are on): its metrics endpoint's port is ``Metrics.port`` plus it.
        traced: whether this role captures anything here (enabled, its rank selected, a
            capturing profiler).
        member: whether it takes part in its save_path's finish-hook round (enabled and
            capturing, selected or not: a hook rank need not be profiled).
        hook: the hook this rank runs, or None.
        steps: the profiled steps and how they group.
        label: who its traces are by (the step and stage set per trace).
        selection: the config's rank rules, resolved once (replicas, requests read it).
        hook_for_request: the hook a capture request's rank runs, where the hook rule gives it
            one (see :meth:`request_hook`); None without a command or outside the hook round.
    """

    role: str
    save_path: str
    capture: CaptureSpec
    demand: DemandSpec
    metrics: Metrics
    topology: Topology
    local_rank: int
    traced: bool
    member: bool
    hook: HookPlan | None
    steps: StepPlan
    label: TraceLabel
    selection: Selection
    hook_for_request: HookPlan | None = None

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self.topology.rank

    @property
    def world_size(self) -> int:
        """The job's world size."""
        return self.topology.world_size

    def say(self, level: int, message: str, *args: object, key: str | None = None) -> None:
        """Log ``message`` (with ``args``) about this role, after its rank and name: once under
        ``key`` (:func:`~profdsl.core._log.once`), or every time (None)."""
        if key is None:
            logger.log(level, "[profdsl rank %s] %s: " + message, self.rank, self.role, *args)
        else:
            once(key, level, "[profdsl rank %s] %s: " + message, self.rank, self.role, *args)

    def request_hook(self, traced: bool) -> HookPlan | None:
        """The hook this rank runs for a capture request it takes (``traced``: whether the
        request traces this rank): on ``finish_hook.ranks`` (or every rank with ``all_ranks``),
        else on the ranks the request traces; None for a step clock or without a command."""
        hook = self.hook_for_request  # (None outside the hook round: resolve gives a member's only)
        return hook if hook is not None and self.selection.runs_hook(self.rank, traced) else None


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
    selection = Selection.of(config)  # the selector parsed once, for the topology and the decisions
    topology = process_topology(rank, world_size, parallel, selection.select)
    local_rank = topology.local_rank
    if local_rank is None and config.metrics.enabled:  # read only when needed (the metrics port)
        local_rank = discover_local_rank()
    host = socket.gethostname()
    hook_plan = _hook_plan(config, role, topology, host) if config.finish_hook.cmd else None
    hashed = config.to_mapping()
    hashed.get("on_demand", {}).pop("token", None)  # a secret: not even hashed into traces
    config_hash = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:12]
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
    decided = decide(config, topology, capture=capture, selection=selection)
    hook_plan = hook_plan if decided.member else None
    return RolePlan(
        role=role,
        save_path=config.save_path,
        capture=CaptureSpec.of(config),
        demand=DemandSpec(enabled=config.enable, on_demand=config.on_demand, auto=config.auto),
        metrics=config.metrics,
        topology=topology,
        local_rank=rank if local_rank is None else local_rank,
        traced=decided.traced,
        member=decided.member,
        hook=hook_plan if decided.runs_hook else None,
        steps=decided.steps,
        label=label,
        selection=decided.selection,
        hook_for_request=hook_plan,
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
