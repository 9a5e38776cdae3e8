"""``profdsl ls DIR``: one row per artifact."""

from __future__ import annotations

import argparse
import json
from typing import Any

from profdsl._cli.common import fail, say, skipped, table
from profdsl.analysis._catalog import Artifact, FolderError, catalog, coordinates
from profdsl.core._units import size_text
from profdsl.records.fields import SCHEMA_VERSION, VERSION_KEY, to_json
from profdsl.records.manifest import RECORD_CLASSES

HELP = "list the artifacts of a profiles folder (from its manifest, else from file names)"
EXAMPLES = """examples:
  profdsl ls profiles
  profdsl ls profiles --json | jq '.[] | select(.status != "ok")'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR`` and ``--json``."""
    parser.add_argument("dir", help="a save_path folder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _size(size: int | None) -> str | None:
    return None if size is None else size_text(size)


def run(args: argparse.Namespace) -> int:
    """List; 1 when a manifest line was skipped (named on stderr), 2 for a missing or empty folder.

    The table escapes control characters and, unless it goes to a terminal, prints whole values.
    ``--json`` prints each record as the manifest holds it (fields a newer profdsl wrote
    included); the table says on stderr which fields it does not show.
    """
    try:
        found = catalog(args.dir)
    except FolderError as exc:
        return fail(str(exc))
    code = skipped("ls", found.problems)
    rows = found.artifacts
    if args.json:
        print(json.dumps([_row(a) for a in rows], indent=1))
        return code
    headers = ("kind", "role", "stage", "step", "rank", "replica", "window", "size", "status", "path")
    cells = [
        (a.kind, a.role, a.stage, a.step, a.rank, a.replica, _window(a), _size(a.bytes), a.status, where)
        for a in rows
        for where in [a.record.where if a.record else a.path]
    ]
    print(table(headers, cells))
    unknown = unknown_fields(rows)
    if unknown:
        say(
            f"note: records carry fields this profdsl (schema {SCHEMA_VERSION}) does not know, kept as "
            f"written (ls --json shows them): {unknown}",
            "ls",
        )
    return code


def _window(artifact: Artifact) -> str | None:
    return f"{artifact.window[0]}-{artifact.window[1]}" if artifact.window else None


def _row(artifact: Artifact) -> dict[str, Any]:
    """The JSON row of an artifact: its record whole, or what its file name says."""
    if artifact.record is not None:
        return to_json(artifact.record)
    said = {**coordinates(artifact), **dict(artifact.parallel)}
    named = RECORD_CLASSES[artifact.kind](path=artifact.path, bytes=artifact.bytes, status=artifact.status, **said)
    return {key: value for key, value in to_json(named).items() if key != VERSION_KEY}


def unknown_fields(rows: list[Artifact]) -> str:
    """The fields records carry that this schema does not know, and the versions that wrote them
    (``""`` when none)."""
    seen: dict[str, set[int]] = {}
    for artifact in rows:
        record = artifact.record
        for key in record.unknown if record is not None else ():
            seen.setdefault(key, set()).add(record.schema)  # type: ignore[union-attr]
    return ", ".join(f"{key} (schema {', '.join(map(str, sorted(v)))})" for key, v in sorted(seen.items()))
