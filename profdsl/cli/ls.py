"""``profdsl ls DIR``: one row per artifact."""

from __future__ import annotations

import argparse
import json

from profdsl.analysis.catalog import FolderError, catalog
from profdsl.cli.common import fail, skipped, table

HELP = "list the artifacts of a profiles folder (from its manifest, else from file names)"
EXAMPLES = """examples:
  profdsl ls profiles
  profdsl ls profiles --json | jq '.[] | select(.status != "ok")'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR`` and ``--json``."""
    parser.epilog, parser.formatter_class = EXAMPLES, argparse.RawDescriptionHelpFormatter
    parser.add_argument("dir", help="a save_path folder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _size(size: int | None) -> str | None:
    if size is None:
        return None
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return None


def run(args: argparse.Namespace) -> int:
    """List; 1 when a manifest line was skipped (named on stderr), 2 for a missing or empty folder.

    The table escapes control characters and, unless it goes to a terminal, prints whole values.
    """
    try:
        found = catalog(args.dir)
    except FolderError as exc:
        return fail(str(exc))
    code = skipped("ls", found.problems)
    rows = found.artifacts
    if args.json:
        print(json.dumps([{"kind": a.kind, "path": a.path, "role": a.role, "stage": a.stage,
                           "step": a.step, "rank": a.rank, "replica": a.replica,
                           "window": list(a.window) if a.window else None, "bytes": a.bytes,
                           "status": a.status} for a in rows], indent=1))
        return code
    headers = ("kind", "role", "stage", "step", "rank", "replica", "window", "size", "status", "path")
    print(table(headers, [(a.kind, a.role, a.stage, a.step, a.rank, a.replica,
                           f"{a.window[0]}-{a.window[1]}" if a.window else None, _size(a.bytes),
                           a.status, a.path or a.record.get("source") or a.record.get("error"))
                          for a in rows]))
    return code
