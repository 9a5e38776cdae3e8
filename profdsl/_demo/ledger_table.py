"""The demo's step ledger: where every step's wall time went, per role (the mean over its ranks),
from the always-on metrics; with device time on CUDA, the device split of each step's stages
(``StepTimings.ledger_device``); and per step the fleet lines (``docs/ledger.md``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from profdsl._cli.common import table
from profdsl._cli.ledger_view import METRICS_OVERHEAD, ledger_columns
from profdsl.core._ledger import OUTSIDE, OVERHEAD
from profdsl.core._units import ms_text
from profdsl.metrics import StepTimings
from profdsl.metrics.aggregate import fleet_lines

__all__ = ["DEVICE_TITLE", "TITLE", "device_lines", "ledger_lines"]

TITLE = (
    "the step ledger (every step, from the always-on metrics): where each step's wall time went, per role, "
    f"mean over its ranks (ms); the columns after wall ms add up to it; {METRICS_OVERHEAD} (the cost table "
    "below counts profdsl's captures only, as their trace records say)"
)


DEVICE_TITLE = (
    "device time on CUDA: the device span of each step's stages split by kind of work and outside them "
    "(mean over the ranks with a device split, ms; outside %: its share of the span)"
)


def ledger_lines(timings: Sequence[StepTimings]) -> list[str]:
    """The table (header, rule, one row per step and role) and each step's fleet lines; [] when
    no step has a ledger."""
    by: dict[tuple[int, str], list[StepTimings]] = defaultdict(list)
    for item in timings:
        if item.ledger is not None:
            by[(item.step, item.role)].append(item)
    if not by:
        return []
    used = {k for items in by.values() for t in items for k, v in (t.ledger or {}).items() if v}
    columns = ledger_columns(used, OVERHEAD, OUTSIDE)
    headers = ["step", "role", "ranks", "wall ms", *(f"{c} ms" for c in columns)]
    rows = []
    for (step, role), items in sorted(by.items()):
        mean = {c: sum((t.ledger or {}).get(c, 0.0) for t in items) / len(items) for c in columns}
        wall = sum(t.wall_s for t in items) / len(items)
        rows.append(
            [str(step), role, str(len(items)), ms_text(wall * 1e3, 2), *(ms_text(mean[c] * 1e3, 2) for c in columns)]
        )
    lines = table(headers, rows, left=2).splitlines() + device_lines(timings)
    for step in sorted({step for step, _ in by}):
        lines += fleet_lines(step, timings)
    return lines


def device_lines(timings: Sequence[StepTimings]) -> list[str]:
    """With device time on CUDA: :data:`DEVICE_TITLE` and a table, per step and role, of the
    device span of its stages, each kind's device time, ``outside`` and its share (the mean over
    the ranks with a device split); [] when no step has one (on CPU)."""
    by: dict[tuple[int, str], list[Mapping[str, float]]] = defaultdict(list)
    for item in timings:
        if item.ledger_device is not None:
            by[(item.step, item.role)].append(item.ledger_device)
    if not by:
        return []
    used = {k for splits in by.values() for split in splits for k, v in split.items() if v}
    columns = ledger_columns(used, OUTSIDE)
    headers = ["step", "role", "ranks", "span ms", *(f"{c} ms" for c in columns), "outside %"]
    rows = []
    for (step, role), splits in sorted(by.items()):
        mean = {c: sum(split.get(c, 0.0) for split in splits) / len(splits) for c in columns}
        span = sum(sum(split.values()) for split in splits) / len(splits)
        share = f"{100 * mean[OUTSIDE] / span:.1f}" if span else "-"
        cells = [ms_text(span * 1e3, 2), *(ms_text(mean[c] * 1e3, 2) for c in columns), share]
        rows.append([str(step), role, str(len(splits)), *cells])
    return [f"{DEVICE_TITLE}:", *table(headers, rows, left=2).splitlines()]
