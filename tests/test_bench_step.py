"""benchmarks/bench_step.py runs end to end with one process per mode.

Its timings are for people to read, never asserted: the test checks that the script exits 0,
prints a row for every mode with its ratio to the floor, the goal line, the phases and that
profdsl's traces were recorded ``ok``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_step.py"


@pytest.mark.timeout(300)
def test_bench_step_quick() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for mode in ("floor", "by hand", "profdsl"):
        assert re.search(rf"^{mode} +\d+\.\d+ +[+-]\d+\.\d+ +-?\d+\.\d+x$", text, re.M), text
    assert re.search(r"^unprofiled +\d+\.\d+$", text, re.M), text
    assert re.search(r"^profdsl's added time over the floor's: -?\d+\.\d+x \(goal <= 1\.5x (ok|OVER)\)$", text, re.M)
    assert "where profdsl's added time goes" in text and "sum of phases" in text
    assert re.search(r"^profdsl's traces: 2 record\(s\), status ok;", text, re.M), text
