"""``profdsl summary`` reads each metrics log once: the step wall times (or the ledger) and the
log's bad lines come from the same read, so they cannot disagree (a log appended between two
reads named lines whose walls were never shown, or showed walls whose bad lines went unnamed).

``--cost`` and ``--stragglers`` read no metrics log (the manifest's records; the traces): they read
none here either.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli
from profdsl.collect import metrics_log
from profdsl.collect._manifest import append_record, make_record
from profdsl.collect.metrics_log import log_name

BASE_NS = 1_790_000_000_000_000_000
GOOD = {"role": "actor", "step": 1, "rank": 0, "stages": {}, "wall_s": 0.002, "began_s": 1.79e9}
LEDGER = {"ledger": {"update": 0.001, "outside": 0.001}, "ledger_spans": {"update": [[0.0, 0.001]]}}


def _folder(tmp_path: Path) -> Path:
    """A traced step of rank 0 and a metrics log of that step, with a bad line (line 2)."""
    trace = {
        "profdsl": {"role": "actor", "stage": None, "step": 1, "rank": 0, "world_size": 1,
                    "regions": {"stages": ["update_actor"]}},
        "distributedInfo": {"rank": 0, "world_size": 1},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "update_actor", "pid": 1, "tid": 1, "ts": 200, "dur": 800}
        ],
    }  # fmt: skip
    name = "a.pt.trace.json.gz"
    with gzip.open(tmp_path / name, "wt") as file:
        json.dump(trace, file)
    size = (tmp_path / name).stat().st_size
    assert append_record(tmp_path, make_record("trace", name, role="actor", step=1, rank=0, world_size=1, bytes=size))
    (tmp_path / log_name(0, "h", 1)).write_text(json.dumps({**GOOD, **LEDGER}) + "\nnot json\n")
    return tmp_path


@pytest.mark.parametrize(
    "view", [[], ["--json"], ["--csv"], ["--by", "step,rank"], ["--ledger"], ["--ledger", "--json"]]
)
def test_summary_reads_each_metrics_log_once(
    tmp_path: Path, reads: Counter[str], view: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    assert profdsl._cli.main(["summary", str(folder), *view]) == 1
    err = capsys.readouterr().err
    assert f"{folder / log_name(0, 'h', 1)} line 2: not JSON" in err, err
    assert dict(reads) == {str(folder / log_name(0, "h", 1)): 1}


def test_the_ledger_of_a_folder_of_metrics_logs_only_reads_each_once(
    tmp_path: Path, reads: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / log_name(0, "h", 1)).write_text(json.dumps({**GOOD, **LEDGER}) + "\nnot json\n")
    assert profdsl._cli.main(["summary", str(tmp_path), "--ledger"]) == 1
    assert "line 2: not JSON" in capsys.readouterr().err
    assert dict(reads) == {str(tmp_path / log_name(0, "h", 1)): 1}


def test_a_line_appended_after_the_read_is_neither_shown_nor_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log grows a bad line right after it is read: the run's output is that of one read
    (the good line's wall time shown, nothing named, exit 0), never the walls of one read and
    the bad lines of another."""
    folder = _folder(tmp_path)
    path = folder / log_name(0, "h", 1)
    path.write_text(json.dumps(GOOD) + "\n")
    real = metrics_log.read_regular

    def read_then_grow(name: str, **bound: Any) -> bytes:
        data = real(name, **bound)
        with open(name, "a") as file:
            file.write("not json\n")
        return data

    monkeypatch.setattr(metrics_log, "read_regular", read_then_grow)
    assert profdsl._cli.main(["summary", str(folder), "--by", "step,rank", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "not JSON" not in err, err
    assert json.loads(out)[0]["step_ms"] == 2.0


@pytest.mark.parametrize("view", [["--cost"], ["--cost", "--json"], ["--stragglers"], ["--stragglers", "--json"]])
def test_cost_and_stragglers_read_no_metrics_log(
    tmp_path: Path, reads: Counter[str], view: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    assert profdsl._cli.main(["summary", str(folder), *view]) == 0
    assert "not JSON" not in capsys.readouterr().err
    assert reads == Counter()
