"""A role's always-on stage metrics: the :class:`Profiler`'s metrics hook.

With ``Metrics(enabled=True)`` every numbered step of the profiler is timed, profiled or not and
whatever the rank: ``begin`` makes the step's tree (:class:`~profdsl.metrics._tree.Root`), which
the profiler registers with the step (:class:`~profdsl._runtime.step.StepContext`), where the DSL
finds it; ``end`` closes it, turns it into :class:`~profdsl.metrics._timings.StepTimings` with
the step's ledger (:mod:`profdsl.metrics._ledger`), and publishes them (exporters, ``on_step``).
A disabled config gets :data:`NULL_METER`, which does nothing.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from profdsl._runtime.registry import stray, unbound
from profdsl.core._log import internal_error
from profdsl.metrics import _device as device_time
from profdsl.metrics import _tree as tree
from profdsl.metrics._exporters import Exporter, OnStep, make_exporters, publish
from profdsl.metrics._ledger import StepLedger, step_ledger
from profdsl.metrics._timings import StepTimings, from_tree
from profdsl.metrics._tree import Node, Paths, Root, child, close

if TYPE_CHECKING:
    from collections.abc import Iterable

    from profdsl._runtime.context import Entry
    from profdsl._runtime.plan import RolePlan
    from profdsl._runtime.step import Closable, StepContext
    from profdsl.metrics._prometheus import Servers

__all__ = ["NULL_METER", "NullMeter", "StepMeter", "node_for"]


class StepMeter:
    """One role's stage metrics in one process (see the module docstring): ``plan.metrics``'s, its
    Prometheus port the node rank ``plan.local_rank`` up (on ``servers``, the process's endpoints);
    ``device``: whether it may time device work.

    ``timings`` and ``metrics`` are the last finished step's, structured and flat."""

    def __init__(self, plan: RolePlan, on_step: OnStep | None = None, *, device: bool = True, servers: Servers) -> None:
        self.config = config = plan.metrics
        self.role, self.rank, self.on_step = plan.role, plan.rank, on_step
        self._paths = Paths(config.max_stages, config.stages)
        self.exporters: list[Exporter] = make_exporters(
            config, role=plan.role, local_rank=plan.local_rank, servers=servers
        )
        self._device: device_time.DeviceTimes[Node] | None | bool = device and config.device_time
        self.root: Root | None = None
        self._began = 0.0
        self._began_s = 0.0
        self.timings: StepTimings | None = None

    @property
    def metrics(self) -> dict[str, float]:
        """The last finished step's flat mapping (empty before the first)."""
        return {} if self.timings is None else self.timings.flat()

    def _device_times(self) -> device_time.DeviceTimes[Node] | None:
        if self._device is True:  # decided at the first step, when a CUDA job has imported torch
            source = device_time.cuda_source() if "torch" in sys.modules else None
            self._device = None if source is None else device_time.DeviceTimes(source)
        return self._device or None

    def begin(self, step: int) -> Root:
        """Step ``step`` begins: its tree, whose entries are timed from now on (once the step is
        registered)."""
        if self.root is not None:
            self.close()
        self.root = root = Root(self.role, step, self._paths, self._device_times())
        self._began_s = time.time()  # where the step sits beside other ranks' (the fleet view)
        self._began = tree.clock()
        return root

    def end(self) -> StepTimings | None:
        """The step ends: its timings (entries still open are not counted), to :meth:`publish`
        once the step's capture has ended."""
        root, self.root = self.root, None
        if root is None:
            return None
        wall_s = tree.clock() - self._began
        nodes = close(root)
        device = None if root.device is None else _settled(root)
        ledger = _ledger(root, self._began, wall_s, None if device is None else device.placed)
        self.timings = from_tree(
            root,
            nodes,
            rank=self.rank,
            wall_s=wall_s,
            device=None if device is None else device.seconds,
            ledger=ledger,
            began_s=self._began_s,
        )
        return self.timings

    def publish(self, timings: StepTimings) -> None:
        """Send a finished step to the exporters and ``on_step``."""
        publish(timings, self.exporters, self.on_step)

    def close(self) -> None:
        """Drop a step still open (a loop that ended inside a step publishes nothing)."""
        root, self.root = self.root, None
        if root is not None:
            close(root)


def _ledger(
    root: Root, began: float, wall_s: float, device: list[tuple[Node, float, float]] | None
) -> StepLedger | None:
    try:
        return step_ledger(root, began=began, wall_s=wall_s, device=device)
    except Exception as exc:  # never reaches the training loop: the step has no ledger
        internal_error("step ledger", exc)
        return None


def _settled(root: Root) -> device_time.StepDevice[Node] | None:
    assert root.device is not None
    try:
        return root.device.read_step(root)
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
        return None

    def end(self) -> None:
        """Nothing timed."""
        return None

    def publish(self, timings: StepTimings) -> None:
        """Nothing to send."""

    def close(self) -> None:
        """Nothing open."""


NULL_METER = NullMeter()


def node_for(
    name: str,
    role: str | None,
    root: Root | None,
    steps: tuple[StepContext, ...],
    top: Entry | None,
    live: Iterable[Closable] = (),
    kind: str | None = None,
) -> Node | None:
    """The node an entry of ``name`` adds its time to, or None when no role of it is timing a
    step. An entry bound to a profiler (whose step's tree is ``root``) or to a ``role`` (the
    tree of that role's step among ``steps``) nests in the innermost open entry of that tree in
    its context (entries of other roles in between are skipped), else at the top of that tree;
    an unbound entry nests in the innermost open timed entry of its context, else at the top of
    the first tree of ``steps``. ``live``: the process's profilers (a ``role`` none of them has
    is said once); ``kind``: the entry's declared kind of work (a node made for it keeps it).
    Never raises."""
    try:
        if root is None and role is None:  # unbound: any tree
            entry = top
            while entry is not None:  # the innermost open timed entry of its context
                parent = entry.node
                if parent is not None and entry.live and not parent.closed:
                    break
                entry = entry.below
            else:
                for step in steps:  # else the top of the first tree
                    if step.root is not None:
                        parent = step.root
                        break
                else:
                    return None
                if len(steps) > 1:
                    timed = [step.role for step in steps if step.root is not None]
                    if len(timed) > 1:
                        unbound(name, False, timed, parent.role)
            return parent.children.get(name) or child(parent, name, kind)
        if root is None:
            for step in steps:
                if step.root is not None and step.role == role:
                    root = step.root
                    break
            else:
                if any(step.root is not None for step in steps):
                    stray(name, role, [step.role for step in steps if step.root is not None], live)  # type: ignore[arg-type]
                return None
        entry = top
        while entry is not None:  # the innermost open entry of that tree (entries of others skipped)
            parent = entry.node
            if parent is not None and entry.live and not parent.closed and parent.root is root:
                break
            entry = entry.below
        else:
            parent = root
        return parent.children.get(name) or child(parent, name, kind)
    except Exception as exc:
        internal_error("metrics entry", exc)
        return None
