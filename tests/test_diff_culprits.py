"""``profdsl diff`` names each run's culprits at collectives where both runs are traced
(``profdsl.analysis.culprits``): hand-made folders whose late rank is known."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from profdsl.analysis.culprits import NO_COLLECTIVE
from profdsl.collect._manifest import append_record, make_record

ROOT = Path(__file__).resolve().parent.parent


def _folder(folder: Path, late: int | None, collectives: bool = True) -> Path:
    """Steps 1 and 2 of 3 ranks: update_actor [0, 1000) µs holding one all_reduce each that ends
    at 700; every rank arrives at 100, but ``late`` arrives at 600 (rank 0 waits 600 µs, the
    late one 100: late by 500)."""
    folder.mkdir()
    for step in (1, 2):
        for rank in range(3):
            start = 600 if rank == late else 100
            events: list[dict[str, Any]] = [
                {"ph": "X", "cat": "user_annotation", "name": "update_actor", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}
            ]
            if collectives:
                events.append(
                    {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9,
                     "ts": start, "dur": 700 - start}
                )  # fmt: skip
            trace = {
                "profdsl": {"role": "actor", "step": step, "rank": rank, "world_size": 3,
                            "regions": {"stages": ["update_actor"]}},
                "distributedInfo": {"rank": rank, "world_size": 3},
                "baseTimeNanoseconds": 1_790_000_000_000_000_000,
                "traceEvents": events,
            }  # fmt: skip
            name = f"s{step}r{rank}.pt.trace.json.gz"
            with gzip.open(folder / name, "wt") as file:
                json.dump(trace, file)
            record = make_record(
                "trace", name, role="actor", step=step, rank=rank, world_size=3, bytes=(folder / name).stat().st_size
            )
            assert append_record(folder, record)
    return folder


def _diff(a: Path, b: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "diff", str(a), str(b), "--late-ms", "0.2", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_diff_names_each_runs_culprit(tmp_path: Path) -> None:
    a, b = _folder(tmp_path / "a", late=1), _folder(tmp_path / "b", late=2)
    done = _diff(a, b)
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("culprits at collectives (both runs traced", 1)[1].splitlines()
    assert section[1] == "  A: actor update_actor: rank 1 at steps 1, 2 (0.500 ms over the median rank at most)"
    assert section[2] == "  B: actor update_actor: rank 2 at steps 1, 2 (0.500 ms over the median rank at most)"
    data = json.loads(_diff(a, b, "--json").stdout)
    assert [s["culprit"] for s in data["culprits"]["a"]["blamed"]] == [1, 1]
    assert [s["culprit"] for s in data["culprits"]["b"]["blamed"]] == [2, 2]
    assert data["rows"]  # the comparison itself is unchanged


def test_diff_says_why_a_run_has_no_culprit(tmp_path: Path) -> None:
    """No rank late in B: said; no collective in B: said why wall time cannot tell; a negative
    --late-ms: a usage error."""
    a = _folder(tmp_path / "a", late=1)
    on_time = _folder(tmp_path / "b", late=None)
    assert "  B: no rank stands out" in _diff(a, on_time).stdout
    silent = _folder(tmp_path / "c", late=None, collectives=False)
    assert f"  B: {NO_COLLECTIVE}" in _diff(a, silent).stdout
    refused = _diff(a, on_time, "--late-ms", "-1")
    assert refused.returncode == 2 and "--late-ms" in refused.stderr


def test_a_captures_follow_up_names_the_culprit_or_says_why_not(tmp_path: Path) -> None:
    """The follow-up line of a capture an alert asked for (``follow_up``): the culprit its traces
    name, or no rank standing out, or no collective (wall time cannot tell), or no trace here."""
    from profdsl.analysis.culprits import follow_up

    late = _folder(tmp_path / "late", late=2)
    assert follow_up(late, 2, threshold_ms=0.2) == [
        "step 2's capture names the culprit, not its victims: actor update_actor: rank 2 at step 2 "
        "(0.500 ms over the median rank at most)"
    ]
    assert follow_up(late, 2, threshold_ms=0.2, missing={3})[0].startswith(
        "step 2's capture (no trace of rank(s) 3 written yet) names the culprit, not its victims: "
    )
    assert follow_up(late, 2, threshold_ms=1.0)[0].startswith(
        "step 2's capture: at its collectives no rank arrived last by 1 ms over the median rank"
    )
    silent = _folder(tmp_path / "silent", late=None, collectives=False)
    assert follow_up(silent, 1) == [f"step 1's capture: {NO_COLLECTIVE}"]
    assert "no trace of it is readable here" in follow_up(late, 7)[0]
    assert "no trace of it is readable here" in follow_up(tmp_path / "missing", 1)[0]


def test_a_follow_up_waits_for_the_traced_ranks_traces(tmp_path: Path) -> None:
    """``await_traces``: until every traced rank has a trace record of the step and they stop
    changing; the ranks still missing when it gives up."""
    import threading

    from profdsl.analysis.culprits import await_traces

    folder = _folder(tmp_path / "run", late=2)  # steps 1 and 2 of ranks 0-2 are recorded

    def late_record() -> None:
        import time

        time.sleep(0.5)
        assert append_record(folder, make_record("trace", "s2r3.pt.trace.json.gz", role="actor", step=2, rank=3))

    writer = threading.Thread(target=late_record)
    writer.start()
    try:
        assert await_traces(folder, 2, {0, 1, 2, 3}, timeout_s=60, settle_s=0.2) == set()
    finally:
        writer.join(timeout=60)
    assert await_traces(folder, 2, {0, 5}, timeout_s=0.5, settle_s=0.1) == {5}


def test_the_culprits_follow_the_table_after_an_empty_line(tmp_path: Path) -> None:
    """The section's heading is a line of its own after an empty one: it printed ``\\nculprits
    at collectives ...`` on the table's last line's heels, the newline escaped as every printed
    line's control characters are."""
    done = _diff(_folder(tmp_path / "a", late=1), _folder(tmp_path / "b", late=2))
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "culprits at collectives" in line)
    assert lines[at].startswith("culprits at collectives (both runs traced") and lines[at - 1] == "", lines
    assert "\\n" not in done.stdout
