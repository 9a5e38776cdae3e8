"""``profdsl summary DIR``: time per stage, from profdsl's own regions in the traces; and what
profiling itself cost, from the manifest's trace records (``--cost``)."""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections import defaultdict
from typing import Any

from profdsl.analysis import cost
from profdsl.analysis.catalog import Artifact, FolderError, catalog
from profdsl.analysis.stages import StageRow, stage_rows
from profdsl.cli.common import fail, skipped, table

HELP = ("time per role / stage / step / rank, with each stage's share of the step and its slowest rank; "
        "what profiling itself cost per role and step")
EXAMPLES = """examples:
  profdsl summary profiles
  profdsl summary profiles --by role,stage            # totals over steps and ranks
  profdsl summary profiles --json > summary.json      # [{role, stage, step, rank, total_ms, ...}]
  profdsl summary profiles --cost --json              # [{role, step, traces, blocked_ms, export_ms, ...}]
"""
KEYS = ("role", "stage", "step", "rank")
COST_FIELDS = ("role", "step", "traces", "blocked_ms", "export_ms", "max_rank", "max_blocked_ms")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR``, ``--by``, ``--cost``, ``--json`` / ``--csv``."""
    parser.epilog, parser.formatter_class = EXAMPLES, argparse.RawDescriptionHelpFormatter
    parser.add_argument("dir", help="a save_path folder")
    parser.add_argument("--by", default=",".join(KEYS),
                        help="comma-separated keys to group by, from role,stage,step,rank")
    parser.add_argument("--cost", action="store_true",
                        help="only profiling's own cost per role and step (blocked_ms, export_ms from the "
                             "manifest); the text output shows it after the stage table anyway")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print a JSON list of objects")
    output.add_argument("--csv", action="store_true", help="print CSV")


def group(rows: list[StageRow], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows summed over the keys not in ``keys``; the share only when grouped by step and rank."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        record = row.as_dict()
        key = tuple(record[k] for k in keys)
        into = merged.setdefault(key, {**{k: record[k] for k in keys}, "count": 0, "total_ms": 0.0,
                                       "share": 0.0 if {"step", "rank"} <= set(keys) else None})
        into["count"] += row.count
        into["total_ms"] += row.total_ms
        if into["share"] is not None:
            into["share"] = None if row.share is None else into["share"] + row.share
    result = []
    for item in merged.values():
        item["mean_ms"] = item["total_ms"] / item["count"] if item["count"] else 0.0
        result.append(item)
    return result


def slowest(rows: list[StageRow]) -> dict[tuple[str, str, int | None], tuple[int | None, float]]:
    """For each (role, stage, step): the rank that spent longest, and how long."""
    per: dict[tuple[str, str, int | None], list[tuple[float, int | None]]] = defaultdict(list)
    for row in rows:
        per[(row.role, row.stage, row.step)].append((row.total_ms, row.rank))
    return {key: (max(v)[1], max(v)[0]) for key, v in per.items() if len(v) > 1}


def run(args: argparse.Namespace) -> int:
    """Summarize the readable traces; 1 when a manifest line or a trace was skipped (each named on
    stderr), 2 for usage errors."""
    keys = tuple(k.strip() for k in args.by.split(",") if k.strip())
    unknown = [k for k in keys if k not in KEYS]
    if unknown or not keys:
        return fail(f"--by takes keys from {','.join(KEYS)}, got {args.by!r}")
    try:
        found = catalog(args.dir)
    except FolderError as exc:
        return fail(str(exc))
    bad = list(found.problems)
    if args.cost:
        _print_cost(found.artifacts, args)
        return skipped("summary", bad)
    rows = stage_rows(args.dir, found.artifacts, bad)
    code = skipped("summary", bad)
    grouped = group(rows, keys)
    if args.json:
        print(json.dumps(grouped, indent=1))
    elif args.csv:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[*keys, "count", "total_ms", "mean_ms", "share"])
        writer.writeheader()
        writer.writerows(grouped)
        print(out.getvalue(), end="")
    else:
        _print_table(rows, grouped, keys)
        costs = cost.step_costs(found.artifacts)
        if costs:
            print(f"\n{cost.TITLE}")
            print(table(cost.HEADERS, [cost.cells(c) for c in costs]))
    return code


def _print_cost(artifacts: list[Artifact], args: argparse.Namespace) -> None:
    """``--cost``: one row per role and step."""
    costs = cost.step_costs(artifacts)
    if args.json:
        print(json.dumps([c.as_dict() for c in costs], indent=1))
    elif args.csv:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COST_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(c.as_dict() for c in costs)
        print(out.getvalue(), end="")
    elif costs:
        print(cost.TITLE)
        print(table(cost.HEADERS, [cost.cells(c) for c in costs]))
    else:
        print("no record carries blocked_ms or export_ms: profiling's cost was not recorded")


def _print_table(rows: list[StageRow], grouped: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    worst = slowest(rows) if keys == KEYS else {}
    body = []
    for item in grouped:
        share = "" if item["share"] is None else f"{100 * item['share']:.1f}%"
        lag = worst.get((item["role"], item["stage"], item["step"])) if worst else None
        mark = f"rank {lag[0]} ({lag[1]:.2f} ms)" if lag and lag[0] == item["rank"] else ""
        body.append([*(item[k] for k in keys), item["count"], f"{item['total_ms']:.3f}",
                     f"{item['mean_ms']:.3f}", share, mark])
    print(table([*keys, "count", "total ms", "mean ms", "share", "slowest rank"], body))
