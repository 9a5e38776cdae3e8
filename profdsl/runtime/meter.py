"""A role's always-on stage metrics: the :class:`Profiler`'s metrics hook.

With ``Metrics(enabled=True)`` every numbered step of the profiler is timed, profiled or not and
whatever the rank: ``begin`` makes the step's tree (:class:`~profdsl.metrics.tree.Root`) and lists
it in the registry, where the DSL finds it; ``end`` closes it, turns it into
:class:`~profdsl.metrics.timings.StepTimings`, and publishes them (exporters, ``on_step``). A
disabled config gets :data:`NULL_METER`, which does nothing.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from profdsl.config import Metrics
from profdsl.core.discovery import discover_rank
from profdsl.core.log import internal_error
from profdsl.metrics import device as device_time
from profdsl.metrics import tree
from profdsl.metrics.exporters import Exporter, OnStep, make_exporters, publish
from profdsl.metrics.timings import StepTimings, from_tree
from profdsl.metrics.tree import Node, Paths, Root, child, close
from profdsl.runtime.process import PROCESS, Process
from profdsl.runtime.registry import stray, unbound

if TYPE_CHECKING:
    from profdsl.runtime.context import Entry
    from profdsl.runtime.profiler import Profiler

__all__ = ["NULL_METER", "NullMeter", "StepMeter", "make_meter", "node_for"]


class StepMeter:
    """One role's stage metrics in one process (see the module docstring).

    ``timings`` and ``metrics`` are the last finished step's, structured and flat."""

    def __init__(
        self,
        config: Metrics,
        *,
        role: str,
        rank: int,
        world_size: int,
        on_step: OnStep | None = None,
        device: bool = True,
        process: Process = PROCESS,
    ) -> None:
        self.config, self.role, self.rank, self.on_step = config, role, rank, on_step
        self._registry = process.registry
        self._paths = Paths(config.max_stages, config.stages)
        local_rank = discover_rank(rank, world_size).local_rank
        self.exporters: list[Exporter] = make_exporters(
            config, role=role, local_rank=local_rank, servers=process.servers
        )
        self._device: device_time.DeviceTimes | None | bool = device and config.device_time
        self.root: Root | None = None
        self._began = 0.0
        self.timings: StepTimings | None = None

    @property
    def metrics(self) -> dict[str, float]:
        """The last finished step's flat mapping (empty before the first)."""
        return {} if self.timings is None else self.timings.flat()

    def _device_times(self) -> device_time.DeviceTimes | None:
        if self._device is True:  # decided at the first step, when a CUDA job has imported torch
            source = device_time.cuda_source() if "torch" in sys.modules else None
            self._device = None if source is None else device_time.DeviceTimes(source)
        return self._device or None

    def begin(self, step: int) -> None:
        """Step ``step`` begins: its entries are timed from now on."""
        if self.root is not None:
            self.close()
        self.root = Root(self.role, step, self._paths, self._device_times())
        self._began = tree.clock()
        self._registry.activate_meter(self.root)

    def end(self) -> StepTimings | None:
        """The step ends: its timings (entries still open are not counted), to :meth:`publish`
        once the step's capture has ended."""
        root, self.root = self.root, None
        if root is None:
            return None
        wall_s = tree.clock() - self._began
        self._registry.deactivate_meter(root)
        nodes = close(root)
        device = None if root.device is None else _settled(root)
        self.timings = from_tree(root, nodes, rank=self.rank, wall_s=wall_s, device=device)
        return self.timings

    def publish(self, timings: StepTimings | None) -> None:
        """Send a finished step to the exporters and ``on_step``."""
        if timings is not None:
            publish(timings, self.exporters, self.on_step)

    def close(self) -> None:
        """Drop a step still open (a loop that ended inside a step publishes nothing)."""
        root, self.root = self.root, None
        if root is not None:
            self._registry.deactivate_meter(root)
            close(root)


def _settled(root: Root) -> dict[Node, float] | None:
    assert root.device is not None
    try:
        return root.device.settle()
    except Exception as exc:  # a CUDA error at step end: no device time this step
        internal_error("device time", exc)
        return None


class NullMeter:
    """The meter of a role without metrics: times nothing."""

    root = None
    timings = None

    @property
    def metrics(self) -> dict[str, float]:
        """Always empty."""
        return {}

    def begin(self, step: int) -> None:
        """Nothing to time."""

    def end(self) -> None:
        """Nothing timed."""
        return None

    def publish(self, timings: StepTimings | None) -> None:
        """Nothing to send."""

    def close(self) -> None:
        """Nothing open."""


NULL_METER = NullMeter()


def make_meter(
    config: Metrics,
    role: str,
    rank: int,
    world_size: int,
    on_step: OnStep | None = None,
    *,
    device: bool = True,
    process: Process = PROCESS,
) -> StepMeter | NullMeter:
    """A :class:`StepMeter` when ``config.enabled``, else :data:`NULL_METER`."""
    if not config.enabled:
        return NULL_METER
    return StepMeter(
        config, role=role, rank=rank, world_size=world_size, on_step=on_step, device=device, process=process
    )


def node_for(name: str, role: str | None, profiler: Profiler | None, top: Entry | None) -> Node | None:
    """The node an entry of ``name`` adds its time to, or None when no role of it is timing a
    step. An entry bound to a role or profiler nests in the innermost open entry of that role's
    step tree in its context (entries of other roles in between are skipped), else at the top of
    that tree; an unbound entry nests in the innermost open timed entry of its context, else at
    the top of the first role timing a step. Never raises."""
    try:
        root: Root | None = None
        if profiler is not None or role is not None:
            root = profiler.meter.root if profiler is not None else PROCESS.registry.find_meter(role)
            if root is None:
                if profiler is None and role is not None:
                    stray(name, role, [m.role for m in PROCESS.registry.meters], PROCESS.live)
                return None
        entry = top
        while entry is not None:  # the innermost open entry of that tree (of any, unbound)
            parent = entry.node
            if parent is not None and entry.live and not parent.closed and (root is None or parent.root is root):
                break
            entry = entry.below
        else:
            if root is None:
                meters = PROCESS.registry.meters
                if not meters:
                    return None
                root = meters[0]
                if len(meters) > 1:
                    unbound(name, False, [m.role for m in meters], root.role)
            parent = root
        return parent.children.get(name) or child(parent, name)
    except Exception as exc:
        internal_error("metrics entry", exc)
        return None
