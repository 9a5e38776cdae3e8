"""``profdsl export --hta DIR --step N --stage NAME -o OUT``: a folder Holistic Trace Analysis
reads, one trace per rank, each mini-batch of the stage an iteration (``ProfilerStep#K``).

What is written is :mod:`profdsl.analysis._hta`'s; this module parses and prints.
"""

from __future__ import annotations

import argparse

from profdsl._cli.common import fail, printable, skipped
from profdsl.analysis._catalog import FolderError
from profdsl.analysis._hta import HtaError, RankExport, export_hta
from profdsl.analysis._outputs import OutputError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "export one stage of one step for another tool: --hta writes a folder Holistic Trace Analysis reads"

EXAMPLES = """\
examples:
  profdsl export --hta profiles --step 3 --stage update_actor -o hta/step3
  profdsl export --hta profiles --step 3 --stage update_actor --role actor -o hta/step3 --force

One trace per rank is written to OUT (rank0.pt.trace.json.gz, ...), each mini-batch of the stage
marked ProfilerStep#K (K: its index). Then, in Python (the command prints this call):
  from hta.trace_analysis import TraceAnalysis      # pip install profdsl[hta]
  analyzer = TraceAnalysis(trace_dir="hta/step3", include_last_profiler_step=True)
  analyzer.t.get_iterations()                       # the mini-batches (HTA's default leaves the
                                                    # last one out, as for torch's ProfilerStep)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--hta DIR``, ``--step``, ``--stage``, ``--role``, ``-o/--output`` and ``--force``."""
    parser.add_argument(
        "--hta",
        metavar="DIR",
        required=True,
        dest="folder",
        help="the profile folder (a profdsl save_path) to export for HTA",
    )
    parser.add_argument("--step", type=int, required=True, metavar="N", help="the step to export")
    parser.add_argument(
        "--stage", required=True, metavar="NAME", help="the stage whose mini-batches become HTA's iterations"
    )
    parser.add_argument(
        "--role", metavar="ROLE", default=None, help="the role, when the stage ran in several roles at that step"
    )
    parser.add_argument(
        "-o", "--output", metavar="OUT", required=True, help="the folder to write (new or empty; one trace per rank)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an earlier export in OUT (nothing else is ever replaced)"
    )


def run(args: argparse.Namespace) -> int:
    """Export ``args.folder`` into ``args.output``.

    Returns:
        0 when every trace of the stage was exported, 1 when an input was skipped (each named on
        stderr) or nothing was left to export, 2 for usage errors: a missing or empty folder, a
        step, stage or role that is not there (the message lists what is), an output folder that
        is not empty (without ``--force``), one that is, holds or lies in the input folder, or
        one that cannot be written.
    """
    try:
        report = export_hta(
            args.folder, args.output, step=args.step, stage=args.stage, role=args.role, force=args.force
        )
    except (FolderError, HtaError, OutputError) as exc:
        return fail(str(exc), command="export")
    except OSError as exc:
        return fail(f"cannot write {args.output}: {exc.strerror or exc}", command="export")
    failed = skipped("export", report.errors)
    if not report.ranks:
        return fail(
            f"{args.folder}: no readable trace of stage {args.stage!r} at step {args.step}: nothing written",
            1,
            "export",
        )
    for rank in report.ranks:
        print(printable(_line(rank, args.stage)))
    # HTA's default leaves the last iteration out: the call keeps it (tests/test_cmd_export.py)
    call = f"TraceAnalysis(trace_dir={str(report.output)!r}, include_last_profiler_step=True)"
    print(printable(f"wrote {report.output} ({len(report.ranks)} ranks): {call}"))
    return failed


def _line(rank: RankExport, stage: str) -> str:
    what = "mini-batches" if rank.unit == "mini_batch" else "entries"
    marks = " ".join(map(str, rank.iterations)) or "none"
    return (
        f"rank {rank.rank}: {rank.traces} trace(s), {rank.events} events, iterations {marks} "
        f"({what} of {stage}) -> {rank.path}"
    )
