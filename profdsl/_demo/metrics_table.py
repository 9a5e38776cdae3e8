"""The demo's always-on table: every step's stage timings on every rank (``Metrics``), beside
what the traces of the profiled steps say about the same stages."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from profdsl._cli.common import table
from profdsl.core._units import ms_text
from profdsl.metrics import StepTimings

__all__ = ["HEADERS", "TITLE", "MetricsLog"]

TITLE = "time per stage: always-on metrics (every step, every rank) beside the traces (profiled steps and ranks only)"
HEADERS = ("role", "stage", "steps", "ranks", "total ms", "mean ms", "slowest", "|", "traces", "traced ms")


class MetricsLog:
    """The step timings the demo gathered."""

    def __init__(self) -> None:
        self.timings: list[StepTimings] = []

    def add(self, timings: Iterable[StepTimings | None]) -> None:
        """A step's timings (of one rank's roles, or of every rank)."""
        self.timings.extend(t for t in timings if t is not None)

    def rows(self, traced: Iterable[tuple[str, str, int, float]]) -> list[list[str]]:
        """One row per role and stage path seen: steps and ranks it ran on, its total and mean
        per step of one rank (ms), the rank with the most time, then the traces' count and total
        for the same role and stage (``traced``: :func:`~profdsl._demo.report.traced_totals`)."""
        from_traces = {(role, stage): (count, total) for role, stage, count, total in traced}
        samples: dict[tuple[str, str], list[tuple[int, int, float]]] = defaultdict(list)
        for item in self.timings:
            for path, timing in item.stages.items():
                samples[(item.role, path)].append((item.step, item.rank, timing.total_s))
        rows = []
        for (role, path), seen in sorted(samples.items()):
            by_rank: dict[int, float] = defaultdict(float)
            for _, rank, seconds in seen:
                by_rank[rank] += seconds
            total = sum(by_rank.values())
            slowest = min(by_rank, key=lambda rank: (-by_rank[rank], rank))
            count, traced_ms = from_traces.get((role, path), (0, 0.0))
            rows.append(
                [
                    role,
                    path,
                    str(len({step for step, _, _ in seen})),
                    str(len(by_rank)),
                    ms_text(total * 1e3, 2),
                    ms_text(total * 1e3 / len(seen), 2),
                    f"rank {slowest}",
                    "|",
                    str(count) if count else "-",
                    ms_text(traced_ms, 2) if count else "-",
                ]
            )
        return rows

    def lines(self, traced: Iterable[tuple[str, str, int, float]]) -> list[str]:
        """The table's lines: header, rule and rows (none when nothing was timed)."""
        rows = self.rows(traced)
        if not rows:
            return []
        return table(HEADERS, rows, left=2).splitlines()  # names left-aligned, figures right-aligned
