"""benchmarks/bench_export.py runs end to end in quick mode.

    .venv/bin/python -m pytest tests/test_bench_export.py

Its timings are for people to read, never asserted (CI machines are noisy; no ``--check``): the test
checks that the script exits 0, prints a row for every measurement, that every profdsl trace was
complete and valid once ``close()`` returned, and that the RSS run wrote one trace per window.
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
SCRIPT = ROOT / "benchmarks" / "bench_export.py"
ROWS = (
    "floor: torch prof.stop() alone, no export",
    "baseline: torch tensorboard_trace_handler(use_gzip=True)",
    "profdsl continuous: stop() of a mid-run step",
    "profdsl continuous: stop() of the last profiled step",
    "profdsl discrete: stage exit + stop()",
    "then close() (waits for exports): continuous, mid-run step",
    "then close() (waits for exports): continuous, last profiled step",
    "then close() (waits for exports): discrete",
)


@pytest.mark.timeout(300)
def test_bench_export_quick() -> None:
    """--quick: every row measured with a ratio to the baseline, completeness passes, RSS reported."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for line in ("date:", "cpus:", "torch:", "workload:"):
        assert line in text
    for row in ROWS:
        lines = [ln for ln in text.splitlines() if ln.startswith(row)]
        assert len(lines) == 1, f"no table row for {row}:\n{text}"
        cells = re.split(r"\s{2,}", lines[0][len(row) :].strip())
        assert float(cells[0]) >= 0 and float(cells[1]) >= 0, cells  # median s, min s
        assert cells[2].endswith("x"), cells  # the ratio to the baseline
        float(cells[2][:-1])
    assert text.count("<= 0.25x") == 2  # the bar, on the two rows it applies to
    match = re.search(r"^completeness: (\w+) \((\d+) of (\d+) profdsl traces", text, re.M)
    assert match and match.group(1) == "pass" and match.group(2) == match.group(3) == "3", text
    rss = re.search(r"^RSS, 10 profiled windows .* \((\d+) traces\): .* ratio (\d+\.\d+)x", text, re.M)
    assert rss and rss.group(1) == "10" and float(rss.group(2)) > 0, text
    assert re.search(r"^bars: ", text, re.M)
