"""The benchmark script runs (its figures are read by people, never asserted: no timed tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_bench_dsl_runs_quick() -> None:
    """bench_dsl.py --quick prints every row and every target ratio."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_dsl.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    for row in (
        "bare call",
        "with profile_stage, active profiler",
        "raw record_function, active profiler",
        "mini_batch_window extra ns per item",
        "with profile_stage, metrics on",
        "@profile_stage - pass-through wrapper (metrics on)",
        "traced memory, metered steps",
    ):
        assert row in out.stdout
    assert out.stdout.count("(<= ") == 8


def test_bench_verl_facade_runs_quick() -> None:
    """bench_verl_facade.py --quick prints every row and ratio."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_verl_facade.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    for row in (
        "@DistProfiler.annotate, not profiled",
        "@DistProfiler.annotate, profiled",
        "DistProfiler.step(), profiled",
        "step() / mini_batch_window item, profiled",
    ):
        assert row in out.stdout
    assert out.stdout.count("x\n") >= 4


def test_bench_on_demand_runs_quick() -> None:
    """bench_on_demand.py --quick prints the baseline, both checked forms with their ratio, and
    the bare stat."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_on_demand.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    for row in (
        "on-demand off (baseline)",
        "on-demand on, no request folder",
        "on-demand on, folder unchanged",
        "os.stat of the request folder alone",
    ):
        assert row in out.stdout
    assert out.stdout.count("x  (<= +10000 ns) ") == 2


def test_bench_cost_runs_quick() -> None:
    """bench_cost.py --quick prints the baseline and each profiled loop with its ratio and fixed
    cost, the records' parts for each, and the first session's init from a fresh process."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_cost.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for row, fixed in (
        ("baseline: no step profiled", None),
        ("continuous: every step profiled", "ms per step"),
        ("discrete: every step's stage profiled", "ms per step"),
        ("windows: every mini-batch a window", "ms per window"),
    ):
        (line,) = [ln for ln in lines if ln.startswith(row)]
        assert "x " in line + " " and (fixed is None or fixed in line), line
    for mode in ("continuous", "discrete", "windows"):
        (line,) = [ln for ln in lines if ln.strip().startswith(mode + " ")]
        assert len(line.split()) == 7 and "-" not in line.split()[1:], line  # every part recorded
    (first,) = [ln for ln in lines if ln.startswith("first session in a fresh process: init_ms ")]
    assert "init_ms -" not in first and first.count(",") == 1, first
