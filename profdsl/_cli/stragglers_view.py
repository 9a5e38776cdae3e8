"""``profdsl summary DIR --stragglers``: at the collectives of each traced step, which rank
arrived last and how long it made the others wait (:mod:`profdsl.analysis._collectives`)."""

from __future__ import annotations

import argparse
import json

from profdsl._cli.common import skipped, table
from profdsl.analysis._catalog import Artifact
from profdsl.analysis._collectives import Blame, blame, load_matches
from profdsl.core._log import printable
from profdsl.core._units import ms_text

__all__ = ["NOTHING_TRACED", "run", "stragglers_text"]

TITLE = (
    "who made the others wait at collectives (traced steps): at each collective the rank with the "
    "shortest wait arrived last, late by the others' median wait less its own; late ms: each rank's "
    "sum over the stage's collectives; the culprit exceeds the median rank by at least {late:g} ms"
)
NOTHING_TRACED = (
    "no collective found in the readable traces (profdsl reads gloo's CPU events, gloo:<op>, and NCCL's kernels). "
    "Where nothing is traced, wall-time alerts (the straggler watch, the slowest rank of `profdsl "
    "summary`) cannot tell the culprit from its victims: a collective makes every rank wait for "
    "the last, so their stage times come out equal"
)


def _line(item: Blame) -> str:
    late = item.late_us[item.culprit] if item.culprit is not None else 0.0
    return printable(
        f"step {item.step}, {item.role} {item.stage}: rank {item.culprit} arrived last at {item.culprit_last_at} "
        f"of {item.collectives} collective(s) and made the others wait {ms_text(late / 1000)} ms, "
        f"{ms_text(item.excess_us / 1000)} ms more than the median rank"
    )


def stragglers_text(items: list[Blame], notes: list[str], late_ms: float) -> str:
    """The text view: one row per role, step and stage, then a line per culprit."""
    if not items:
        return "\n".join([NOTHING_TRACED, *map(printable, notes)])
    rows = [
        [
            b.role,
            b.step,
            b.stage,
            b.collectives,
            len(b.late_us),
            "-" if b.culprit is None else f"rank {b.culprit}",
            ms_text(b.excess_us / 1000),
            "  ".join(f"{rank}:{ms_text(us / 1000)}" for rank, us in sorted(b.late_us.items())),
        ]
        for b in items
    ]
    headers = ["role", "step", "stage", "collectives", "ranks", "culprit", "excess ms", "late ms by rank"]
    culprits = [_line(b) for b in items if b.culprit is not None]
    return "\n".join(
        [
            TITLE.format(late=late_ms),
            table(headers, rows),
            *(culprits or ["no rank stands out"]),
            *map(printable, notes),
        ]
    )


def run(args: argparse.Namespace, folder: str, artifacts: list[Artifact], bad: list[str]) -> int:
    """Print the culprits of ``folder``'s traced steps (text, or ``--json``), then name what it
    skipped; returns the exit code."""
    matches, notes = load_matches(folder, artifacts, bad)
    items = blame(matches, args.late_ms * 1000)
    if args.json:
        print(json.dumps({"stages": [b.as_dict(args.late_ms) for b in items], "notes": notes}, indent=1))
    else:
        print(stragglers_text(items, notes, args.late_ms))
    return skipped("summary", bad)
