"""Every benchmark refuses a count it cannot run with, by name, before it runs anything.

``bench_step.py --steps 0`` was quietly run as 3 steps and ``--repeat 0`` as the default 5;
``bench_export.py --ops 0`` as the default 50,000 ops and ``--ops -5`` as a window of no op;
``bench_reader.py --traces 0`` wrote a folder of no trace. Each now takes its counts with the
benchmarks' one count type (``benchmarks/_args.count``, as ``bench_cost.py`` did): argparse's usage
error (exit 2) naming the argument and the value.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, bench)  # for its dataclasses
    spec.loader.exec_module(bench)
    return bench


class RanError(Exception):
    """The benchmark went past its arguments."""


def _ran() -> list[str]:
    raise RanError


@pytest.mark.parametrize(
    ("name", "flag", "value"),
    [
        ("bench_step", "--steps", "0"),
        ("bench_step", "--repeat", "0"),
        ("bench_step", "--repeat", "-2"),
        ("bench_export", "--ops", "0"),
        ("bench_export", "--ops", "-5"),
        ("bench_export", "--repeat", "0"),
        ("bench_export", "--windows", "0"),
        ("bench_export", "--window-ops", "0"),
        ("bench_reader", "--repeat", "0"),
        ("bench_reader", "--traces", "0"),
    ],
)
def test_a_count_below_one_is_a_usage_error(
    name: str, flag: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _bench(name, monkeypatch)
    monkeypatch.setattr(bench, "machine_info", _ran)  # the first thing each run does
    extra = ["--summary"] if flag == "--traces" else []
    with pytest.raises(SystemExit) as stopped:
        bench.main([*extra, flag, value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and repr(value) in err, err


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("bench_step", ["--steps", "1", "--repeat", "1"]),
        ("bench_export", ["--ops", "1", "--repeat", "1", "--windows", "1", "--window-ops", "1"]),
        ("bench_reader", ["--summary", "--repeat", "1", "--traces", "1"]),
    ],
)
def test_counts_of_one_are_accepted(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(name, monkeypatch)
    monkeypatch.setattr(bench, "machine_info", _ran)
    with pytest.raises(RanError):
        bench.main(args)
