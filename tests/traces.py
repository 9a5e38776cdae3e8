"""Reading back the traces a test run wrote (an independent reader: plain gzip + json)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

from profdsl.naming import TraceName


def trace_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Every finished trace file in ``folder``, sorted by name."""
    return sorted(p for p in Path(folder).iterdir() if p.name.endswith(".json.gz") and not p.name.startswith("."))


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def names(trace: dict[str, Any], prefix: str = "") -> list[str]:
    """Names of the complete (``X``) events starting with ``prefix``, in time order."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith(prefix)]
    return [e["name"] for e in sorted(events, key=lambda e: e["ts"])]


def events(trace: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith(prefix)]


def parsed(folder: str | os.PathLike[str]) -> list[tuple[TraceName, dict[str, Any]]]:
    """(name, trace) for every trace file in ``folder``."""
    return [(TraceName.parse(p.name), load(p)) for p in trace_files(folder)]
