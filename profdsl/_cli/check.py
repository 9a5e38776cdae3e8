"""``profdsl check DIR``: is every artifact there, whole and readable, and is anything missing?"""

from __future__ import annotations

import argparse
import os
import stat
from collections import defaultdict

from profdsl._cli.common import fail, printable
from profdsl.analysis._catalog import Artifact, Catalog, FolderError, catalog, json_traces, trace_header
from profdsl.analysis._reader import TraceError, events, file_kind
from profdsl.analysis._torch_checks import keep_all, violations
from profdsl.collect._export import events_owner
from profdsl.config import ProfilerConfig
from profdsl.config._checks import require_int
from profdsl.core._naming import ARTIFACT_SUFFIXES, TEMP_PREFIX, is_json_trace
from profdsl.core._selection import Selection
from profdsl.errors import ConfigError
from profdsl.records.manifest import HookRecord, Record, TraceRecord
from profdsl.records.requests import MAX_REQUEST_STEPS

HELP = (
    "check that every trace exists, is non-empty, parses, carries its metadata and passes torch's trace "
    "validation; list what is missing or holds less than asked"
)
EXAMPLES = """examples:
  profdsl check profiles                 # exit 0: all well; 1: problems (each named); 2: usage
  profdsl check profiles --config profiler.yaml --world-size 16
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR`` and, to know what was expected, ``--config`` and ``--world-size``."""
    parser.add_argument("dir", help="a save_path folder")
    parser.add_argument(
        "--config", help="the run's profiler config (YAML or JSON), to list profiled ranks that wrote nothing"
    )
    parser.add_argument("--world-size", type=int, help="the training world size (with --config)")


def check_file(folder: str, artifact: Artifact) -> str | None:
    """What is wrong with one artifact's file (the reason names it), or None.

    A JSON trace is read as every other command reads it: the same reasons make them skip it;
    torch's own trace validation then runs over the events its rules read
    (:mod:`profdsl.analysis._torch_checks`). Any other file is only ``stat``ed: it must be a
    regular file, not empty.
    """
    assert artifact.path is not None  # its one caller passes JSON traces and ok files with a path
    path = os.path.join(folder, artifact.path)
    if is_json_trace(artifact.path):
        try:
            trace_header(folder, artifact)
            kept = keep_all(events(path))
        except TraceError as exc:
            return str(exc)
        found = violations(kept)
        return f"{path}: torch's trace validation: {'; '.join(found)}" if found else None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"{path}: missing"
    except OSError as exc:
        return f"{path}: unreadable: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: not a regular file ({file_kind(info.st_mode)})"
    return f"{path}: empty" if info.st_size == 0 else None


def problems(folder: str, found: Catalog, config: ProfilerConfig | None, world_size: int | None) -> list[str]:
    """Every problem of ``folder``, one line each: the manifest lines and traces the other commands
    skip, each loss the manifest records (with the files it left, if any), other leftovers, files
    the manifest does not list, and profiled ranks that wrote nothing."""
    rows = found.artifacts
    result = list(found.problems)
    claimed: set[str] = set()  # leftovers a recorded loss names: reported on its line
    for a in rows:
        if a.record is not None and a.record.lost and not superseded(a, rows):
            line, left = _loss(a, a.record, found.leftovers)
            result.append(line)
            claimed.update(left)
    other_files = [a for a in rows if a.status == "ok" and a.path and not is_json_trace(a.path)]
    result += [issue for a in json_traces(rows) + other_files if (issue := check_file(folder, a))]
    result += [f"{name}: {_left_behind(name)}" for name in found.leftovers if name not in claimed]
    if any(a.record is not None for a in rows):
        listed = {a.path for a in rows if a.path}
        for name in sorted(os.listdir(folder)):
            if name.endswith(ARTIFACT_SUFFIXES) and name not in listed and not name.startswith(TEMP_PREFIX):
                result.append(f"{name}: not in the manifest")
    result += missing_ranks(rows, config, world_size)
    result += early_hooks(rows)
    return result


def early_hooks(rows: list[Artifact]) -> list[str]:
    """Traces recorded after the finish hook that ran for their step on their host, with no hook
    of that host after them (manifest order is recording order): that upload may have missed
    them. A hook waits only for its own process, so this is what "one uploader per node" does
    when another rank of the node finishes later."""
    hooks = [(i, a) for i, a in enumerate(rows) if a.kind == "hook" and a.status == "ok"]
    last = {hook.host: index for index, hook in hooks}  # each host's last hook (None: a hook that names no host)
    result = []
    for index, trace in enumerate(rows):
        if trace.kind != "trace" or trace.status != "ok" or trace.record is None or trace.step is None:
            continue
        host = trace.host
        later = max(last.values(), default=-1) if host is None else max(last.get(host, -1), last.get(None, -1))
        if index < later:
            continue  # a later upload of its host took it
        ran = [
            hook
            for at, hook in hooks
            if at < index
            and (host is None or hook.host in (None, host))
            and isinstance(hook.record, HookRecord)
            and trace.step in (hook.record.steps or ())
        ]
        if ran:
            where = f" on {host}" if host else ""
            result.append(
                f"{trace.path}: rank {trace.rank}'s trace of step {trace.step} was recorded after rank "
                f"{ran[-1].rank}'s finish hook ran{where}, and no hook ran after it: that upload may have "
                "missed it (a hook waits only for its own process; docs/collecting.md)"
            )
    return result


def superseded(loss: Artifact, rows: list[Artifact]) -> bool:
    """Whether a file recorded as left behind (``incomplete``, with its source) was moved in by a
    later pass: a later record of its kind and source says ``ok``."""
    record = loss.record
    if record is None or record.status != "incomplete" or record.origin is None:
        return False
    return any(
        a.kind == loss.kind and a.record is not None and a.record.status == "ok" and a.record.origin == record.origin
        for a in rows[rows.index(loss) + 1 :]
    )


def _loss(artifact: Artifact, record: Record, leftovers: list[str]) -> tuple[str, list[str]]:
    """One line for a loss the manifest records (``record``, ``artifact``'s), and the leftover
    files that belong to it (an export given up at exit keeps torch's events, named in its
    record's ``events``)."""
    detail = f" {record.why}" if record.why else ""
    kept = record.events if isinstance(record, TraceRecord) else None
    left = [n for n in leftovers if kept is not None and n.startswith(kept)]
    if kept is not None and kept in left:
        step = f" of step {artifact.step}" if artifact.step is not None else ""
        return (
            f"{kept}: torch's events of the {record.status} {artifact.role} trace{step} (plain JSON, kept: "
            f"its export was cut short at exit):{detail}",
            left,
        )
    where = artifact.path or record.intended or record.origin or f"{artifact.kind} of {artifact.label}"
    return f"{where}: {artifact.kind} {record.status}{detail}", left


def _left_behind(name: str) -> str:
    """What a hidden file of profdsl's left in the folder is: torch's events of a trace whose
    export never got recorded (kept: they are the trace, in plain JSON), or part of a cut write."""
    pid = events_owner(name)
    if pid is None:
        return "temporary file left by an interrupted write"
    return f"torch's events of a trace still being exported when process {pid} ended (plain JSON, kept)"


def _capture(artifact: Artifact) -> str | None:
    """The capture request a trace was for (None: the plan's steps)."""
    capture = artifact.record.capture if isinstance(artifact.record, TraceRecord) else None
    return None if capture is None else capture.request


def missing_ranks(rows: list[Artifact], config: ProfilerConfig | None, world_size: int | None) -> list[str]:
    """Profiled ranks that wrote no trace in a step that other ranks did write (a rank whose trace
    of that step is a recorded loss is not listed again: its loss has its own line). The plan's
    traces are compared among the plan's; a capture request's, rank by rank, with the steps its
    records say it was asked for on that rank (``capture.steps``: ranks that began a step apart
    trace different steps of one request)."""
    wrote: dict[tuple[str | None, int | None], set[int | None]] = defaultdict(set)
    lost: dict[tuple[str | None, int | None], set[int | None]] = defaultdict(set)
    for a in rows:
        if a.kind == "trace" and a.status == "ok":
            wrote[(_capture(a), a.step)].add(a.rank)
        elif a.kind == "trace" and a.record is not None and a.record.lost:
            lost[(_capture(a), a.step)].add(a.rank)
    problems = []
    for capture in sorted({c for c, _ in wrote}, key=lambda c: (c is not None, c or "")):
        if capture is not None:
            problems += [
                f"step {step} (capture request {capture}): profiled rank {rank} wrote no trace"
                for step, rank in _unwritten(rows, capture, wrote, lost)
            ]
            continue
        steps = {step: ranks for (c, step), ranks in wrote.items() if c is None}
        named = Selection.of(config).named_ranks(world_size) if config is not None and world_size else None
        # named None: the ranks that wrote (a selector needs each rank's coordinates)
        expected = {r for ranks in steps.values() for r in ranks if r is not None} if named is None else set(named)
        problems += [
            f"step {step}: profiled rank {rank} wrote no trace"
            for step in sorted(s for s in steps if s is not None)
            for rank in sorted(expected - steps[step] - lost[(capture, step)])
        ]
    return problems


def _unwritten(
    rows: list[Artifact],
    capture: str,
    wrote: dict[tuple[str | None, int | None], set[int | None]],
    lost: dict[tuple[str | None, int | None], set[int | None]],
) -> list[tuple[int, int]]:
    """(step, rank) that capture request ``capture`` asked of a rank, by its own records'
    ``capture.steps``, and that rank neither wrote nor recorded lost."""
    asked: set[tuple[int, int]] = set()
    for a in rows:
        note = a.record.capture if isinstance(a.record, TraceRecord) else None
        if a.kind == "trace" and a.rank is not None and note is not None and note.request == capture and note.steps:
            first, last = note.steps  # a request traces at most MAX_REQUEST_STEPS (a record may lie)
            asked.update((step, a.rank) for step in range(first, min(last, first + MAX_REQUEST_STEPS - 1) + 1))
    return sorted(
        (step, rank)
        for step, rank in asked
        if rank not in wrote.get((capture, step), set()) and rank not in lost.get((capture, step), set())
    )


def run(args: argparse.Namespace) -> int:
    """0 when all is well, 1 naming each problem, 2 for usage errors."""
    try:
        if args.world_size is not None:
            require_int("--world-size", args.world_size, 1)
        found = catalog(args.dir)
        config = ProfilerConfig.from_file(args.config) if args.config else None
    except (FolderError, ConfigError) as exc:
        return fail(str(exc))
    issues = problems(args.dir, found, config, args.world_size)
    for issue in issues:
        print(f"FAIL {printable(issue)}")
    rows = found.artifacts
    files = sum(1 for a in rows if a.path)
    print(f"{len(rows)} artifacts ({files} files) checked: {'all well' if not issues else f'{len(issues)} problem(s)'}")
    return 1 if issues else 0
