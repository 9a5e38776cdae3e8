"""Every reader of a file in ``save_path`` (a trace, the manifest, a metrics log, a capture
request) opens it through one rule (``core/_files.open_regular``): a link is refused unfollowed
(it could lead the reader to a file elsewhere, read and quoted with the reader's rights), a FIFO
or device is refused without blocking, and a file over the caller's bound unread. Each caller
keeps its own bound and says why in its own way."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profdsl.analysis._reader import TraceError, open_trace
from profdsl.collect import metrics_log
from profdsl.collect._manifest import MANIFEST_NAME, append_record, make_record, read_lines
from profdsl.collect._requests import MAX_REQUEST_BYTES, read_request
from profdsl.collect.metrics_log import log_name, read_log_lines

ROOT = Path(__file__).resolve().parents[1]
SECRET = "hunter2-secret"

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def _elsewhere(tmp_path: Path, name: str, text: str) -> Path:
    """A readable file outside the folder, holding ``text``: what a link in the folder points to."""
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    target = tmp_path / "elsewhere" / name
    target.write_text(text)
    return target


def _make(kind: str, path: Path, tmp_path: Path, text: str, limit: int | None) -> None:
    if kind == "link":
        path.symlink_to(_elsewhere(tmp_path, path.name, text))
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:  # over its bound: sparse, nothing of it written
        assert limit is not None
        with open(path, "wb") as file:
            file.truncate(limit + 1)


WHY = {"link": "a link", "FIFO": "not a regular file (a FIFO)", "link to /dev/zero": "a link", "too large": "more than"}


# -- a capture request (the training job reads it, and logs why it is none) ----------------------


@pytest.mark.parametrize("kind", sorted(WHY))
def test_a_request_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "a.json"
    _make(kind, path, tmp_path, json.dumps({"id": "s", "steps": SECRET}), MAX_REQUEST_BYTES)
    with pytest.raises(OSError) as caught:
        read_request(str(path))
    assert WHY[kind] in str(caught.value.strerror) and SECRET not in str(caught.value)


# -- a metrics log (summary, diff, the ledger) ------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(WHY))
def test_a_metrics_log(tmp_path: Path, kind: str) -> None:
    line = {"role": SECRET, "step": 1, "rank": 0, "stages": {}, "wall_s": 1.0}
    _make(kind, tmp_path / log_name(0, "h", 1), tmp_path, json.dumps(line) + "\n", metrics_log.MAX_LOG_BYTES)
    lines, problems = read_log_lines(tmp_path)
    assert lines == [] and len(problems) == 1 and WHY[kind] in problems[0], problems


# -- the manifest (every reading command; its bound: tests/test_bounded_reads.py) --------------------


@pytest.mark.parametrize("kind", ["link", "FIFO", "link to /dev/zero"])
def test_a_manifest(tmp_path: Path, kind: str) -> None:
    record = make_record("trace", "x.pt.trace.json.gz", role=SECRET, step=1, rank=0, world_size=1)
    (tmp_path / "elsewhere").mkdir()
    assert append_record(tmp_path / "elsewhere", record)
    folder = tmp_path / "run"
    folder.mkdir()
    if kind == "link":
        (folder / MANIFEST_NAME).symlink_to(tmp_path / "elsewhere" / MANIFEST_NAME)
    else:
        _make(kind, folder / MANIFEST_NAME, tmp_path, "", None)
    with pytest.raises(OSError) as caught:
        read_lines(folder)
    assert WHY[kind] in str(caught.value.strerror)


# -- a trace (every reading command; no bound on its size, an empty one refused) -----------------------


@pytest.mark.parametrize("kind", ["link", "FIFO", "link to /dev/zero", "empty"])
def test_a_trace(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x.pt.trace.json"
    if kind == "empty":
        path.write_bytes(b"")
    else:
        _make(kind, path, tmp_path, json.dumps({"traceEvents": [{"name": SECRET}]}), None)
    with pytest.raises(TraceError) as caught:
        open_trace(path)
    assert (WHY.get(kind) or kind) in str(caught.value) and SECRET not in str(caught.value)


def test_summary_skips_a_trace_that_is_a_link_and_says_why(tmp_path: Path) -> None:
    """Through the command line: the trace a link stands for is not read (its role, from a file
    elsewhere, never shown), the other trace is, and the link is named (exit 1)."""
    folder = tmp_path / "run"
    folder.mkdir()
    (tmp_path / "elsewhere").mkdir()
    for where, name, role in (
        (folder, "a.pt.trace.json.gz", "actor"),
        (tmp_path / "elsewhere", "b.pt.trace.json.gz", SECRET),
    ):
        trace = {
            "profdsl": {
                "role": role,
                "stage": None,
                "step": 1,
                "rank": 0,
                "world_size": 1,
                "regions": {"stages": ["update"]},
            },
            "distributedInfo": {"rank": 0, "world_size": 1},
            "baseTimeNanoseconds": 1_790_000_000_000_000_000,
            "traceEvents": [
                {"ph": "X", "cat": "user_annotation", "name": "update", "pid": 1, "tid": 1, "ts": 0, "dur": 5}
            ],
        }
        with gzip.open(where / name, "wt") as file:
            json.dump(trace, file)
    (folder / "b.pt.trace.json.gz").symlink_to(tmp_path / "elsewhere" / "b.pt.trace.json.gz")
    for name, role in (("a.pt.trace.json.gz", "actor"), ("b.pt.trace.json.gz", "actor")):
        assert append_record(folder, make_record("trace", name, role=role, step=1, rank=0, world_size=1, bytes=100))
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "b.pt.trace.json.gz" in done.stderr and "a link, not a regular file" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert {row["role"] for row in json.loads(done.stdout)} == {"actor"}


def test_every_reader_opens_through_the_one_rule() -> None:
    """No module but ``core/_files`` opens a file non-blocking itself (one home for the rule)."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "profdsl").rglob("*.py")
        if "O_NONBLOCK" in path.read_text() and path != ROOT / "profdsl" / "core" / "_files.py"
    ]
    assert offenders == []
