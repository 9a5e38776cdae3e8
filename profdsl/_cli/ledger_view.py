"""``profdsl summary DIR --ledger``: where each step's wall time went, per role and rank, and how
long each group of ranks sat idle while another worked (:mod:`profdsl.analysis._ledger`): from
the traces where a trace splits the step, else from the metrics log."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence

from profdsl._cli.common import load_read, table
from profdsl.analysis._catalog import Artifact, number
from profdsl.analysis._fleet import GroupStep, RankLedger, group_name, headlines, kind_headlines, ms
from profdsl.analysis._ledger import FolderLedger, load_ledger
from profdsl.core._kinds import STAGE_KINDS
from profdsl.core._ledger import OUTSIDE, OVERHEAD
from profdsl.core._log import printable
from profdsl.core._units import percent_text

__all__ = ["ledger_columns", "ledger_text", "run"]

TITLE = (
    "where each traced step's wall time went, per role and rank (ms): the columns after wall ms add up "
    "to it; overhead: profiling's waits inside the step as its metrics log line timed them (its stage "
    "captures' starts and stops, its scheduled stages' schedule steps, its rollout engines' profilers; "
    "summary --cost's blocked ms counts torch's calls of profdsl's own captures only, and at the last "
    "profiled step the wait for its traces after the step ended; from an older log: that blocked ms plus "
    "its waits on rollout engines' profilers); "
    "concurrent: stage time that ran beside the stage its time went to, not in the sum"
)
UNTRACED = (
    "not traced: {steps}. The traces split traced steps only; the metrics log's ledgers of every step "
    "it logged follow{where}"
)
#: What ``overhead`` is in a ledger from the metrics (here, and in the demo's table).
METRICS_OVERHEAD = (
    "overhead: profiling's waits inside the step, timed around its stage captures' starts and stops, its "
    "scheduled stages' schedule steps and its rollout engines' profilers"
)
METRICS_TITLE = (
    "from the metrics log (Metrics(log=True): every step, split when it ended): where the wall time went of "
    f"each step, role and rank no trace splits (ms); the columns after wall ms add up to it; {METRICS_OVERHEAD}"
)
NO_METRICS = " (none here: no metrics log line carries a ledger; Metrics(log=True) writes them)"
OUTSIDE_NOTE = (
    "{role} rank {rank} step {step}: profiling held the step up {ms} ms more before its start and "
    "after its end (a continuous capture's start and stop), not in its wall time"
)
DEVICE_TITLE = (
    "on the device (Metrics(device_time=True): CUDA events at each stage's entry and exit, from the metrics): "
    "per role and rank, the device span of its stages, from the first one's entry to the last one's exit (ms); "
    "the columns after span ms add up to it, one instant to one stage as above; outside: no stage's work "
    "(the device idle, or running work queued outside every stage)"
)
UNPLACED_NOTE = (
    "{role} rank {rank} step {step}: {ms} ms of profiling's recorded waits exceed the time outside its "
    "stages: they are left in the stages' time"
)


def ledger_columns(used: Iterable[str], *last: str) -> list[str]:
    """A ledger table's columns: the kinds of work of ``used`` (each with time) but ``last``, in
    :data:`STAGE_KINDS` order, then the files' own, sorted; then ``last`` (overhead, outside)."""
    kinds = set(used) - set(last)
    return [k for k in STAGE_KINDS if k in kinds] + sorted(kinds - set(STAGE_KINDS)) + list(last)


def _rank_rows(ranks: Sequence[RankLedger], columns: Sequence[str]) -> tuple[list[list[object]], list[str]]:
    rows: list[list[object]] = []
    notes: list[str] = []
    for rank in ranks:
        ledger = rank.ledger
        where = f"{group_name(rank.group)} rank {rank.rank}"
        if ledger is None:
            notes.append(f"{where}: {rank.why}")
            continue
        cells: list[object] = [rank.role, rank.rank, ms(ledger.wall)]
        rows.append([*cells, *(ms(ledger.buckets.get(c, 0)) for c in columns), ms(ledger.concurrent)])
        if rank.why:  # a step from the metrics that cannot be placed beside the others
            notes.append(f"{where}: not in the groups' idle times: {rank.why}")
        for note, ns in ((OUTSIDE_NOTE, rank.overhead_outside), (UNPLACED_NOTE, ledger.overhead_unplaced)):
            if ns:
                notes.append(note.format(role=rank.role, rank=rank.rank, step=rank.step, ms=ms(ns)))
    return rows, notes


def _device_rows(ranks: Sequence[RankLedger]) -> list[str]:
    """The device split of the ranks that have one: a table, or nothing."""
    found = [r for r in ranks if r.device is not None and any(r.device.values())]
    if not found:
        return []
    heads = ledger_columns((k for r in found for k, v in (r.device or {}).items() if v), OUTSIDE)
    rows: list[list[object]] = []
    for rank in found:
        device = rank.device or {}
        span = sum(device.values())
        cells = [ms(device.get(k, 0)) for k in heads]
        rows.append([rank.role, rank.rank, ms(span), *cells, percent_text(device.get(OUTSIDE, 0), span)])
    headers = ["role", "rank", "span ms", *(f"{k} ms" for k in heads), "outside %"]
    return [DEVICE_TITLE, table(headers, rows)]


def _fleet(step: int | None, span: int, groups: Sequence[GroupStep], what: str) -> list[str]:
    """The groups' busy and idle time over the step's ``what`` span, and what each waited for."""
    names = [group_name(g.group) for g in groups]
    rows = [
        [
            group_name(g.group),
            g.ranks,
            ms(g.busy),
            ms(g.idle),
            percent_text(g.idle, span) if span else "-",
            *(ms(g.idle_while[o.group]) if o.group in g.idle_while else "" for o in groups),
        ]
        for g in groups
    ]
    return [
        f"\nacross groups: the step's {what} span (from the first stage any group began to the last to end) is "
        f"{ms(span)} ms; busy: in a stage; idle: not; idle while X ran: idle while any rank of X was busy "
        "(mean per rank, ms)",
        table(["group", "ranks", "busy ms", "idle ms", "idle %", *(f"while {n} ran" for n in names)], rows),
        *map(printable, headlines(step, span, groups)),
        *map(printable, kind_headlines(step, span, groups)),
    ]


def _blocks(
    ranks: Sequence[RankLedger], groups: Sequence[GroupStep], spans: dict[int | None, tuple[int, int]], what: str
) -> list[str]:
    """Per step: its ranks' ledgers, then (where they are placed) its groups' busy and idle time."""
    blocks = []
    used = (k for r in ranks if r.ledger is not None for k, v in r.ledger.buckets.items() if v)
    heads = ledger_columns(used, OVERHEAD, OUTSIDE)
    headers = ["role", "rank", "wall ms", *(f"{c} ms" for c in heads), "concurrent ms"]
    steps = sorted({r.step for r in ranks} | set(spans), key=number)
    for step in steps:
        rows, notes = _rank_rows([r for r in ranks if r.step == step], heads)
        lines = ["traces without a step" if step is None else f"step {step}"]
        lines += [table(headers, rows)] if rows else ["no role's step has a ledger here:"]
        lines += map(printable, notes)  # each one line: a role, a reason or a kind from the files escaped
        lines += _device_rows([r for r in ranks if r.step == step])
        if step in spans:
            start, end = spans[step]
            lines += _fleet(step, end - start, [g for g in groups if g.step == step], what)
        blocks.append("\n".join(lines))
    return blocks


def ledger_text(found: FolderLedger) -> str:
    """The text view: per traced step, the ranks' ledgers, then its groups' busy and idle time;
    then the same from the metrics log for what no trace splits."""
    blocks = _blocks(found.ranks, found.groups, dict(found.spans), "traced")
    if not blocks:
        blocks.append("no stage time found in any readable trace: no traced step to split")
    if found.untraced:
        blocks.append(
            UNTRACED.format(steps=", ".join(map(str, found.untraced)), where="" if found.metrics else NO_METRICS)
        )
    if found.metrics:
        blocks.append(METRICS_TITLE)
        blocks += _blocks(found.metrics, found.metric_groups, dict(found.metric_spans), "timed")
    return "\n\n".join([TITLE, *blocks])


def run(args: argparse.Namespace, folder: str, artifacts: list[Artifact], bad: list[str]) -> int:
    """Print the ledger of ``folder`` (text, or ``--json``), naming what it skipped
    (:func:`~profdsl._cli.common.load_read`); returns the exit code."""
    found, code = load_read("summary", folder, artifacts, bad, load_ledger)
    if args.json:
        print(json.dumps(found.as_dict(), indent=1))
    else:
        print(ledger_text(found))
    return code
