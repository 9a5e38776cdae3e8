"""``profdsl plot DIR --ledger``: the step ledger as stacked bars, one panel per role, one bar per
step: each bucket's mean over the role's ranks (:mod:`profdsl.analysis.ledger`, the numbers of
``profdsl summary --ledger``: traced steps from their traces, the others from the metrics log).
matplotlib is imported by the caller's figure only."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from profdsl.analysis.fleet import FROM_TRACE, RankLedger
from profdsl.analysis.ledger import FolderLedger
from profdsl.core.kinds import STAGE_KINDS
from profdsl.core.ledger import OUTSIDE, OVERHEAD

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["BUCKETS", "ledger_bars", "ledger_figure"]

#: The buckets in the order they are stacked, bottom up.
BUCKETS = (*STAGE_KINDS, OVERHEAD, OUTSIDE)
#: Fixed colours, so that a bucket keeps its colour in every plot (``outside`` a light grey).
COLOURS = {
    "generation": "#1f77b4",
    "inference": "#ff7f0e",
    "update": "#2ca02c",
    "weight_sync": "#d62728",
    "reward": "#9467bd",
    "data": "#8c564b",
    "other": "#e377c2",
    OVERHEAD: "#111111",
    OUTSIDE: "#d9d9d9",
}
#: A bar's source: from traces, the metrics log, or both (ranks of each).
SOURCES = {frozenset({"trace"}): "trace", frozenset({"metrics"}): "metrics"}

Bar = tuple[str, int, str, dict[str, float]]  # role, step, source, ms per bucket


def ledger_bars(found: FolderLedger) -> list[Bar]:
    """Per role and step: each bucket's mean over the ranks with a ledger (ms), and where they
    came from (``trace``, ``metrics``, or ``trace+metrics``), sorted by role and step."""
    ranks: dict[tuple[str, int], list[RankLedger]] = defaultdict(list)
    for rank in (*found.ranks, *found.metrics):
        if rank.ledger is not None and rank.step is not None:
            ranks[(rank.role, rank.step)].append(rank)
    bars: list[Bar] = []
    for (role, step), members in sorted(ranks.items()):
        sources = frozenset(r.source for r in members)
        source = SOURCES.get(sources, "trace+metrics")
        means = {
            bucket: sum(r.ledger.buckets.get(bucket, 0) for r in members if r.ledger is not None) / len(members) / 1e6
            for bucket in BUCKETS
        }
        bars.append((role, step, source, means))
    return bars


def ledger_figure(found: FolderLedger, title: str) -> Figure | None:
    """One panel per role, a stacked bar per step (None when no step has a ledger)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    bars = ledger_bars(found)
    if not bars:
        return None
    roles = sorted({role for role, *_ in bars})
    figure, axes = plt.subplots(len(roles), 1, figsize=(max(6.0, 0.5 * len(bars) + 3), 2.6 * len(roles) + 0.6))
    panels = [axes] if len(roles) == 1 else list(axes)
    used = [b for b in BUCKETS if any(means[b] > 0 for *_, means in bars)]
    for panel, role in zip(panels, roles):
        mine = [bar for bar in bars if bar[0] == role]
        _stack(panel, mine, used)
        panel.set_title(f"{role}: where each step's wall time went (mean over its ranks)", fontsize=9, loc="left")
        panel.set_ylabel("ms per step")
        for side in ("top", "right"):
            panel.spines[side].set_visible(False)
    handles = [Patch(color=COLOURS.get(b, "#7f7f7f")) for b in used]
    figure.suptitle(
        f"{title}: the step ledger (bars add up to the step's wall time; * from traces, else the metrics log)",
        fontsize=10,
        x=0.01,
        y=0.995,
        ha="left",
    )
    top = 1 - 0.9 / figure.get_figheight()
    figure.legend(
        handles, used, loc="upper left", bbox_to_anchor=(0.01, top + 0.35 / figure.get_figheight()), fontsize=8,
        ncol=len(used), frameon=False,
    )  # fmt: skip
    figure.tight_layout(rect=(0, 0, 1, top))
    return figure


def _stack(panel: Axes, bars: Sequence[Bar], used: Sequence[str]) -> None:
    """Stack ``used`` buckets of ``bars`` on ``panel``, one bar per step, labelled by step."""
    positions = list(range(len(bars)))
    bottoms = [0.0] * len(bars)
    for bucket in used:
        heights = [means[bucket] for *_, means in bars]
        panel.bar(positions, heights, bottom=bottoms, color=COLOURS.get(bucket, "#7f7f7f"), width=0.7)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    panel.set_xticks(positions)
    panel.set_xticklabels([f"{step}*" if FROM_TRACE in source else str(step) for _, step, source, _ in bars])
    panel.set_xlabel("step")
