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
    # One process per mode on a loaded machine can leave the floor's added time at 0 or less:
    # then there is no ratio, and the script says so instead of printing one.
    floor = float(re.search(r"^floor +\d+\.\d+ +([+-]\d+\.\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    ratio = r"-?\d+\.\d+x" if floor > 0 else "-"
    for mode in ("floor", "by hand", "profdsl"):
        assert re.search(rf"^{mode} +\d+\.\d+ +[+-]\d+\.\d+ +{ratio}$", text, re.M), text
    assert re.search(r"^unprofiled +\d+\.\d+$", text, re.M), text
    goal = r"-?\d+\.\d+x \(goal <= 1\.5x (ok|OVER)\)"
    if floor <= 0:
        goal = r"- \(the floor added [+-]\d+\.\d+ s, .*no ratio"
    assert re.search(rf"^profdsl's added time over the floor's: {goal}", text, re.M), text
    assert "inf" not in text and "nan" not in text, text
    assert "where profdsl's added time goes" in text and "sum of phases" in text
    assert re.search(r"^profdsl's traces: 2 record\(s\), status ok;", text, re.M), text


def test_a_floor_within_the_noise_gives_no_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    """Where the floor's median added nothing over the unprofiled one (seen with one process per
    mode on a loaded machine), the script printed ``infx`` and a floor row without its ratio;
    now every ratio is ``-`` and the goal line says there is none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_step", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    medians = {"unprofiled": 0.089, "floor": 0.085, "floor + JSON": 0.113, "by hand": 0.209, "profdsl": 0.114}
    assert bench.report(medians, tuple(medians), 1) is False
    text = capsys.readouterr().out
    assert "inf" not in text
    for mode in ("floor", "by hand", "profdsl"):
        assert re.search(rf"^{mode} +\d+\.\d+ +[+-]\d+\.\d+ +-$", text, re.M), text
    assert re.search(r"^profdsl's added time over the floor's: - \(the floor added -0\.004 s, .*no ratio", text, re.M)
    medians["floor"] = 0.099  # a floor above the noise: its ratio, as before
    assert bench.report(medians, tuple(medians), 1) is False
    text = capsys.readouterr().out
    assert re.search(r"^profdsl +0\.114 +\+0\.025 +2\.50x$", text, re.M), text
    assert re.search(r"^profdsl's added time over the floor's: 2\.50x \(goal <= 1\.5x OVER\)$", text, re.M), text


def test_a_floor_that_prints_as_zero_gives_no_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    """A floor of +0.0003 s is printed as ``+0.000``: a ratio over it (hundreds of x) was printed
    beside it, and the quick test, reading the printed floor, expected none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_step", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    medians = {"unprofiled": 0.089, "floor": 0.0893, "floor + JSON": 0.113, "by hand": 0.209, "profdsl": 0.114}
    assert bench.report(medians, tuple(medians), 1) is False
    text = capsys.readouterr().out
    assert re.search(r"^floor +0\.089 +\+0\.000 +-$", text, re.M), text
    assert re.search(r"^profdsl +0\.114 +\+0\.025 +-$", text, re.M), text
    assert re.search(r"^profdsl's added time over the floor's: - \(the floor added \+0\.000 s, .*no ratio", text, re.M)


def test_the_fastest_ratios_need_a_floor_above_the_noise(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_step", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    runs = {mode: [{"seconds": s}] for mode, s in (("unprofiled", 0.089), ("floor", 0.0892), ("profdsl", 0.114))}
    bench.print_fastest(runs)
    assert capsys.readouterr().out == ""
    runs["floor"] = [{"seconds": 0.099}]
    bench.print_fastest(runs)
    assert "profdsl 2.50x" in capsys.readouterr().out
