"""benchmarks/bench_cost.py refuses a count it cannot run with, by name, before any loop runs.

``--steps 0`` crashed with ZeroDivisionError after the whole run (the extra time per profiled
step divides by the steps), ``--repeat 0`` with a StatisticsError (a median of no runs) and
``--mini-batches 0`` with a ZeroDivisionError (the two sizes' ops were equal); ``--iterations 0``
was quietly run as 2. Each is now argparse's usage error (exit 2) naming the argument and value.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cost.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cost", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--steps", "0"),
        ("--steps", "-3"),
        ("--repeat", "0"),
        ("--mini-batches", "0"),
        ("--iterations", "0"),
        ("--iterations", "-1"),
        ("--steps", "2.5"),
        ("--repeat", "many"),
    ],
)
def test_a_count_below_one_is_a_usage_error(
    flag: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _bench()
    ran: list[Any] = []

    def loop(*args: Any) -> float:
        ran.append(args)
        return 1.0

    # No loop, no child process: the refusal comes before any of them (and on a defect the
    # crash comes quickly).
    monkeypatch.setattr(bench, "loop", loop)
    monkeypatch.setattr(bench, "first_session", lambda *a: [])
    monkeypatch.setattr(bench, "records", lambda *a: [])
    with pytest.raises(SystemExit) as stopped:
        bench.main([flag, value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and repr(value) in err, err
    assert ran == []


def test_counts_of_one_are_accepted(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The smallest counts run (the loop stubbed): one step, one repeat, one mini-batch, one iteration."""
    bench = _bench()
    monkeypatch.setattr(bench, "loop", lambda folder, mode, steps, batches, n: 1.0 + n * (mode != bench.BASELINE))
    monkeypatch.setattr(bench, "first_session", lambda *a: [])
    monkeypatch.setattr(bench, "records", lambda *a: [])
    assert bench.main(["--steps", "1", "--repeat", "1", "--mini-batches", "1", "--iterations", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 steps x 1 mini-batches" in out and "Traceback" not in out
