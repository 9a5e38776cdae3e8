"""``profdsl plot``: a PNG of what a profile folder holds, for people to look at.

Two views: stacked bars of time per stage for each (role, rank, step) (the default), and with
``--timeline`` a Gantt chart with one row per process, a bar per stage region and each step
named. Both draw stages down to ``--depth`` levels of nesting (by default the outermost, or two
levels for a role whose every step is one stage with stages inside). The numbers are the
stage-time model's (:mod:`profdsl.analysis._model`), the same as ``profdsl summary``'s;
matplotlib is imported only when the command runs. With ``--ledger``, the step ledger instead
(:mod:`profdsl._cli.ledger_plot`).
"""

from __future__ import annotations

import argparse
import datetime
import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from profdsl._cli.common import drawn, fail, listed, load_read, say, stack
from profdsl.analysis._catalog import Catalog, FolderError, catalog_or_logs, number
from profdsl.analysis._load import load_model
from profdsl.analysis._model import Span, StageModel
from profdsl.analysis._outputs import OutputError, check_output
from profdsl.config._parallel import DIMS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["add_arguments", "run"]

HELP = "plot per-stage time per rank and step (or a timeline) to a PNG"

EXAMPLES = """examples:
  profdsl plot profiles -o stages.png             time per stage, one bar per rank and step
  profdsl plot profiles -o timeline.png --timeline   when each stage ran, one row per process
  profdsl plot profiles -o stages.png --dpi 200
  profdsl plot profiles -o stages.png --depth 3     stages nested three deep, each parent's self time
  profdsl plot profiles -o stages.png --by pp,tp    ranks grouped by pipeline, then tensor coordinate
  profdsl plot profiles -o ledger.png --ledger      every step's wall time by kind of work, per role

for numbers rather than pictures, use: profdsl summary profiles --json
"""

BarKey = tuple[str, int, int]
"""(role, rank, step) of one bar; -1 stands for an unknown number."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``plot`` command's arguments."""
    parser.add_argument("folder", metavar="DIR", help="a profile folder (a profdsl save_path)")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE.png",
        help="the image to write (the format follows the extension)",
    )
    parser.add_argument(
        "--timeline", action="store_true", help="draw when each stage ran (one row per process) instead of stacked bars"
    )
    parser.add_argument(
        "--ledger",
        action="store_true",
        help="draw the step ledger: per role, one bar per step stacked by kind of work, overhead and time "
        "outside any stage (traced steps from their traces, the others from the metrics log; docs/ledger.md)",
    )
    parser.add_argument("--dpi", type=_positive_int, default=150, help="image resolution (default 150)")
    parser.add_argument(
        "--depth",
        type=_positive_int,
        default=None,
        metavar="N",
        help="draw stages down to N levels of nesting (1: outermost only; a stage with nested "
        "ones drawn as them and its own self time). Default: 2 for a role whose every step has "
        "one outermost stage with stages inside it, else 1",
    )
    parser.add_argument(
        "--by",
        type=_coordinates,
        default=(),
        metavar="tp,pp,...",
        help=f"bars: group and label the ranks by these parallel coordinates (from {','.join(DIMS)}), e.g. --by pp,tp",
    )


def _coordinates(text: str) -> tuple[str, ...]:
    keys = listed(text, DIMS)
    if keys is None:
        raise argparse.ArgumentTypeError(f"takes parallel coordinates from {','.join(DIMS)}, got {text!r}")
    return keys


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    """Draw the folder ``args.folder`` into ``args.output``.

    Returns:
        0 when every trace was drawn, 1 when a manifest line, a trace or a metrics log line was
        skipped (each named on stderr, a few then a count; the rest is drawn) or nothing could be
        drawn, 2 on usage errors (no folder, no matplotlib, an output inside the input folder,
        unwritable output).
    """
    try:
        check_output(args.output, args.folder)
        found = catalog_or_logs(args.folder, logs=args.ledger)
    except (FolderError, OutputError) as exc:
        return fail(str(exc), command="plot")
    try:
        import matplotlib
    except ImportError:
        return fail("plotting needs matplotlib: pip install profdsl[plot]", command="plot")
    matplotlib.use("Agg")
    if args.ledger:
        return _ledger(args, found)
    model, failed = load_read("plot", args.folder, found.artifacts, list(found.problems), load_model)
    if not model.nodes:
        return fail(f"{args.folder}: no stage time found in any readable trace", 1, "plot")
    figure = build_figure(model, args)
    return _save(figure, args) or failed


def _ledger(args: argparse.Namespace, found: Catalog) -> int:
    """``--ledger``: the step ledger's bars (:mod:`profdsl._cli.ledger_plot`)."""
    from profdsl._cli.ledger_plot import ledger_figure, unknown_note
    from profdsl.analysis._ledger import load_ledger

    if args.timeline:
        return fail("--ledger draws bars; it does not take --timeline", command="plot")
    ledger, failed = load_read("plot", args.folder, found.artifacts, list(found.problems), load_ledger)
    figure = ledger_figure(ledger, drawn(Path(args.folder).resolve().name))
    if figure is None:
        return fail(f"{args.folder}: no step has a ledger (no trace splits one, no metrics log has one)", 1, "plot")
    if (note := unknown_note(ledger)) is not None:
        say(note, "plot")
    return _save(figure, args) or failed


def _save(figure: Figure, args: argparse.Namespace) -> int:
    """Write ``figure`` to ``args.output``: 0, or 2 when it cannot be written (said)."""
    try:
        figure.savefig(args.output, dpi=args.dpi, bbox_inches="tight")
    except (OSError, ValueError) as exc:
        reason = next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__
        return fail(f"cannot write {args.output}: {reason}", command="plot")
    print(args.output)
    return 0


def build_figure(model: StageModel, args: argparse.Namespace) -> Figure:
    """The figure ``args`` (the command's parsed arguments) asks for."""
    title = drawn(Path(args.folder).resolve().name)
    if args.timeline:
        return _timeline_figure(model, title, args.depth)
    return _bars_figure(model, title, args.by, args.depth)


# --- drawing ----------------------------------------------------------------------------------


def _colours(stages: Iterable[str]) -> dict[str, Any]:
    """One colour per stage, assigned in name order so a stage keeps its colour in both views."""
    import matplotlib

    names = sorted(set(stages))
    if len(names) <= 20:
        palette = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
        return {name: palette(i) for i, name in enumerate(names)}
    palette = matplotlib.colormaps["turbo"]
    return {name: palette(i / (len(names) - 1)) for i, name in enumerate(names)}


def _legend(stage: str, interleaved: set[str]) -> str:
    """A stage's legend entry; one whose entries overlapped on a thread says so (its bar adds
    the overlap: the stage model's ``interleaved``)."""
    return drawn(stage) + (" (interleaved: overlapping entries)" if stage in interleaved else "")


def _bar_label(key: BarKey, with_role: bool, group: tuple[tuple[str, int], ...]) -> str:
    role, rank, step = key
    parts = [drawn(role)] if with_role else []
    parts += [f"{dim}{value}" if value >= 0 else f"{dim}?" for dim, value in group]
    parts.append(f"r{rank}" if rank >= 0 else "r?")
    parts.append(f"s{step}" if step >= 0 else "s?")
    return " ".join(parts)


#: The segment of a stage's own time (outside its nested stages) when the bars go deeper.
SELF = "{} (self)"


def role_depths(model: StageModel, depth: int | None) -> dict[str, int]:
    """How deep each role is drawn: ``depth``, or when None, 2 for a role whose every step on
    every rank has one outermost stage and some of them have stages inside (a trainer's single
    step stage shows what ran in it), else 1."""
    roles = {role for role, _, _ in model.keys()}
    if depth is not None:
        return dict.fromkeys(roles, depth)
    single: dict[str, bool] = dict.fromkeys(roles, True)
    inner: dict[str, bool] = dict.fromkeys(roles, False)
    for key in model.keys():
        paths = model.paths(key)
        single[key[0]] = single[key[0]] and sum(len(p) == 1 for p in paths) == 1
        inner[key[0]] = inner[key[0]] or any(len(p) > 1 for p in paths)
    return {role: 2 if single[role] and inner[role] else 1 for role in roles}


def _segments(paths: dict[tuple[str, ...], tuple[float, float]], depth: int) -> dict[str, float]:
    """Milliseconds per segment of one bar drawn ``depth`` deep: each stage at that depth, and
    above it each stage's self time where it has nested stages (its total where it has none),
    so the segments add up to the outermost stages."""
    parents = {path[:-1] for path in paths}
    totals: dict[str, float] = defaultdict(float)
    for path, (total_us, self_us) in paths.items():
        name = "/".join(path)
        if len(path) == depth or (len(path) < depth and path not in parents):
            totals[name] += total_us / 1000
        elif len(path) < depth:
            totals[SELF.format(name)] += max(self_us, 0.0) / 1000
    return dict(totals)


def bar_totals(model: StageModel, depth: int | None = 1) -> dict[BarKey, dict[str, float]]:
    """Milliseconds per segment for each bar (a role's step on a rank): with ``depth`` 1 one per
    outermost stage, the model's totals, so each bar is that role's step time and each segment a
    stage ``summary`` lists; deeper (None: :func:`role_depths`' choice), see :func:`_segments`."""
    depths = role_depths(model, depth)
    return {
        (role, number(rank), number(step)): _segments(model.paths((role, step, rank)), depths[role])
        for role, step, rank in model.keys()
    }


def timeline_rows(model: StageModel, depth: int | None = 1) -> dict[str, list[Span]]:
    """The regions of every trace down to ``depth`` (1: the outermost; None: :func:`role_depths`'
    choice), one row per process label (role, replica, rank), in wall-clock microseconds."""
    depths = role_depths(model, depth)
    deepest = max(depths.values(), default=1)
    rows: dict[str, list[Span]] = defaultdict(list)
    for artifact, spans in model.regions(deepest):
        limit = depths.get(artifact.role or "unknown", 1)
        rows[artifact.label].extend(span for span in spans if span.depth < limit)
    return rows


def step_extents(model: StageModel) -> dict[int, tuple[float, float]]:
    """Each profiled step's first start and last end (wall-clock µs) over every outermost region."""
    extents: dict[int, tuple[float, float]] = {}
    for artifact, spans in model.spans():
        if artifact.step is None or not spans:
            continue
        start, end = min(s.start_us for s in spans), max(s.end_us for s in spans)
        known = extents.get(artifact.step, (start, end))
        extents[artifact.step] = (min(known[0], start), max(known[1], end))
    return extents


def _bar_positions(keys: Sequence[BarKey], groups: Sequence[object]) -> list[float]:
    """x of each bar (keys ordered by role, group, then step): gaps set roles, coordinate groups
    and steps apart."""
    xs: list[float] = []
    x = 0.0
    for i, key in enumerate(keys):
        if i and key[0] != keys[i - 1][0]:
            x += 1.0
        elif i and groups[i] != groups[i - 1]:
            x += 0.7
        elif i and key[2] != keys[i - 1][2]:
            x += 0.4
        xs.append(x)
        x += 1.0
    return xs


def bar_groups(model: StageModel, by: Sequence[str]) -> dict[BarKey, tuple[tuple[str, int], ...]]:
    """Each bar's parallel coordinates named in ``by`` (-1: its traces do not carry one)."""
    return {
        (role, number(rank), number(step)): tuple((dim, model.parallel(role, step, rank).get(dim, -1)) for dim in by)
        for role, step, rank in model.keys()
    }


def _bars_figure(model: StageModel, title: str, by: Sequence[str], depth: int | None) -> Figure:
    """Stacked bars: one per (role, rank, step), a segment per stage down to ``depth``
    (:func:`bar_totals`), the biggest stage lowest; with ``by``, the ranks grouped by those
    parallel coordinates."""
    from matplotlib.figure import Figure

    bars = bar_totals(model, depth)
    group = bar_groups(model, by)
    keys = sorted(bars, key=lambda k: (k[0], group[k], k[2], k[1]))
    stages = {stage for segments in bars.values() for stage in segments}
    stage_sum = {stage: sum(segments.get(stage, 0.0) for segments in bars.values()) for stage in stages}
    order = sorted(stage_sum, key=lambda s: (-stage_sum[s], s))
    colours = _colours(order)
    xs = _bar_positions(keys, [group[k] for k in keys])  # without --by every group is ()
    figure = Figure(figsize=(min(max(3 + 0.45 * (xs[-1] + 1), 7.0), 30.0), 5.5))
    axes = figure.add_subplot()
    label = functools.partial(_legend, interleaved=model.interleaved())
    bottoms = stack(
        axes, xs, [bars[k] for k in keys], order, colours.get, label=label, width=0.8, edgecolor="white", linewidth=0.5
    )
    if len(keys) <= 40:
        for x, total in zip(xs, bottoms):
            axes.annotate(
                f"{total:.3g}",
                (x, total),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color="0.3",
            )
    with_role = len({key[0] for key in keys}) > 1
    tilt = len(keys) > 8 or with_role or bool(by)
    axes.set_xticks(
        xs,
        [_bar_label(key, with_role, group[key]) for key in keys],
        rotation=45 if tilt else 0,
        ha="right" if tilt else "center",
        fontsize=8,
    )
    axes.set_xlim(-0.7, xs[-1] + 0.7)
    axes.set_ylim(0, max(bottoms) * 1.1)
    axes.set_ylabel("time in stage (ms)")
    axes.set_xlabel("rank (r) and step (s)" if not with_role else "role, rank (r) and step (s)")
    axes.set_title(f"{title}: time per stage", loc="left")
    handles, labels = axes.get_legend_handles_labels()
    _frame(axes, "y", handles[::-1], labels[::-1])
    return figure


def _timeline_figure(model: StageModel, title: str, depth: int | None) -> Figure:
    """A Gantt chart: a row per process label, a bar per stage region down to ``depth`` (a
    nested region thinner, drawn over its parent), in ms; each profiled step named above the
    time it spans."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = timeline_rows(model, depth)
    order_of = {a.label: (a.role or "unknown", number(a.replica), number(a.rank)) for a, _ in model.spans()}
    labels = sorted((label for label in rows if rows[label]), key=lambda label: order_of[label])
    origin = min(span.start_us for label in labels for span in rows[label])
    colours = _colours(span.stage for label in labels for span in rows[label])
    figure = Figure(figsize=(12, min(max(1.5 + 0.45 * len(labels), 3.0), 30)))
    axes = figure.add_subplot()
    for y, label in enumerate(labels):
        per_stage: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        for span in rows[label]:
            per_stage[(span.depth, span.stage)].append(
                ((span.start_us - origin) / 1000, (span.end_us - span.start_us) / 1000)
            )
        for (level, stage), spans in sorted(per_stage.items()):
            # a thin edge in the bar's own colour keeps very short regions visible; a nested
            # region is thinner, so its parent shows around it
            height = 0.7 * 0.6**level
            axes.broken_barh(
                spans, (y - height / 2, height), facecolors=colours[stage], edgecolors=colours[stage], linewidth=0.6
            )
    axes.set_yticks(range(len(labels)), [drawn(label) for label in labels], fontsize=8)
    axes.set_ylim(len(labels) - 0.5, -0.5)
    last = max(span.end_us for label in labels for span in rows[label])
    axes.set_xlim(left=-0.005 * (last - origin) / 1000)  # a region at 0 stays clear of the axis line
    axes.set_xlabel(_time_axis_label(origin))
    _mark_steps(axes, step_extents(model), origin)
    axes.set_title(f"{title}: when each stage ran", loc="left", pad=16)
    tangled = model.interleaved()
    _frame(axes, "x", [Patch(color=colour) for colour in colours.values()], [_legend(s, tangled) for s in colours])
    return figure


def _mark_steps(axes: Axes, extents: dict[int, tuple[float, float]], origin_us: float) -> None:
    """Each step's time shaded (two tones, every other step) and named above the plot, a dotted
    line where it begins and where it ends: the time between two profiled steps (unprofiled
    steps) is left blank, never drawn as the earlier step's (tests/test_cmd_plot.py)."""
    for i, (step, (start, end)) in enumerate(sorted(extents.items(), key=lambda item: item[1])):
        left, right = (start - origin_us) / 1000, (end - origin_us) / 1000
        axes.axvspan(left, right, color="0.5", alpha=0.08 if i % 2 == 0 else 0.16, linewidth=0)
        for x in (left, right):
            axes.axvline(x, color="0.4", linestyle=":", linewidth=0.8)
        axes.text(
            (left + right) / 2,
            1.0,
            f"step {step}",
            transform=axes.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
            color="0.25",
        )


def _time_axis_label(origin_us: float) -> str:
    """The x label, with the wall-clock time of the first region when it looks like one."""
    seconds = origin_us / 1e6
    if seconds < 946684800:  # before 2000: no baseTimeNanoseconds, so not a wall clock
        return "time since the first stage region (ms)"
    when = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return f"time since the first stage region (ms), which began {when:%Y-%m-%d %H:%M:%S} UTC"


def _frame(axes: Axes, grid: Literal["x", "y"], handles: Sequence[Any], labels: Sequence[str]) -> None:
    """A light grid along ``grid``, no top or right spine, and the stage legend right of the plot."""
    axes.grid(axis=grid, alpha=0.3)
    axes.set_axisbelow(True)
    axes.spines[["top", "right"]].set_visible(False)
    axes.legend(handles, labels, title="stage", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
