"""One numbered step of one role, as the DSL sees it: the one object the registry holds while
the step has anything on (docs/architecture.md, "The runtime in one page").

A :class:`~profdsl._runtime.profiler.Profiler` makes a :class:`StepContext` when a numbered step
begins that is profiled (its plan's or a request's, whatever the rank: a driver's step clock
decides when rollout engines are profiled), captured here (a recorder), or timed (a metrics
tree), registers it once and takes it back once when the step ends. A step with nothing on
registers nothing, so the DSL costs it one attribute check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from profdsl._runtime.plan import RolePlan
    from profdsl._runtime.recorder import Recorder
    from profdsl._runtime.writer.writer import Writer
    from profdsl.config import ProfilerConfig
    from profdsl.metrics._tree import Root

__all__ = ["Closable", "StepContext"]


class Closable(Protocol):
    """A live role of the process (a profiler not closed yet): closed at interpreter exit."""

    @property
    def role(self) -> str:
        """The role's name."""

    def close(self) -> None:
        """Close what is open, run a finish hook still owed."""


class StepContext:
    """Step ``step`` of ``plan.role`` while it has anything on.

    Attributes:
        role: the role's name (``plan.role``).
        step: the step's number.
        plan: the role's resolved plan.
        config: the role's configuration (``rollout_window`` reads its rollout options).
        writer: the process's writer (every record and move goes through it).
        profiled: whether the step is profiled (the plan's or a request's), captured here or not.
        recorder: what the DSL opens regions with, when the step is captured here; else None.
        root: the step's metrics tree, when it is timed; else None.
    """

    __slots__ = ("config", "plan", "profiled", "recorder", "role", "root", "step", "writer")

    def __init__(
        self,
        plan: RolePlan,
        step: int,
        *,
        config: ProfilerConfig,
        writer: Writer,
        profiled: bool,
        recorder: Recorder | None,
        root: Root | None,
    ) -> None:
        self.role, self.step, self.plan, self.config, self.writer = plan.role, step, plan, config, writer
        self.profiled, self.recorder, self.root = profiled, recorder, root
        if recorder is not None:  # its stage captures' waits go to the step's ledger
            recorder.stages.tree = root
