"""``profdsl summary DIR``: where each profiled step went, from profdsl's own regions in the
traces (the stage-time model, :mod:`profdsl.analysis._model`); and what profiling itself cost,
from the manifest's trace records (``--cost``)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import textwrap
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from profdsl._cli import ledger_view, stragglers_view
from profdsl._cli.common import fail, late_ms_refused, listed, load_read, skipped, table
from profdsl.analysis import _cost as cost
from profdsl.analysis._catalog import Artifact, FolderError, catalog_or_logs
from profdsl.analysis._load import load_model
from profdsl.analysis._model import StageModel, StageRow, StageSpread
from profdsl.analysis.culprits import DEFAULT_LATE_MS
from profdsl.config._parallel import DIMS
from profdsl.core._units import ms_text, percent_text

HELP = (
    "where each profiled step went: every role's stages and mini-batches (the rollout engines' "
    "generation too), with the spread across ranks and the slowest rank; flat totals with --by; "
    "what profiling itself cost per role and step"
)
EXAMPLES = """examples:
  profdsl summary profiles                            # per step: roles, stages, spread across ranks
  profdsl summary profiles --by role,stage            # flat totals over steps and ranks
  profdsl summary profiles --by stage,tp              # per tensor-parallel coordinate
  profdsl summary profiles --json > summary.json      # [{role, stage, step, rank, total_ms, path, ...}]
  profdsl summary profiles --cost --json              # [{role, step, traces, blocked_ms, export_ms, ...}]
  profdsl summary profiles --ledger                   # each traced step's wall time by kind; idle groups
  profdsl summary profiles --stragglers               # who made the others wait at collectives
"""
KEYS = ("role", "stage", "step", "rank", *DIMS)
#: ``--csv``'s columns of the stage rows: :class:`~profdsl.analysis._model.StageRow`'s fields (``--json``'s
#: keys, in their order), ``parallel`` as one column per coordinate.
ROW_FIELDS = tuple(c for f in attrs.fields(StageRow) for c in (DIMS if f.name == "parallel" else (f.name,)))
COST_FIELDS = ("role", "step", "traces", "blocked_ms", "export_ms", "max_rank", "max_blocked_ms")
STEP_HEADERS = ("role", "stage", "ranks", "count", "median ms", "min ms", "max ms", "slowest rank", "self ms")
#: What the step view says under a stage whose entries crossed on one thread.
INTERLEAVED = (
    "(interleaved): entries of concurrent tasks overlapped on one thread (a `with` block "
    "that awaits), so their regions cannot nest: the count is their entries, the times add "
    "the overlap. The always-on metrics time them exactly; a decorated `async def` stage "
    "keeps its regions apart."
)
#: Under a flat table without ``stage``: what its totals add.
FLAT_NOTE = "total: the outermost stages only (a nested stage or mini-batch is inside its parent's time)"
#: ... and with step and rank: what the step time is.
STEP_NOTE = (
    "; step ms: each role's step wall time (the metrics log's wall_s; its stages' time where no "
    "metrics log has it), the longest of the group's roles at each step and rank; "
    "outside ms: step ms less total; share: total of step ms"
)
#: The step view of a folder where every stage ran on one rank: no spread to show.
ONE_RANK_HEADERS = ("role", "stage", "count", "total ms", "self ms")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR``, ``--by``, ``--cost``, ``--ledger``, ``--stragglers`` and ``--late-ms`` (views of
    their own modules), ``--json`` / ``--csv``."""
    parser.add_argument("dir", help="a save_path folder")
    parser.add_argument(
        "--by",
        default=None,
        help="flat totals grouped by these comma-separated keys, from role,stage,step,rank and "
        "the parallel coordinates tp,pp,dp,cp,ep (a stage is its whole path, e.g. "
        "update_actor/mini_batch; a coordinate the traces do not carry groups as -)",
    )
    parser.add_argument(
        "--cost",
        action="store_true",
        help="only profiling's own cost per role and step (blocked_ms, export_ms from the "
        "manifest); the text output shows it after the stage table anyway",
    )
    parser.add_argument(
        "--ledger",
        action="store_true",
        help="each traced step's wall time per role and rank, split by kind of work (generation, "
        "inference, update, weight sync, reward, data, other), profiling overhead and time outside "
        "any stage; and how long each group of ranks sat idle while another worked (docs/ledger.md)",
    )
    parser.add_argument(
        "--stragglers",
        action="store_true",
        help="at the collectives of each traced step (gloo's and NCCL's), which rank arrived last and how long it "
        "made the others wait, per role, step and stage: the culprit, not its victims (docs/ledger.md)",
    )
    parser.add_argument(
        "--late-ms",
        type=float,
        default=DEFAULT_LATE_MS,
        help="with --stragglers: name a culprit when its lateness exceeds the median rank's by this "
        "many ms (default %(default)g)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print a JSON list of objects")
    output.add_argument("--csv", action="store_true", help="print CSV")


def group(model: StageModel, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The model's per-rank stage times summed over the keys not in ``keys`` (``stage`` is the
    stage's path). Without ``stage`` only outermost stages are summed (a nested stage's time is
    in its parent's). Grouped by step and rank: the share of the group's roles' step time
    (:func:`_step_time_us`); without ``stage``, that step time
    (``step_ms``) and the time outside any stage (``outside_ms``) too."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    nested = "stage" in keys
    with_share = {"step", "rank"} <= set(keys)
    members: dict[tuple[Any, ...], set[tuple[str, int | None, int | None]]] = defaultdict(set)
    for node in model.nodes:
        if node.depth and not nested:
            continue
        record = {
            "role": node.role,
            "stage": node.path,
            "step": node.step,
            "rank": node.rank,
            **dict.fromkeys(DIMS),
            **model.parallel(node.role, node.step, node.rank),
        }
        key = tuple(record[k] for k in keys)
        into = merged.setdefault(key, {**{k: record[k] for k in keys}, "count": 0, "total_us": 0.0})
        into["count"] += node.count
        into["total_us"] += node.total_us
        members[key].add((node.role, node.step, node.rank))
    result = []
    for key, item in merged.items():
        total = item.pop("total_us")
        if nested:
            item["stage"], item["path"] = item["stage"][-1], list(item["stage"])
        item["total_ms"] = round(total / 1000, 6)
        item["mean_ms"] = round(total / 1000 / item["count"], 6) if item["count"] else 0.0
        step_us = _step_time_us(model, members[key])
        item["share"] = round(total / step_us, 6) if with_share and step_us else None
        if with_share and not nested:
            item["step_ms"] = round(step_us / 1000, 6)
            item["outside_ms"] = round(max(step_us - total, 0.0) / 1000, 6)
        result.append({field: item[field] for field in flat_fields(keys, steps=with_share and not nested)})
    return result


def flat_fields(keys: tuple[str, ...], *, steps: bool) -> tuple[str, ...]:
    """A ``--by`` row's keys, in order (``--json``'s keys, ``--csv``'s columns, the table's
    columns but ``path``): ``keys``, the stage's ``path`` when grouped by stage, the sums,
    ``step_ms`` and ``outside_ms`` (``steps``: grouped by step and rank without stage), ``share``."""
    path = ("path",) if "stage" in keys else ()
    return (*keys, *path, "count", "total_ms", "mean_ms", *(("step_ms", "outside_ms") if steps else ()), "share")


def _step_time_us(model: StageModel, members: set[tuple[str, int | None, int | None]]) -> float:
    """The step time of a group: per (step, rank), the longest of its roles' step times (the
    roles of a step run inside one step window), summed over its steps and ranks."""
    longest: dict[tuple[int | None, int | None], float] = {}
    for role, step, rank in members:
        at = (step, rank)
        longest[at] = max(longest.get(at, 0.0), model.step_time_us(role, step, rank))
    return sum(longest.values())


def run(args: argparse.Namespace) -> int:
    """Summarize the readable traces; 1 when a manifest line, a trace or a metrics log line was
    skipped (each named on stderr; metrics log lines, the first few), 2 for usage errors."""
    keys = None if args.by is None else listed(args.by, KEYS)
    if args.by is not None and keys is None:
        return fail(f"--by takes keys from {','.join(KEYS)}, got {args.by!r}")
    view = _view(args)
    if isinstance(view, int):
        return view
    try:
        found = catalog_or_logs(args.dir, logs=view is ledger_view.run)
    except FolderError as exc:
        return fail(str(exc))
    bad = list(found.problems)
    if args.cost:
        _print_cost(found.artifacts, args)
        return skipped("summary", bad)
    if view is not None:
        return view(args, args.dir, found.artifacts, bad)
    model, code = load_read("summary", args.dir, found.artifacts, bad, load_model)
    rows = model.rows() if keys is None else group(model, keys)
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.csv:
        _print_csv(rows, keys)
    else:
        if keys is None:
            print(step_view(model))
        else:
            _print_flat(rows, keys)
        costs = cost.step_costs(found.artifacts)
        if costs:
            print()
            _print_cost_table(costs)
    return code


def _view(args: argparse.Namespace) -> Callable[[argparse.Namespace, str, list[Artifact], list[str]], int] | int | None:
    """The view ``--ledger`` or ``--stragglers`` asks for (None: the stage view), or a usage
    error's exit code. A view names what it skipped and returns the exit code."""
    if not (args.ledger or args.stragglers):
        return None
    flag = "--ledger" if args.ledger else "--stragglers"
    if args.by is not None or args.cost or args.csv or (args.ledger and args.stragglers):
        return fail(f"{flag} takes --json or prints text; not with --by, --cost, --csv or another view")
    if (refused := late_ms_refused(args.late_ms)) is not None:
        return fail(refused)
    return ledger_view.run if args.ledger else stragglers_view.run


def step_view(model: StageModel) -> str:
    """The RL step view: for each profiled step, each role's stages as a tree (nested stages and
    mini-batches indented under the stage they ran in), with the spread across ranks."""
    spreads = model.spread()
    if not spreads:
        return "no stage time found in any readable trace"
    one_rank = all(s.ranks == 1 for s in spreads)
    by_step: dict[int | None, list[list[object]]] = defaultdict(list)
    steps = model.step_spreads()
    for spread in _with_steps(spreads, steps):
        stage = "  " * (len(spread.path) - 1) + spread.stage + (" (interleaved)" if spread.interleaved else "")
        slowest = "" if spread.ranks < 2 or spread.min_us == spread.max_us else f"rank {spread.slowest_rank}"
        ranks = [] if one_rank else [spread.ranks]  # one rank: no spread to show
        extent = [] if one_rank else [_ms(spread.min_us), _ms(spread.max_us), slowest]
        row = [spread.role, stage, *ranks, spread.count, _ms(spread.median_us), *extent, _ms(spread.self_median_us)]
        by_step[spread.step].append(row)
    headers = ONE_RANK_HEADERS if one_rank else STEP_HEADERS
    blocks = []
    for step, lines in by_step.items():
        title = "traces without a step" if step is None else f"step {step}"
        blocks.append(f"{title}\n{table(headers, lines)}")
    if any(s.interleaved for s in spreads):
        blocks.append(INTERLEAVED)
    return "\n\n".join(blocks)


def _with_steps(spreads: list[StageSpread], steps: dict[tuple[int | None, str], StageSpread]) -> list[StageSpread]:
    """``spreads`` with each role's :data:`~profdsl.analysis._model.STEP_ROW` before its first
    stage of the step."""
    result = []
    for spread in spreads:
        step = steps.pop((spread.step, spread.role), None)
        if step is not None:
            result.append(step)
        result.append(spread)
    return result


def _ms(us: float) -> str:
    return ms_text(us / 1000)


def _print_csv(rows: list[dict[str, Any]], keys: tuple[str, ...] | None) -> None:
    steps = any("step_ms" in row for row in rows)
    fields = ROW_FIELDS if keys is None else flat_fields(keys, steps=steps)
    _write_csv(fields, ({**row, **row.get("parallel", {}), "path": "/".join(row.get("path", ()))} for row in rows))


def _write_csv(fields: tuple[str, ...], rows: Iterable[dict[str, Any]]) -> None:
    """``rows`` as CSV on stdout, a column per field (other keys left out)."""
    writer = csv.DictWriter(sys.stdout, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)


def _print_cost(artifacts: list[Artifact], args: argparse.Namespace) -> None:
    """``--cost``: one row per role and step (with the parts of the cost when a record carries
    them: :data:`profdsl.analysis._cost.PARTS`)."""
    costs = cost.step_costs(artifacts)
    parts = cost.has_parts(costs)
    if args.json:
        print(json.dumps([c.as_dict(parts) for c in costs], indent=1))
    elif args.csv:
        _write_csv(COST_FIELDS + cost.PARTS if parts else COST_FIELDS, (c.as_dict(parts) for c in costs))
    elif costs:
        _print_cost_table(costs)
    else:
        print("no record carries blocked_ms or export_ms: profiling's cost was not recorded")


def _print_cost_table(costs: list[cost.StepCost]) -> None:
    """The cost table, and what its parts are when it shows them."""
    print(cost.TITLE)
    print("\n".join(cost_lines(costs)))


def cost_lines(costs: list[cost.StepCost]) -> list[str]:
    """The cost table's lines under its title (header, rule, one row per role and step) and,
    when it shows the parts, an empty line and what they are (here and in the demo's report)."""
    parts = cost.has_parts(costs)
    lines = table(cost.headers(parts), [cost.cells(c, parts) for c in costs]).splitlines()
    return [*lines, "", *textwrap.wrap(cost.PARTS_NOTE, 100)] if parts else lines


def _print_flat(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    """The ``--by`` table: :func:`flat_fields`' columns but ``path`` (``stage`` is the whole path)."""
    steps = any("step_ms" in item for item in rows)
    fields = [f for f in flat_fields(keys, steps=steps) if f != "path"]
    body = [[_flat_cell(item, field) for field in fields] for item in rows]
    print(table([f.replace("_", " ") for f in fields], body))
    if "stage" not in keys:
        print(FLAT_NOTE + (STEP_NOTE if steps else ""))


def _flat_cell(item: dict[str, Any], field: str) -> object:
    """A ``--by`` row's ``field`` as the table shows it."""
    value = item[field]
    if field == "stage":
        return "/".join(item["path"])
    if field == "share":
        return "" if value is None else percent_text(value)
    return ms_text(value) if field.endswith("_ms") else value
