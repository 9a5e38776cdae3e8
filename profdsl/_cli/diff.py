"""``profdsl diff RUN_A RUN_B``: what changed between two runs, per role and stage."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import attrs

from profdsl._cli.common import fail, late_ms_refused, printable, say, skipped, table
from profdsl.analysis._catalog import FolderError
from profdsl.analysis._diff import FROM_LOGS, Comparison, Row, describe_noise, load_samples
from profdsl.analysis._outputs import OutputError, check_output
from profdsl.analysis.culprits import DEFAULT_LATE_MS, NO_TRACE, culprit_lines, run_culprits
from profdsl.core._units import ms_text

HELP = "compare two runs per role and stage: time per step, change, ratio, spread, within the noise or not"
EXAMPLES = """examples:
  profdsl diff runs/before runs/after
  profdsl diff runs/before runs/after --json | jq '.rows[] | select(.verdict == "slower")'
  profdsl diff runs/before runs/after --plot change.png
  profdsl diff runs/before runs/after --source traces

Each run's samples are a stage's seconds in each step and rank: from the metrics logs when both
runs have one (Metrics(log=True): every step), else from the traces (profiled steps only). The
noise is measured from the runs themselves; the method and the sample counts are printed.
"""

HEADERS = (
    "role",
    "stage",
    "A ms",
    "B ms",
    "change ms",
    "ratio",
    "self A/B ms",
    "entries A/B",
    "spread A/B ms",
    "noise ms (n A/B)",
    "verdict",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``RUN_A RUN_B`` and the output forms."""
    parser.add_argument("run_a", metavar="RUN_A", help="the first run's save_path (the baseline)")
    parser.add_argument("run_b", metavar="RUN_B", help="the second run's save_path")
    parser.add_argument(
        "--source",
        choices=("auto", "log", "traces"),
        default="auto",
        help="where the samples come from (auto: the metrics logs when both runs have one)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the largest changes, with their noise")
    parser.add_argument("--top", type=int, default=20, help="how many rows the plot shows (default 20)")
    parser.add_argument(
        "--late-ms",
        type=float,
        default=DEFAULT_LATE_MS,
        help="where both runs are traced, name each run's culprits at collectives: a rank whose lateness "
        f"exceeds the median rank's by this much (default {DEFAULT_LATE_MS:g}; docs/ledger.md)",
    )


def _ms(seconds: float | None) -> str:
    """Seconds as the table prints them: milliseconds, ``-`` where a run has none."""
    return "-" if seconds is None else ms_text(seconds * 1e3)


def _entries(count: float | None) -> str:
    """A mean count of entries per step and rank (one decimal), ``-`` where a run has none."""
    return "-" if count is None else f"{count:.1f}"


def _pair(a: float | None, b: float | None, text: Callable[[float | None], str] = _ms) -> str:
    return f"{text(a)}/{text(b)}"


def _cells(row: Row) -> list[object]:
    a, b = row.a, row.b
    return [
        row.role,
        row.stage,
        _ms(a.mean_s if a else None),
        _ms(b.mean_s if b else None),
        ms_text(row.change_s * 1e3, signed=True),
        "-" if row.ratio is None else f"{row.ratio:.2f}x",
        _pair(a.self_s if a else None, b.self_s if b else None),
        _pair(a.count if a else None, b.count if b else None, _entries),
        _pair(a.spread_s if a else None, b.spread_s if b else None),
        describe_noise(row),
        row.verdict,
    ]


def _to_traces(comparison: Comparison) -> str:
    """Where the samples came from the metrics logs, the way to the traces instead."""
    return "; --source traces compares their traces" if comparison.source == FROM_LOGS else ""


def _summary(comparison: Comparison) -> str:
    changed = [r for r in comparison.rows if r.verdict in ("slower", "faster")]
    return (
        f"A = {comparison.run_a}, B = {comparison.run_b}; samples from {comparison.source}, per step and "
        f"rank (A ms, B ms: the mean per step and rank).\nnoise: {comparison.method}; a change within it is "
        f"'unchanged'. {len(changed)} of {len(comparison.rows)} stage(s) changed beyond it."
    )


def plot(comparison: Comparison, output: str, limit: int) -> None:
    """A horizontal bar per (role, stage): its change (ms per step and rank), the noise as an
    error bar, the largest changes first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = comparison.rows[: max(1, limit)]  # a comparison's rows: the largest change first
    labels = [f"{r.role}: {r.stage}" for r in rows]
    changes = [r.change_s * 1e3 for r in rows]
    noise = [(r.noise_s or 0.0) * 1e3 for r in rows]
    colors = ["#c0392b" if r.verdict == "slower" else "#27ae60" if r.verdict == "faster" else "#95a5a6" for r in rows]
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.38 * len(rows)))
    positions = list(range(len(rows)))[::-1]
    axes.barh(positions, changes, xerr=noise, color=colors, ecolor="#333333", capsize=3)
    axes.set_yticks(positions, labels)
    axes.axvline(0, color="#333333", linewidth=0.8)
    axes.set_xlabel("change in ms per step and rank (B - A); bars: the noise")
    axes.set_title("profdsl diff: red slower, green faster, grey within the noise", fontsize=10)
    figure.tight_layout()
    figure.savefig(output, dpi=150)
    plt.close(figure)


def _culprits(args: argparse.Namespace) -> dict[str, Any] | None:
    """Each run's culprits at collectives, where both runs are traced (None otherwise): per run
    its blamed stages (``summary --stragglers --json``'s) and why a run has none."""
    found = {run: run_culprits(folder, args.late_ms * 1000) for run, folder in (("a", args.run_a), ("b", args.run_b))}
    if any(why == NO_TRACE for _, why in found.values()):
        return None
    return {
        run: {"blamed": [b.as_dict(args.late_ms) for b in items or []], "lines": culprit_lines(items or []), "why": why}
        for run, (items, why) in found.items()
    }


def _culprit_text(culprits: dict[str, Any] | None, late_ms: float) -> list[str]:
    if culprits is None:
        return []
    lines = ["", f"culprits at collectives (both runs traced; a rank late by {late_ms:g} ms over the median rank):"]
    for run in ("a", "b"):
        found = culprits[run]
        said = found["lines"] or [found["why"] or "no rank stands out"]
        lines += [f"  {run.upper()}: {line}" for line in said]
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the diff; 0 when done (changes are no error), 1 when input was skipped, 2 for usage
    errors."""
    if (refused := late_ms_refused(args.late_ms)) is not None:
        return fail(f"diff: {refused}")
    if args.plot is not None:
        try:
            for folder in (args.run_a, args.run_b):
                check_output(args.plot, folder)
        except OutputError as exc:
            return fail(f"diff: {exc}")
    try:
        comparison = load_samples(args.run_a, args.run_b, source=args.source)
    except (FolderError, ValueError) as exc:
        return fail(f"diff: {exc}")
    code = skipped("diff", comparison.skipped)
    if not comparison.rows:
        return fail(f"diff: neither run holds stage times in {comparison.source}{_to_traces(comparison)}")
    for run, other, folder, sides in (
        ("A", "B", args.run_a, [r.a for r in comparison.rows]),
        ("B", "A", args.run_b, [r.b for r in comparison.rows]),
    ):
        if not any(sides):  # every row "only in" the other run: never left for stages it did not run
            where = f"{run} ({folder}) holds no stage time in {comparison.source}"
            say(f"{where}: every stage shows as only in {other}{_to_traces(comparison)}", "diff")
    culprits = _culprits(args)
    if args.json:
        json.dump({**attrs.asdict(comparison), "culprits": culprits}, sys.stdout, indent=1)
        print()
    else:
        for line in _summary(comparison).splitlines():  # printable() would escape the newline
            print(printable(line))
        print()
        print(table(HEADERS, [_cells(row) for row in comparison.rows]))
        for line in _culprit_text(culprits, args.late_ms):
            print(printable(line))
    if args.plot is not None:
        try:
            plot(comparison, args.plot, args.top)
        except ImportError:
            return fail("diff: --plot needs matplotlib: pip install profdsl[plot]")
        say(f"plot written to {args.plot}", "diff")
    return code
