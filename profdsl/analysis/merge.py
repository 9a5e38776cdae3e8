"""Every JSON trace of a folder in one Chrome trace (``profdsl merge DIR -o FILE``).

Each distinct :attr:`~profdsl.analysis._catalog.Artifact.label` (role, rollout replica, rank)
becomes one process row, and every timestamp is moved onto one clock. torch (kineto) writes an
event's ``ts`` in microseconds after the trace's ``baseTimeNanoseconds``, and the two add up to
the wall clock (``CLOCK_REALTIME``, Unix time) of the host that recorded it: an input's events
are shifted by ``(its base - the smallest base) / 1000`` and the output carries the smallest
base. Traces of one host (trainer ranks, rollout engines, any process) share its clock exactly;
traces of different hosts are as far apart as the hosts' clocks are (NTP keeps them within about
a millisecond on a LAN, PTP far closer; nothing here can measure it). The merged file's
``profdsl.alignment`` says which clock each host's rows follow and that uncertainty.

profdsl's region names are decoded to their labels (:mod:`profdsl.core._labels`), and the merged
file's ``profdsl.stages`` holds the stage-time model's rows for the traces merged
(:mod:`profdsl.analysis._model`): the numbers ``profdsl summary`` prints for them.

Inputs are streamed event by event through :mod:`profdsl.analysis._rewrite`: a trace that turns
out malformed or cut short is skipped whole, as every other command skips it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from profdsl.analysis import _reader as reader
from profdsl.analysis._catalog import Artifact, catalog, json_traces, number, trace_header
from profdsl.analysis._model import StageModel
from profdsl.analysis._outputs import check_output
from profdsl.analysis._rewrite import Rewriter, partial_of, shift_us
from profdsl.analysis._scan import TraceScan, scan_events, spans_whole
from profdsl.records.fields import to_json
from profdsl.records.meta import META_KEY, TraceMeta, base_time_ns, header_meta

__all__ = ["LEFT_OUT", "MergeReport", "MergedRow", "alignment", "merge_folder"]

Event = dict[str, Any]

#: Input metadata that would rename or reorder the rows merge assigns.
_ROW_METADATA = frozenset({"process_name", "process_labels", "process_sort_index"})


@attrs.frozen
class MergedRow:
    """One process row of the merged trace.

    Attributes:
        pid: The pid every event of the row carries in the output.
        label: The row's name (``Artifact.label``).
        traces: How many input traces went into the row.
        events: How many events were written to the row (row metadata included).
    """

    pid: int
    label: str
    traces: int
    events: int


@attrs.frozen
class MergeReport:
    """What :func:`merge_folder` did.

    Attributes:
        output: The file written, or None when there was nothing to merge.
        rows: The process rows, in pid order.
        errors: One reason per input left out (each names the file or manifest line): manifest
            lines that are not valid records, traces that are unreadable or malformed.
        skipped: Artifacts left out because they are not ok JSON traces or not in ``steps``.
        left_out: What those are: (``hook record``, count), ``trace of another step``, ...
    """

    output: Path | None
    rows: tuple[MergedRow, ...]
    errors: tuple[str, ...]
    skipped: int
    left_out: tuple[tuple[str, int], ...] = ()


@attrs.frozen
class _Input:
    path: str
    base_ns: int
    artifact: Artifact
    meta: dict[str, Any]


def merge_folder(
    folder: str | os.PathLike[str], output: str | os.PathLike[str], steps: Sequence[int] | None = None
) -> MergeReport:
    """Merge every ok ``.json``/``.json.gz`` trace of ``folder`` into ``output``.

    A bad input (a manifest line that is not a valid record, an unreadable or malformed trace)
    is reported in ``errors`` and left out whole; the others are still merged.

    Args:
        folder: A profdsl save_path.
        output: The file to write (gzipped when it ends with ``.gz``); replaced atomically.
        steps: Merge only artifacts of these steps (artifacts without a step are left out).

    Raises:
        FolderError: ``folder`` is missing, not a folder, or holds no artifact.
        OutputError: ``output`` is, or lies inside, ``folder`` (it would overwrite an input, or
            be read as one).
        OSError: ``output`` cannot be written.
    """
    check_output(output, folder)
    listed = catalog(folder)
    found = listed.artifacts
    chosen = _select(found, steps)
    errors = list(listed.problems)
    inputs = _read_headers(folder, chosen, errors)
    left = _left_out(found, chosen)
    if not inputs:
        return MergeReport(None, (), tuple(errors), len(found) - len(chosen), left)
    rows = _write(inputs, Path(output), errors)
    return MergeReport(Path(output), rows, tuple(errors), len(found) - len(chosen), left)


#: What an artifact merge leaves out is, one and many (in the order reports name them).
LEFT_OUT = {
    "hook record": "hook records",
    "rollout file": "rollout files",
    "nsys report": "nsys reports",
    "lost trace": "lost traces",
    "trace that is not JSON": "traces that are not JSON",
    "trace of another step": "traces of another step",
}


def _left_out(found: Sequence[Artifact], chosen: Sequence[Artifact]) -> tuple[tuple[str, int], ...]:
    """What the artifacts of ``found`` not ``chosen`` are, with their counts, in :data:`LEFT_OUT`'s order."""
    traces = {id(a) for a in json_traces(found)}
    taken = {id(a) for a in chosen}
    counts: dict[str, int] = {}
    for artifact in found:
        if id(artifact) in taken:
            continue
        if artifact.kind == "hook":
            what = "hook record"
        elif artifact.kind in ("rollout", "nsys"):
            what = "rollout file" if artifact.kind == "rollout" else "nsys report"
        elif artifact.status != "ok":
            what = "lost trace"
        else:
            what = "trace of another step" if id(artifact) in traces else "trace that is not JSON"
        counts[what] = counts.get(what, 0) + 1
    return tuple((what, counts[what]) for what in LEFT_OUT if what in counts)


def _select(found: Iterable[Artifact], steps: Sequence[int] | None) -> list[Artifact]:
    wanted = None if steps is None else set(steps)
    chosen = [a for a in json_traces(found) if wanted is None or a.step in wanted]
    return sorted(chosen, key=lambda a: (a.label, number(a.step), a.path or ""))


def _read_headers(folder: str | os.PathLike[str], chosen: Iterable[Artifact], errors: list[str]) -> list[_Input]:
    """The inputs whose header reads well; each other's reason appended to ``errors``."""
    inputs: list[_Input] = []
    for artifact in chosen:
        path = os.path.join(folder, str(artifact.path))  # as the other commands name it
        try:
            meta = trace_header(folder, artifact)
        except reader.TraceError as exc:
            errors.append(str(exc))
            continue
        inputs.append(_Input(path, base_time_ns(meta), artifact, meta))
    return inputs


def _row_metadata(label: str, pid: int) -> list[Event]:
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]


def _on_row(pid: int) -> Any:
    """The edit that moves an event to row ``pid``, leaving out input row metadata."""

    def edit(event: Event, _label: object) -> Event | None:
        if event.get("ph") == "M" and event.get("name") in _ROW_METADATA:
            return None
        event["pid"] = pid
        return event

    return edit


def _write(inputs: list[_Input], output: Path, errors: list[str]) -> tuple[MergedRow, ...]:
    """Rewrite every input into ``output`` (:mod:`profdsl.analysis._rewrite`), scanning each for
    the stage-time model as it passes (an input that turns out malformed is left out, its reason
    appended to ``errors``). ``inputs`` come in label order, so the rows that keep a trace get
    pids 1, 2, ... in label order."""
    base = min(i.base_ns for i in inputs)
    pids: dict[str, int] = {}
    counts: dict[str, int] = {}
    scans: list[tuple[_Input, TraceScan]] = []
    try:
        with Rewriter(output.parent, base) as out:
            for index, item in enumerate(inputs):
                pid = pids.get(item.artifact.label, len(pids) + 1)
                written = out.body.count
                try:
                    with out.whole():
                        events = out.events(item.path, item.meta, item.base_ns, index, _on_row(pid))
                        scan = scan_events(item.meta, events, span=spans_whole(item.artifact.kind, item.meta))
                except reader.TraceError as exc:
                    errors.append(str(exc))
                    continue
                scans.append((item, scan))
                pids[item.artifact.label] = pid
                counts[item.artifact.label] = counts.get(item.artifact.label, 0) + out.body.count - written
            own = TraceMeta(
                merged_traces=len(scans),
                alignment=alignment(scans, base, pids),
                stages=tuple(StageModel((item.artifact, scan) for item, scan in scans).rows()),
            )
            rows: list[Event] = []
            for label, pid in pids.items():
                rows += _row_metadata(label, pid)
                counts[label] += 2
            level = 9 if output.name.endswith(".gz") else None
            partial = out.finish(
                output, [("displayTimeUnit", "ms"), (META_KEY, to_json(own))], before=rows, level=level
            )
        os.replace(partial, output)
    finally:
        partial_of(output).unlink(missing_ok=True)
    traces = Counter(item.artifact.label for item, _ in scans)
    return tuple(MergedRow(pid, label, traces[label], counts[label]) for label, pid in pids.items())


def alignment(scans: Sequence[tuple[_Input, TraceScan]], base_ns: int, pids: dict[str, int]) -> dict[str, Any]:
    """How the merged file's rows share one clock (its ``profdsl.alignment``): per host, its
    rows and how far its traces' clock origins lie from the merged one."""
    hosts: dict[str, dict[str, Any]] = {}
    for item, _scan in scans:
        own = header_meta(item.meta)  # the host whose clock the trace follows: its record's, else its header's
        host = item.artifact.host or (own.host if own is not None else None) or "unknown"
        entry = hosts.setdefault(host, {"host": host, "rows": [], "traces": 0, "shift_us": []})
        if pids[item.artifact.label] not in entry["rows"]:
            entry["rows"].append(pids[item.artifact.label])
        entry["traces"] += 1
        entry["shift_us"].append(shift_us(item.base_ns, base_ns))
    for entry in hosts.values():
        shifts = entry.pop("shift_us")
        entry["shift_us"] = [min(shifts), max(shifts)]
    several = len(hosts) > 1
    return {
        "clock": "wall",
        "method": "each event at baseTimeNanoseconds + ts: the wall clock (CLOCK_REALTIME, Unix time) "
        "of the host that recorded it, shifted onto the smallest baseTimeNanoseconds",
        "hosts": sorted(hosts.values(), key=lambda h: str(h["host"])),
        "within_host": "exact: the processes of one host read one clock",
        "across_hosts": (
            "not measured: rows of different hosts are off by those hosts' clock offset "
            "(NTP keeps it within about 1 ms on a LAN, PTP within microseconds)"
        )
        if several
        else "one host: no offset between rows",
    }
