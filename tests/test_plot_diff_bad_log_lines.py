"""``profdsl plot`` and ``profdsl diff --source traces`` name the metrics logs' bad lines, as
``summary`` does: from the one read of the logs the command used (each log read once), each line
escaped and bounded (``_cli/common.skipped``), exit 1. They skipped a truncated, garbled or
hostile line silently. A log whose every line is bad is said to be so, line by line (a few, then
a count), never an empty picture or table without a word."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

import profdsl._cli
from profdsl import Metrics, Profiler, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.collect import metrics_log

from .profiling import config, work

#: A line a hostile writer planted: not JSON, with a terminal escape in it.
HOSTILE = '{"role": "\x1b[2J\x07actor", "step": '


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real capture (the CPU torch profiler): actor rank 0, steps 1 and 2 traced, with the
    metrics log (``Metrics(log=True)``) of steps 0 to 2."""
    from profdsl.testing import reset as reset_for_tests

    folder = tmp_path_factory.mktemp("run")
    reset_for_tests()
    try:
        cfg = config(folder, steps=[1, 2], discrete=True, metrics=Metrics(enabled=True, log=True))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        for step in range(3):
            with profiler.step(step):
                with profile_stage("update_actor", profiler=profiler):
                    work()
        profiler.close()
        assert PROCESS.writer.wait(timeout=60)
    finally:
        reset_for_tests()
    assert len(metrics_log.log_files(folder)) == 1 and list(folder.glob("*.json.gz"))
    return folder


def _copy(captured: Path, into: Path, *, every_line_bad: bool = False) -> tuple[Path, Path]:
    """A private copy of the capture whose metrics log ends with a truncated line and a hostile
    one (or holds nothing else): the copy and its log."""
    folder = Path(shutil.copytree(captured, into))
    (name,) = metrics_log.log_files(folder)
    log = folder / name
    kept = "" if every_line_bad else log.read_text()
    log.write_text(kept + '{"role": "actor", "st\n' + HOSTILE + "\n")
    return folder, log


def _named(err: str, log: Path, lines: range) -> None:
    for number in lines:
        assert f"{log} line {number}: not JSON" in err, err
    assert "\x1b" not in err and "\x07" not in err


@pytest.mark.parametrize("view", [[], ["--timeline"], ["--ledger"]])
def test_plot_names_the_metrics_logs_bad_lines_from_its_one_read(
    captured: Path, tmp_path: Path, reads: Counter[str], view: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, log = _copy(captured, tmp_path / "run")
    good = len(log.read_text().splitlines()) - 2
    image = tmp_path / "out.png"
    assert profdsl._cli.main(["plot", str(folder), "-o", str(image), *view]) == 1
    out, err = capsys.readouterr()
    assert out.strip() == str(image) and image.stat().st_size > 0  # drawn all the same
    _named(err, log, range(good + 1, good + 3))
    assert dict(reads) == {str(log): 1}


def test_diff_from_the_traces_names_the_metrics_logs_bad_lines_from_its_one_read(
    captured: Path, tmp_path: Path, reads: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    a, log = _copy(captured, tmp_path / "a")
    b = Path(shutil.copytree(captured, tmp_path / "b"))
    good = len(log.read_text().splitlines()) - 2
    assert profdsl._cli.main(["diff", str(a), str(b), "--source", "traces", "--json"]) == 1
    out, err = capsys.readouterr()
    assert {row["stage"] for row in json.loads(out)["rows"]} == {"update_actor"}
    _named(err, log, range(good + 1, good + 3))
    (log_b,) = metrics_log.log_files(b)
    assert dict(reads) == {str(log): 1, str(b / log_b): 1}


@pytest.mark.parametrize("view", [[], ["--ledger"]])
def test_plot_says_a_metrics_log_of_bad_lines_only_is_so(
    captured: Path, tmp_path: Path, view: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, log = _copy(captured, tmp_path / "run", every_line_bad=True)
    assert profdsl._cli.main(["plot", str(folder), "-o", str(tmp_path / "out.png"), *view]) == 1
    _named(capsys.readouterr().err, log, range(1, 3))


def test_plot_of_a_folder_of_a_bad_metrics_log_only_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No trace, no manifest, a metrics log of bad lines: the ledger has nothing to draw, and the
    lines are named, not only "no metrics log has one"."""
    log = tmp_path / metrics_log.log_name(0, "h", 1)
    log.write_text('{"role": "actor", "st\n' + HOSTILE + "\n")
    assert profdsl._cli.main(["plot", str(tmp_path), "-o", str(tmp_path.parent / "out.png"), "--ledger"]) == 1
    err = capsys.readouterr().err
    _named(err, log, range(1, 3))
    assert "no step has a ledger" in err


@pytest.mark.parametrize("source", ["traces", "auto"])
def test_diff_says_a_metrics_log_of_bad_lines_only_is_so(
    captured: Path, tmp_path: Path, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, log = _copy(captured, tmp_path / "a", every_line_bad=True)
    b = Path(shutil.copytree(captured, tmp_path / "b"))
    assert profdsl._cli.main(["diff", str(a), str(b), "--source", source]) == 1
    out, err = capsys.readouterr()
    _named(err, log, range(1, 3))
    assert out.strip()  # the comparison is printed all the same


@pytest.mark.parametrize("source", ["log", "auto"])
def test_diff_says_a_run_whose_logs_hold_no_valid_line_shows_only_the_other(
    captured: Path, tmp_path: Path, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every stage shows as "only in B" when A's metrics logs hold no valid line: said, not left
    for the reader to take for stages A never ran."""
    a, _ = _copy(captured, tmp_path / "a", every_line_bad=True)
    b = Path(shutil.copytree(captured, tmp_path / "b"))
    assert profdsl._cli.main(["diff", str(a), str(b), "--source", source]) == 1
    out, err = capsys.readouterr()
    assert "only in B" in out
    said = f"profdsl diff: A ({a}) holds no stage time in the metrics logs (every step): every stage shows as only in B"
    assert said + "; --source traces compares their traces" in err, err


def test_diff_of_two_runs_whose_logs_hold_no_valid_line_says_where_it_looked(
    captured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both runs are traced: "neither run holds stage times" named the logs it read and the way to
    the traces, not "(Metrics(log=True) or traces)"."""
    a, _ = _copy(captured, tmp_path / "a", every_line_bad=True)
    b, _ = _copy(captured, tmp_path / "b", every_line_bad=True)
    assert profdsl._cli.main(["diff", str(a), str(b)]) == 2  # nothing to compare (docs/cli.md)
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "profdsl: diff: neither run holds stage times in the metrics logs (every step); "
        "--source traces compares their traces"
    )
