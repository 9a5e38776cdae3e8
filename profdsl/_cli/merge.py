"""``profdsl merge DIR -o FILE``: every JSON trace of a folder in one Chrome trace, one process row
per role, replica and rank, on one clock (:mod:`profdsl.analysis.merge`)."""

from __future__ import annotations

import argparse

from profdsl._cli.common import fail, skipped
from profdsl.analysis._catalog import FolderError
from profdsl.analysis._outputs import OutputError
from profdsl.analysis.merge import LEFT_OUT, merge_folder

__all__ = ["HELP", "add_arguments", "merge_folder", "run"]

HELP = "merge a folder's JSON traces into one Chrome trace: one process row per role and rank"

EXAMPLES = """\
examples:
  profdsl merge runs/7/profiles -o merged.json.gz
  profdsl merge runs/7/profiles -o step3.json --steps 3

Open the result in https://ui.perfetto.dev (Open trace file). Rows are named
"ROLE [replicaN] rankN"; all timestamps share the smallest baseTimeNanoseconds.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``DIR``, ``-o/--output`` and ``--steps``."""
    parser.add_argument("folder", metavar="DIR", help="a profdsl save_path (with or without manifest)")
    parser.add_argument(
        "-o", "--output", metavar="FILE", required=True, help="the merged trace; gzipped when it ends with .gz"
    )
    parser.add_argument(
        "--steps", metavar="STEP", type=int, nargs="+", default=None, help="merge only the traces of these steps"
    )


def run(args: argparse.Namespace) -> int:
    """Merge ``args.folder`` into ``args.output``.

    Returns:
        0 when every selected trace was merged, 1 when an input was skipped (each named on
        stderr) or nothing was left to merge, 2 for a missing or empty folder, an output inside
        it, or an output that cannot be written.
    """
    try:
        report = merge_folder(args.folder, args.output, steps=args.steps)
    except (FolderError, OutputError) as exc:
        return fail(str(exc), command="merge")
    except OSError as exc:
        return fail(f"cannot write {args.output}: {exc.strerror or exc}", command="merge")
    failed = skipped("merge", report.errors)
    if report.output is None:
        which = f" of steps {' '.join(map(str, args.steps))}" if args.steps else ""
        return fail(f"{args.folder}: no readable JSON trace{which} to merge", 1, "merge")
    for row in report.rows:
        print(f"pid {row.pid:<3} {row.label}: {row.traces} trace(s), {row.events} events")
    if report.skipped:
        what = ", ".join(f"{count} {LEFT_OUT[kind] if count > 1 else kind}" for kind, count in report.left_out)
        print(f"skipped {report.skipped} artifact{'s' if report.skipped > 1 else ''}: {what}")
    print(f"wrote {report.output}")
    return failed
