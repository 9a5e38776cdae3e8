"""benchmarks/bench_reader.py runs end to end on a small trace.

    .venv/bin/python -m pytest tests/test_bench_reader.py

Its figures are for people to read, never asserted (CI machines are noisy): the test checks that the
script exits 0, prints a table row per method and reports that the event counts agree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_reader.py"
ROWS = ("json.load (.json)", "events() (.json)", "events() (.json.gz)", "header() (.json.gz)")


@pytest.mark.timeout(600)
def test_bench_reader_small(tmp_path: Path) -> None:
    """A 5 MB run: every method measured, counts agree, generated files cleaned up."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--size-mb", "5", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for line in ("cpus:", "python:", "ijson:"):
        assert line in text
    x_counts = set()
    for row in ROWS:
        lines = [ln for ln in text.splitlines() if ln.startswith(row)]
        assert len(lines) == 1, f"no table row for {row}:\n{text}"
        cells = re.split(r"\s{2,}", lines[0].strip())
        assert len(cells) == 6, cells
        float(cells[1])  # wall s
        assert float(cells[3]) >= 0  # peak RSS MB
        if row.startswith("header()"):
            assert cells[2].startswith("n/a")
        else:
            float(cells[2])  # MB/s
            x_counts.add(int(cells[5]))
    assert len(x_counts) == 1 and x_counts.pop() > 0
    assert "counts agree:" in text and "MISMATCH" not in text
    assert list(tmp_path.iterdir()) == []  # no --keep: the trace files are gone


@pytest.mark.timeout(600)
def test_bench_reader_summary_small(tmp_path: Path) -> None:
    """``--summary`` on a tiny folder: the three commands are timed, the summary is exact and
    its peak RSS is reported (no bar asserted: a tiny folder is all interpreter start)."""
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--summary",
            "--traces",
            "2",
            "--size-mb",
            "2",
            "--memory-mb",
            "3",
            "--repeat",
            "1",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for row in ("zcat (the floor)", "json.load, one file after another", "profdsl summary DIR --json"):
        (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith(row)]
        float(re.split(r"\s{2,}", line.strip())[1])
    assert "exact: yes" in out.stdout and re.search(
        r"peak RSS of profdsl summary on one 3 MB trace .*: \d+ MB", out.stdout
    )
