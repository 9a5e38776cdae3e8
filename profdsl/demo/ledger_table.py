"""The demo's step ledger: where every step's wall time went, per role (the mean over its ranks),
from the always-on metrics, and per step the fleet lines (``docs/ledger.md``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from profdsl.core.kinds import STAGE_KINDS
from profdsl.core.ledger import OUTSIDE, OVERHEAD
from profdsl.metrics import StepTimings
from profdsl.metrics.aggregate import fleet_lines

__all__ = ["TITLE", "ledger_lines"]

TITLE = (
    "the step ledger (every step, from the always-on metrics): where each step's wall time went, per role, "
    "mean over its ranks (ms); the columns after wall ms add up to it"
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
    columns = [k for k in STAGE_KINDS if k in used] + [OVERHEAD, OUTSIDE]
    headers = ["step", "role", "ranks", "wall ms", *(f"{c} ms" for c in columns)]
    rows = []
    for (step, role), items in sorted(by.items()):
        mean = {c: sum((t.ledger or {}).get(c, 0.0) for t in items) / len(items) for c in columns}
        wall = sum(t.wall_s for t in items) / len(items)
        rows.append([str(step), role, str(len(items)), f"{wall * 1e3:.2f}", *(f"{mean[c] * 1e3:.2f}" for c in columns)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths))).rstrip()
        for values in [headers, ["-" * w for w in widths], *rows]
    ]
    for step in sorted({step for step, _ in by}):
        lines += fleet_lines(step, timings)
    return lines
