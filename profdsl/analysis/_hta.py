"""A folder Holistic Trace Analysis reads: one trace per rank of one stage at one step, with each
mini-batch marked as an iteration (``profdsl export --hta``).

HTA (the ``HolisticTraceAnalysis`` package, 0.5) takes every ``.json`` / ``.gz`` file of a folder
as the trace of one rank, the rank read from its ``"rank": N`` (``distributedInfo``), and finds
iterations by ``ProfilerStep#N`` events: a CPU event belongs to iteration N when it starts inside
one. profdsl writes no such event at capture (``ProfilerStep`` would not say which mini-batch,
and profdsl names its own regions), so the export adds them.

For step ``N`` and stage ``NAME`` (of one role), each rank that has traces holding the stage at
that step gets one file, ``rank{R}.pt.trace.json.gz``, with:

- every event of those traces (a discrete scheduled stage's windows, or the continuous step's
  trace), moved onto one clock shared by all the files (the smallest ``baseTimeNanoseconds``),
  flows kept apart, profdsl's region names decoded (:mod:`profdsl.analysis._rewrite`); metadata
  events repeated by several windows of one process are written once, and an input's own
  ``ProfilerStep...`` events are renamed ``torch_step...``, so that only the markers count;
- ``distributedInfo`` (rank and world size), first in the file, and ``profdsl.export`` saying what
  was exported;
- one ``ProfilerStep#K`` complete event (cat ``user_annotation``, on the mini-batch region's pid
  and tid) spanning mini-batch ``K`` of the stage: the mini-batch regions nested under the stage
  (the shallowest level under it, when mini-batches nest), a mini-batch continued over several
  regions spanning all of them. A stage without mini-batches on a rank marks its own entries:
  ``K`` = 0, 1, ... in time order when each of its regions is one entry, else one iteration over
  all of them (the entries cannot be told apart).

Which regions are a stage's and how they nest is the stage-time model's answer
(:meth:`~profdsl.analysis._model.StageModel.placed`); the traces are read twice, scanned (fast,
in parallel) and then streamed event by event; no trace is held in memory.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from profdsl.analysis import _reader as reader
from profdsl.analysis._catalog import Artifact, catalog, json_traces, trace_header
from profdsl.analysis._load import scan_artifacts
from profdsl.analysis._model import StageModel
from profdsl.analysis._outputs import check_output
from profdsl.analysis._rewrite import Rewriter, shift_us
from profdsl.analysis._scan import Piece, TraceScan, piece
from profdsl.core._naming import TRACE_EXT
from profdsl.records.fields import to_json
from profdsl.records.meta import (
    BASE_TIME_KEY,
    DISTRIBUTED_KEY,
    META_KEY,
    ExportMeta,
    TraceMeta,
    distributed_info,
    header_meta,
)

__all__ = ["HtaError", "HtaReport", "RankExport", "export_hta", "output_name"]

#: What a marker is named (HTA's iteration pattern).
MARKER = "ProfilerStep#"
#: What an input's own ``ProfilerStep...`` events are renamed to (prefix replaced).
RENAMED = "torch_step"
_OURS = re.compile(rf"\.?rank[0-9]+{re.escape(TRACE_EXT)}(\.partial)?\Z")
#: Header keys of an input not copied: written anew, or naming one input only.
_OWN_KEYS = frozenset({DISTRIBUTED_KEY, META_KEY, BASE_TIME_KEY, "traceName", "trace_id"})


class HtaError(Exception):
    """A usage problem: the step, stage or role is not in the folder, or the output folder
    cannot take the export. The message names what is there."""


@attrs.frozen
class RankExport:
    """One rank's file.

    Attributes:
        rank: The rank.
        path: The file written.
        traces: How many input traces went into it.
        events: How many events it holds (markers included).
        iterations: The ``K`` of its ``ProfilerStep#K`` markers, in order.
        unit: What the markers span: ``"mini_batch"`` or ``"stage"`` (its entries).
    """

    rank: int
    path: Path
    traces: int
    events: int
    iterations: tuple[int, ...]
    unit: str


@attrs.frozen
class HtaReport:
    """What :func:`export_hta` did: the folder, the files per rank, and one reason per input left
    out (a bad manifest line, an unreadable or malformed trace, a trace without a rank)."""

    output: Path
    ranks: tuple[RankExport, ...]
    errors: tuple[str, ...]


@attrs.frozen
class _Rank:
    """What one rank's file is made of: its inputs (in time order) and the pieces each marker
    spans."""

    rank: int
    world_size: int | None
    inputs: tuple[tuple[Artifact, TraceScan], ...]
    marks: dict[int, list[tuple[Artifact, Piece]]]
    unit: str


def output_name(rank: int) -> str:
    """The file a rank's trace is written to."""
    return f"rank{rank}{TRACE_EXT}"


def export_hta(
    folder: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    step: int,
    stage: str,
    role: str | None = None,
    force: bool = False,
) -> HtaReport:
    """Export stage ``stage`` of step ``step`` of ``folder`` into the folder ``output`` (see the
    module docstring).

    Args:
        folder: A profdsl save_path.
        output: The folder to write; created when missing. It must be empty, or with ``force``
            hold only an earlier export's files (they are replaced, and those of ranks not
            written again removed, once every new file is written).
        step: The step.
        stage: The stage's label.
        role: The role, needed when the stage ran in several roles at that step.
        force: Replace an earlier export in ``output``.

    Raises:
        FolderError: ``folder`` is missing, not a folder, or holds no artifact.
        HtaError: the step, stage or role is not there (the message lists what is), or ``output``
            is a file, not empty (without ``force``), or holds a file not written by an export.
        OutputError: ``output`` is, holds or lies in ``folder``.
        OSError: ``output`` cannot be written.
    """
    out = Path(output)
    check_output(out, folder, is_folder=True)
    listed = catalog(folder)
    earlier = _earlier_export(out, force)
    errors = list(listed.problems)
    plans = _plan(folder, listed.artifacts, step, stage, role, errors)
    if not plans:
        return HtaReport(out, (), tuple(errors))
    out.mkdir(parents=True, exist_ok=True)
    base = min(scan.base_ns for plan in plans for _, scan in plan.inputs)
    world = max(plan.rank for plan in plans) + 1
    written: list[tuple[Path, RankExport]] = []
    try:
        for plan in plans:
            result = _RankWriter(folder, plan, base, stage, step).write(out, world, errors)
            if result is not None:
                written.append(result)
        for partial, done in written:
            os.replace(partial, done.path)
    finally:
        for partial, _ in written:
            partial.unlink(missing_ok=True)
    if written:
        kept = {done.path.name for _, done in written}
        for old in earlier:
            if old.name not in kept:
                old.unlink(missing_ok=True)
    return HtaReport(out, tuple(done for _, done in written), tuple(errors))


def _earlier_export(out: Path, force: bool) -> list[Path]:
    """The files of an earlier export in ``out`` that a new one replaces (none when ``out`` is
    missing or empty); refuses anything else."""
    if not out.exists():
        return []
    if not out.is_dir():
        raise HtaError(f"{out}: not a folder")
    entries = sorted(out.iterdir())
    if entries and not force:
        raise HtaError(
            f"{out}: not empty ({len(entries)} entries): export into a new or empty folder, "
            "or pass --force to replace an earlier export there"
        )
    for entry in entries:
        if not _ours(entry):
            raise HtaError(f"{out}: {entry.name} was not written by profdsl export --hta; nothing was replaced")
    return entries


def _ours(entry: Path) -> bool:
    """Whether ``entry`` is a file an export wrote (a trace with ``profdsl.export``, or one left
    half written)."""
    match = _OURS.match(entry.name)
    if match is None or entry.is_symlink() or not entry.is_file():
        return False
    if match[1]:
        return True
    try:
        own = header_meta(reader.header(entry))
    except reader.TraceError:
        return False
    return own is not None and own.export is not None


def _listing(values: Iterable[int | str]) -> str:
    """Steps in numeric order, names quoted and in order: ``1, 2, 10`` or ``'a', 'b'``."""
    shown = sorted(set(values), key=lambda v: (isinstance(v, str), v if isinstance(v, str) else f"{v:020d}"))
    return ", ".join(repr(v) if isinstance(v, str) else str(v) for v in shown) or "none"


def _plan(
    folder: str | os.PathLike[str],
    artifacts: Sequence[Artifact],
    step: int,
    stage: str,
    role: str | None,
    errors: list[str],
) -> list[_Rank]:
    """One plan per rank that has the stage at the step, in rank order."""
    scanned = scan_artifacts(folder, _chosen(folder, artifacts, step, role), errors)
    model = StageModel(scanned)
    placed = [(a, path, piece) for a, path, piece in model.placed() if stage in path]
    own = [a for a, path, piece in placed if piece.index is None and path[-1] == stage]
    if not own:
        if errors:
            return []  # it may have been in a trace that could not be read
        stages = {piece.label for _, _, piece in model.placed() if piece.index is None}
        raise HtaError(f"{folder}: no stage {stage!r} at step {step} (stages: {_listing(stages)})")
    roles = {a.role or "unknown" for a in own}
    if len(roles) > 1:
        raise HtaError(f"stage {stage!r} of step {step} ran in roles {_listing(roles)}: choose one with --role")
    scans = {id(artifact): scan for artifact, scan in scanned}
    plans = []
    for rank, artifacts_of_rank in sorted(_by_rank(folder, own, errors).items()):
        inputs = sorted(((a, scans[id(a)]) for a in artifacts_of_rank), key=_time_order)
        plans.append(_marks(model, rank, stage, tuple(inputs), placed))
    return plans


def _chosen(
    folder: str | os.PathLike[str], artifacts: Sequence[Artifact], step: int, role: str | None
) -> list[Artifact]:
    """The training traces of ``step`` (of ``role``), or why there are none."""
    traces = [a for a in json_traces(artifacts) if a.kind == "trace"]
    steps = {a.step for a in traces if a.step is not None}
    if step not in steps:
        raise HtaError(f"{folder}: no training trace of step {step} (steps: {_listing(steps)})")
    at_step = [a for a in traces if a.step == step]
    chosen = [a for a in at_step if role is None or a.role == role]
    if not chosen:
        raise HtaError(
            f"{folder}: no trace of role {role!r} at step {step} "
            f"(roles: {_listing(a.role or 'unknown' for a in at_step)})"
        )
    return chosen


def _by_rank(folder: str | os.PathLike[str], own: list[Artifact], errors: list[str]) -> dict[int, list[Artifact]]:
    """The traces holding the stage, per rank, each once; one without a rank is an error."""
    by_rank: dict[int, list[Artifact]] = defaultdict(list)
    for artifact in own:
        if artifact.rank is None:
            reason = f"{os.path.join(folder, str(artifact.path))}: no rank (HTA reads one trace per rank)"
            if reason not in errors:
                errors.append(reason)
        elif all(artifact is not a for a in by_rank[artifact.rank]):
            by_rank[artifact.rank].append(artifact)
    return by_rank


def _time_order(item: tuple[Artifact, TraceScan]) -> tuple[int, float]:
    return item[1].base_ns, min((p.ts for p in item[1].pieces), default=0.0)


def _marks(
    model: StageModel,
    rank: int,
    stage: str,
    inputs: tuple[tuple[Artifact, TraceScan], ...],
    placed: list[tuple[Artifact, tuple[str, ...], Piece]],
) -> _Rank:
    """The rank's plan: which of the stage's pieces (``placed``, every rank's) each marker spans."""
    base_of = {id(a): scan.base_ns for a, scan in inputs}
    placed = [item for item in placed if id(item[0]) in base_of]  # this rank's inputs
    batches = [(a, path, p) for a, path, p in placed if p.index is not None and stage in path[:-1]]
    world = next((a.world_size for a, _ in inputs if a.world_size is not None), None)
    marks: dict[int, list[tuple[Artifact, Piece]]] = defaultdict(list)
    if batches:
        depth = min(_below(path, stage) for _, path, _ in batches)
        for artifact, path, piece in batches:
            if _below(path, stage) == depth:
                marks[int(piece.index or 0)].append((artifact, piece))
        return _Rank(rank, world, inputs, dict(marks), "mini_batch")
    own = sorted(
        ((a, p) for a, path, p in placed if p.index is None and path[-1] == stage),
        key=lambda item: base_of[id(item[0])] / 1000 + item[1].ts,
    )
    key = (own[0][0].role or "unknown", own[0][0].step, rank)
    entries = sum(n.count for n in model.nodes if (n.role, n.step, n.rank) == key and n.path[-1] == stage)
    if entries == len(own):
        for index, item in enumerate(own):
            marks[index].append(item)
    else:
        marks[0] = list(own)
    return _Rank(rank, world, inputs, dict(marks), "stage")


def _below(path: tuple[str, ...], stage: str) -> int:
    """How many levels the last of ``path`` sits below the innermost ``stage`` before it."""
    return len(path) - 1 - max(i for i, label in enumerate(path[:-1]) if label == stage)


class _RankWriter:
    """Rewrites one rank's inputs into its file (:mod:`profdsl.analysis._rewrite`), then writes
    the markers."""

    def __init__(self, folder: str | os.PathLike[str], plan: _Rank, base_ns: int, stage: str, step: int) -> None:
        self.folder, self.plan, self.base_ns, self.stage, self.step = folder, plan, base_ns, stage, step
        self.wanted = {(id(a), p): k for k, items in plan.marks.items() for a, p in items}
        self.found: dict[int, list[tuple[float, float, Any, Any]]] = defaultdict(list)  # ts, dur, pid, tid
        self.seen: set[str] = set()

    def write(self, out: Path, world: int, errors: list[str]) -> tuple[Path, RankExport] | None:
        """Write the rank's file as a partial next to its place; None when no input read well."""
        final = out / output_name(self.plan.rank)
        kept: list[tuple[Artifact, dict[str, Any]]] = []
        with Rewriter(out, self.base_ns) as rewriter:
            for index, (artifact, scan) in enumerate(self.plan.inputs):
                header = self._copy(rewriter, artifact, scan, index, errors)
                if header is not None:
                    kept.append((artifact, header))
            if not kept:
                return None
            markers = self._markers()
            partial = rewriter.finish(final, self._head(kept, world), after=markers, level=1)
        events = rewriter.body.count + len(markers)
        return partial, RankExport(self.plan.rank, final, len(kept), events, tuple(sorted(self.found)), self.plan.unit)

    def _copy(
        self, rewriter: Rewriter, artifact: Artifact, scan: TraceScan, index: int, errors: list[str]
    ) -> dict[str, Any] | None:
        """Copy one input's events; its header, or None (its reason in ``errors``, nothing of it
        kept)."""
        seen = set(self.seen)
        found: list[tuple[int, tuple[float, float, Any, Any]]] = []
        shift = shift_us(scan.base_ns, self.base_ns)

        def edit(event: dict[str, Any], label: tuple[str, int | None] | None) -> dict[str, Any] | None:
            if self._repeated(event):
                return None
            found_piece = piece(event, label)
            mark_of = None if found_piece is None else self.wanted.get((id(artifact), found_piece))
            if mark_of is not None:
                found.append((mark_of, (event["ts"] + shift, event.get("dur", 0), event.get("pid"), event.get("tid"))))
            name = event.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep"):
                event["name"] = RENAMED + name[len("ProfilerStep") :]
            return event

        try:
            header = trace_header(self.folder, artifact)
            rewriter.copy(os.path.join(self.folder, str(artifact.path)), header, scan.base_ns, index, edit)
        except reader.TraceError as exc:
            self.seen = seen
            errors.append(str(exc))
            return None
        for k, span in found:
            self.found[k].append(span)
        return header

    def _repeated(self, event: dict[str, Any]) -> bool:
        """A metadata event already written (each window of a process repeats its names)."""
        if event.get("ph") != "M":
            return False
        key = json.dumps(
            [event.get("name"), event.get("pid"), event.get("tid"), event.get("args")], sort_keys=True, default=str
        )
        if key in self.seen:
            return True
        self.seen.add(key)
        return False

    def _markers(self) -> list[dict[str, Any]]:
        markers = []
        what = "mini-batch" if self.plan.unit == "mini_batch" else "entry"
        for k in sorted(self.found):
            spans = sorted(self.found[k], key=lambda s: s[0])
            start = spans[0][0]
            # one region: its own duration exactly; several: from the first start to the last end
            dur = spans[0][1] if len(spans) == 1 else max(s[0] + s[1] for s in spans) - start
            markers.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"{MARKER}{k}",
                    "pid": spans[0][2],
                    "tid": spans[0][3],
                    "ts": start,
                    "dur": dur,
                    "args": {META_KEY: f"{what} {k} of {self.stage}"},
                }
            )
        return markers

    def _head(self, kept: list[tuple[Artifact, dict[str, Any]]], world: int) -> list[tuple[str, Any]]:
        """The file's header: ``distributedInfo`` first and on its own line (HTA finds the rank
        by the first ``"rank": N`` of the file), what it exports, then the first input's own."""
        plan = self.plan
        own = ExportMeta(
            format="hta",
            role=kept[0][0].role,
            stage=self.stage,
            step=self.step,
            rank=plan.rank,
            iterations=plan.unit,
            traces=tuple(str(a.path) for a, _ in kept),
        )
        head = [
            (DISTRIBUTED_KEY, distributed_info(plan.rank, plan.world_size or world)),
            (META_KEY, to_json(TraceMeta(export=own))),
        ]
        return head + [(key, value) for key, value in kept[0][1].items() if key not in _OWN_KEYS]
