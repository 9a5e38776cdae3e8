"""The schema as Markdown tables: what ``docs/records.md`` holds (``tests/test_records.py``
checks the page against :func:`field_tables`)."""

from __future__ import annotations

from typing import Any

import attrs

from profdsl.records.manifest import RECORD_CLASSES, Record
from profdsl.records.meta import ExportMeta, Regions, TraceMeta, WindowNote
from profdsl.records.metrics_log import MetricsLine, StageLine
from profdsl.records.requests import CaptureNote, CaptureRequest

__all__ = ["field_tables"]


def _table(title: str, cls: type[Any], below: type[Any] | None = None) -> str:
    """The table ``title``: one row per field ``cls`` adds to ``below`` (every field when None)."""
    inherited = {f.name for f in attrs.fields(below)} if below is not None else set()
    rows = [
        f"| `{f.name}` | {'always' if f.metadata.get('always') else 'when set'} | {f.metadata['doc']} |"
        for f in attrs.fields(cls)
        if f.name not in inherited and not f.metadata.get("unknown")
    ]
    return "\n".join([f"### {title}", "", "| key | written | meaning |", "| --- | --- | --- |", *rows])


def field_tables() -> str:
    """Every record kind's, the trace metadata's, the capture requests' and the metrics log's
    fields, as Markdown."""
    kinds = ", ".join(f"`{k}`" for k in RECORD_CLASSES)
    parts = [
        _table("Every record", Record).replace(
            "| --- | --- | --- |", f"| --- | --- | --- |\n| `kind` | always | {kinds} |", 1
        ),
        *(_table(f"`{kind}` records add", cls, Record) for kind, cls in RECORD_CLASSES.items()),
        _table("Trace metadata (`profdsl`)", TraceMeta),
        _table("`regions`", Regions),
        _table("`windows` (each)", WindowNote),
        _table("`export` (an `export --hta` file)", ExportMeta),
        _table("`capture` (a trace's or hook run's)", CaptureNote),
        _table("Capture requests (`profdsl-requests/*.json`, `POST /profile`)", CaptureRequest),
        _table("The metrics log (`profdsl-metrics-*.jsonl`, one line per role and step)", MetricsLine),
        _table("`stages` (each, of a metrics log line)", StageLine),
    ]
    return "\n\n".join(parts)
