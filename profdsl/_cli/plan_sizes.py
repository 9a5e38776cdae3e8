"""What ``profdsl plan`` says each trace will likely weigh: from the traces already in the
config's save_path (an earlier run's manifest records their ``json_bytes`` and mini-batches),
with the estimate of :mod:`profdsl.core._trace_size`; or that it cannot be known before a first
trace."""

from __future__ import annotations

import attrs

from profdsl.collect._manifest import read_records
from profdsl.config import ProfilerConfig
from profdsl.core._trace_size import SizeBook
from profdsl.core._units import MB, mb_text
from profdsl.core.preview import Preview
from profdsl.records.manifest import TraceRecord

__all__ = ["Likely", "likely_sizes", "size_lines"]

UNKNOWN = (
    "likely trace size: cannot be known before a first trace (it follows the ops the code runs); "
    "profdsl measures every trace it writes (json_bytes in the manifest): a plan of a save_path "
    "that holds traces estimates from them, and a run bounds each trace by max_trace_mb from "
    "its role's second trace on"
)


@attrs.frozen
class Likely:
    """The likely size of one trace of ``role`` (and ``stage``) under a plan: ``json_bytes`` of
    plain JSON for ``mini_batches`` (None: a trace of no mini-batch), from the last trace in
    save_path (``measured_bytes`` for ``measured_mini_batches``)."""

    role: str
    stage: str | None
    json_bytes: int
    mini_batches: int | None
    measured_bytes: int
    measured_mini_batches: int


def _mini_batches(record: TraceRecord) -> int:
    windows = [w.window for w in record.windows or () if w.window is not None]
    if record.window is not None:
        windows.append(record.window)
    return sum(last - first + 1 for first, last in windows)


def likely_sizes(config: ProfilerConfig, found: Preview) -> list[Likely]:
    """Per role and stage with traces in save_path (the last one of each counts): the likely
    size of one trace under this plan, and what it is estimated from."""
    try:
        records = [r for r in read_records(config.save_path) if isinstance(r, TraceRecord)]
    except OSError:
        return []
    books: dict[str, SizeBook] = {}
    for record in records:
        if record.json_bytes is not None and record.path is not None and record.role is not None:
            books.setdefault(record.role, SizeBook()).learn(
                record.stage, json_bytes=record.json_bytes, mini_batches=_mini_batches(record)
            )
    schedule = config.torch.schedule
    if config.discrete and schedule is not None:
        per_trace = schedule.active
    else:
        per_trace = sum(last - first + 1 for first, last in found.windows)
    return [
        Likely(
            role=role,
            stage=stage,
            json_bytes=book.estimate(stage, per_trace) or sample.json_bytes,
            mini_batches=per_trace if sample.mini_batches else None,
            measured_bytes=sample.json_bytes,
            measured_mini_batches=sample.mini_batches,
        )
        for role, book in sorted(books.items())
        for stage, sample in sorted(book.samples().items(), key=lambda item: item[0] or "")
    ]


def size_lines(config: ProfilerConfig, sizes: list[Likely]) -> list[str]:
    """The lines ``plan`` prints about trace sizes."""
    if not sizes:
        return [UNKNOWN]
    limit = config.torch.max_trace_mb
    lines = []
    for size in sizes:
        what = f"{size.role} stage {size.stage!r}" if size.stage else f"{size.role} step"
        basis = (
            f"{size.measured_mini_batches} mini-batch(es) in {mb_text(size.measured_bytes)} on the last "
            f"trace in save_path, times {size.mini_batches}"
            if size.mini_batches
            else f"the last trace in save_path: {mb_text(size.measured_bytes)}"
        )
        over = ""
        if limit is not None and size.json_bytes > limit * MB:
            over = f"; over max_trace_mb={limit:g}: ended early at the mini-batch where it passes"
        lines.append(f"likely trace size: {what}: about {mb_text(size.json_bytes)} of JSON ({basis}){over}")
    return lines
