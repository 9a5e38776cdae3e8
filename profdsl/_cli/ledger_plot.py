"""``profdsl plot DIR --ledger``: the step ledger as stacked bars, one panel per role, one bar per
step: each bucket's mean over the role's ranks (:mod:`profdsl.analysis._ledger`, the numbers of
``profdsl summary --ledger``: traced steps from their traces, the others from the metrics log).
Where the ranks' metrics log lines carry a device split (``ledger_device``: ``Metrics(device_time=True)``
on CUDA), a thinner hatched bar beside each step's stacks its device time per kind and
``outside``, the mean over the ranks with one (:func:`device_bars`). A bucket the files name that
this profdsl does not know is drawn as :data:`UNKNOWN` (so a bar still adds up to its wall time),
and :func:`unknown_note` names them for the command's output. matplotlib is imported by the
caller's figure only."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from profdsl._cli.common import drawn, stack
from profdsl.analysis._fleet import FROM_METRICS, FROM_TRACE, RankLedger
from profdsl.analysis._ledger import FolderLedger
from profdsl.core._kinds import STAGE_KINDS
from profdsl.core._ledger import OUTSIDE, OVERHEAD

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["BUCKETS", "DEVICE_BUCKETS", "UNKNOWN", "device_bars", "ledger_bars", "ledger_figure", "unknown_note"]

#: What the buckets this profdsl does not know (named by a metrics log) are drawn as, together.
UNKNOWN = "unknown"
#: The buckets in the order they are stacked, bottom up.
BUCKETS = (*STAGE_KINDS, UNKNOWN, OVERHEAD, OUTSIDE)
#: A device split's buckets, bottom up (no overhead: profiling's waits are the host's).
DEVICE_BUCKETS = (*STAGE_KINDS, UNKNOWN, OUTSIDE)
#: The most unknown bucket names the command's output lists.
NAMED = 10
#: The wall-time bar's width, alone and beside a device bar (then shifted left of the step's tick
#: by ``WALL_SHIFT``), and the device bar's left edge from the tick, width and hatching.
WALL_WIDTH, WALL_BESIDE, WALL_SHIFT = 0.7, 0.5, 0.13
DEVICE_LEFT, DEVICE_WIDTH, DEVICE_HATCH = 0.15, 0.22, "////"
#: Fixed colours, one per bucket of :data:`BUCKETS` (every bucket drawn), so that a bucket keeps its
#: colour in every plot (``outside`` a light grey).
COLOURS = {
    "generation": "#1f77b4",
    "inference": "#ff7f0e",
    "update": "#2ca02c",
    "weight_sync": "#d62728",
    "reward": "#9467bd",
    "data": "#8c564b",
    "other": "#e377c2",
    UNKNOWN: "#7f7f7f",
    OVERHEAD: "#111111",
    OUTSIDE: "#d9d9d9",
}

Bar = tuple[str, int, str, dict[str, float]]  # role, step, source, ms per bucket


def _steps(found: FolderLedger) -> dict[tuple[str, int], list[RankLedger]]:
    """Per role and step (sorted), its ranks with a ledger (traced, or from the metrics log)."""
    ranks: dict[tuple[str, int], list[RankLedger]] = defaultdict(list)
    for rank in (*found.ranks, *found.metrics):
        if rank.ledger is not None and rank.step is not None:
            ranks[(rank.role, rank.step)].append(rank)
    return dict(sorted(ranks.items()))


def _means(splits: Sequence[Mapping[str, int]], drawn: Sequence[str]) -> dict[str, float]:
    """Each bucket of ``drawn``: its mean over ``splits`` (ns per bucket, :func:`_folded`), in ms."""
    folded = [_folded(split, drawn) for split in splits]
    return {bucket: sum(f.get(bucket, 0) for f in folded) / len(folded) / 1e6 for bucket in drawn}


def ledger_bars(found: FolderLedger) -> list[Bar]:
    """Per role and step: each bucket's mean over the ranks with a ledger (ms), and where they
    came from (``trace``, ``metrics``, or ``trace+metrics``), sorted by role and step."""
    bars: list[Bar] = []
    for (role, step), members in _steps(found).items():
        sources = {r.source for r in members}  # from traces, the metrics log, or both (ranks of each)
        source = "+".join(s for s in (FROM_TRACE, FROM_METRICS) if s in sources)
        bars.append((role, step, source, _means([r.ledger.buckets for r in members if r.ledger is not None], BUCKETS)))
    return bars


def device_bars(found: FolderLedger) -> dict[tuple[str, int], dict[str, float]]:
    """Per role and step: each device bucket's mean over the ranks with a device split (ms);
    steps without one are left out."""
    splits = {key: [r.device for r in members if r.device is not None] for key, members in _steps(found).items()}
    return {key: _means(split, DEVICE_BUCKETS) for key, split in splits.items() if split}


def unknown_note(found: FolderLedger) -> str | None:
    """What the command says when a bar holds buckets this profdsl does not know (None: none
    does): their names, as the files wrote them (the caller escapes them), at most :data:`NAMED`."""
    names: set[str] = set()
    for rank in (*found.ranks, *found.metrics):
        if rank.ledger is not None and rank.step is not None:
            names.update(b for b in rank.ledger.buckets if _unknown(b, BUCKETS))
            names.update(b for b in rank.device or {} if _unknown(b, DEVICE_BUCKETS))
    if not names:
        return None
    listed = ", ".join(repr(n) for n in sorted(names)[:NAMED])
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return f"buckets this profdsl does not know are drawn together as {UNKNOWN!r}: {listed}{more}"


def _unknown(name: str, drawn: Sequence[str]) -> bool:
    """Whether a bucket of the files is one this profdsl does not know (drawn as :data:`UNKNOWN`;
    a bucket the files call ``unknown`` too)."""
    return name == UNKNOWN or name not in drawn


def _folded(buckets: Mapping[str, int], drawn: Sequence[str]) -> dict[str, int]:
    """``buckets`` with every one this profdsl does not know added into :data:`UNKNOWN`."""
    out: dict[str, int] = defaultdict(int)
    for name, ns in buckets.items():
        out[UNKNOWN if _unknown(name, drawn) else name] += ns
    return out


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
    device = device_bars(found)
    stacks = [*(means for *_, means in bars), *device.values()]
    used = [b for b in BUCKETS if any(stack.get(b, 0) > 0 for stack in stacks)]
    for panel, role in zip(panels, roles):
        mine = [bar for bar in bars if bar[0] == role]
        beside = [device.get((role, step)) for _, step, _, _ in mine]
        ticks = list(range(len(mine)))
        shift, width = (WALL_SHIFT, WALL_BESIDE) if any(beside) else (0.0, WALL_WIDTH)  # room for a device bar
        stack(panel, [t - shift for t in ticks], [means for *_, means in mine], used, COLOURS.get, width=width)
        hatched = [(i + DEVICE_LEFT, split) for i, split in enumerate(beside) if split is not None]
        stack(
            panel, [x for x, _ in hatched], [split for _, split in hatched], [b for b in used if b in DEVICE_BUCKETS],
            COLOURS.get, width=DEVICE_WIDTH, align="edge", hatch=DEVICE_HATCH, edgecolor="#555555", linewidth=0.3,
        )  # fmt: skip
        panel.set_xticks(ticks, [f"{step}*" if FROM_TRACE in source else str(step) for _, step, source, _ in mine])
        panel.set_xlabel("step")
        what = "; hatched: the device span of its stages (CUDA)" if any(beside) else ""
        panel.set_title(
            f"{drawn(role)}: where each step's wall time went (mean over its ranks){what}", fontsize=9, loc="left"
        )
        panel.set_ylabel("ms per step")
        panel.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=COLOURS[b]) for b in used]
    labels = list(used)
    if device:
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch=DEVICE_HATCH))
        labels.append("device time (thin bar)")
    figure.suptitle(
        f"{title}: the step ledger (bars add up to the step's wall time; * from traces, else the metrics log)",
        fontsize=10,
        x=0.01,
        y=0.995,
        ha="left",
    )
    top = 1 - 0.9 / figure.get_figheight()
    figure.legend(
        handles, labels, loc="upper left", bbox_to_anchor=(0.01, top + 0.35 / figure.get_figheight()), fontsize=8,
        ncol=max(1, len(labels)), frameon=False,  # none used: every step of 0 ns
    )  # fmt: skip
    figure.tight_layout(rect=(0, 0, 1, top))
    return figure
