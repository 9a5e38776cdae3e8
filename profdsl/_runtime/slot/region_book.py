"""What a session's traces say about the regions they hold (the ``profdsl`` metadata): the stage
and mini-batch names seen, the mini-batch windows a continuous step recorded, and the region
events that continue an entry (reopened around a schedule step, a ``yield`` or an ``await``), by
name and by the path of labels they sit at, and the kind of work each stage declared."""

from __future__ import annotations

from profdsl.config import Schedule
from profdsl.core._schedule import cycle_of
from profdsl.records.meta import Regions, WindowNote

__all__ = ["RegionBook"]


class RegionBook:
    """The region bookkeeping of one session (``stage``: a discrete trace's own stage)."""

    def __init__(self, stage: str | None, schedule: Schedule | None) -> None:
        self.schedule = schedule
        self.stages: set[str] = set() if stage is None else {stage}
        self.bases: set[str] = set()
        self.kinds: dict[str, str] = {}  # label -> its declared kind of work (the first declared)
        self._recorded: dict[tuple[str, int | None], tuple[Schedule | None, list[int]]] = {}
        self._continued: dict[int | None, dict[str, int]] = {}  # per schedule cycle
        self._continued_at: dict[int | None, dict[tuple[str, ...], int]] = {}

    def note(self, name: str, *, mini_batch: bool = False, kind: str | None = None) -> None:
        """A region opened while the session recorded (a stage, or a mini-batch base name),
        with the kind of work it declared (``profile_stage(kind=...)``, ``rollout_window``;
        None: none). The first declaration of a label stands."""
        (self.bases if mini_batch else self.stages).add(name)
        if kind is not None:
            self.kinds.setdefault(name, kind)

    def recorded(self, role: str, step: int | None, schedule: Schedule | None, index: int) -> None:
        """A mini-batch of a continuous role's step was recorded."""
        self._recorded.setdefault((role, step), (schedule, []))[1].append(index)

    def continued(self, name: str, cycle: int | None, path: tuple[str, ...] | None = None) -> None:
        """A region named ``name`` was reopened while the trace of ``cycle`` records (at
        ``path``: the labels of the regions open around it on its thread, then its own)."""
        counts = self._continued.setdefault(cycle, {})
        counts[name] = counts.get(name, 0) + 1
        if path is not None:
            at = self._continued_at.setdefault(cycle, {})
            at[path] = at.get(path, 0) + 1

    def windows(self) -> tuple[WindowNote, ...]:
        """The mini-batch windows a step session recorded, per role and step: the recorded
        mini-batches grouped by schedule cycle (one window without a schedule)."""
        found: list[WindowNote] = []
        for (role, step), (schedule, indices) in self._recorded.items():
            groups: dict[int | None, list[int]] = {}
            for index in sorted(indices):
                groups.setdefault(0 if schedule is None else cycle_of(schedule, index), []).append(index)
            found += [WindowNote(role=role, step=step, window=(g[0], g[-1])) for g in groups.values()]
        return tuple(found)

    def regions(self, window: tuple[int, int] | None) -> Regions:
        """The ``regions`` metadata of the trace of ``window`` (its continued pieces are taken:
        each trace counts its own)."""
        cycle = cycle_of(self.schedule, window[0]) if self.schedule is not None and window else None
        continued = self._continued.pop(cycle, {})
        at = self._continued_at.pop(cycle, {})
        return Regions(
            stages=tuple(sorted(self.stages)),
            mini_batches=tuple(sorted(self.bases)),
            continued=dict(sorted(continued.items())),
            continued_at=tuple(sorted(at.items())) or None,
            kinds=dict(sorted(self.kinds.items())) or None,
        )
