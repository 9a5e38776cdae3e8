"""examples/metrics_loop.py runs as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_metrics_loop_runs() -> None:
    pytest.importorskip("prometheus_client")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "metrics_loop.py"), "--steps", "3", "--prometheus"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["step 0", "step 1", "step 2"]
    assert all(
        "mini-batches 4" in line and "timing_s/update_actor/mini_batch/forward_backward" in line for line in lines[:3]
    )
    assert 'profdsl_stage_seconds_count{role="actor",stage="update_actor/mini_batch"} 3.0' in lines
