"""Never silently empty: a schedule that records no window over a stage's (or a continuous
step's) mini-batches says so once in the log, records it in the manifest, and ``check`` names it;
``plan`` warns before the run. The README's ``Schedule(wait=1, warmup=1, active=2)`` over 2
mini-batches is the case users met."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import profdsl._cli
from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage

from .profiling import config, records, work

pytest.importorskip("torch")

README = Schedule(wait=1, warmup=1, active=2)


def _run(folder: Path, *, discrete: bool, mini_batches: int, steps: int = 2) -> None:
    cfg = config(
        folder,
        discrete=discrete,
        steps=list(range(1, steps + 1)),
        torch=TorchOptions(contents=["cpu"], schedule=README),
    )
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    with profiler:
        for step in range(1, steps + 1):
            with profiler.step(step), profile_stage("update_actor", scheduled=True):
                for _ in mini_batch_window(range(mini_batches)):
                    work()


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_no_window_is_said_recorded_and_checked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], discrete: bool
) -> None:
    folder = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        _run(folder, discrete=discrete, mini_batches=2)
    said = [r.getMessage() for r in caplog.records if "recorded no window" in r.getMessage()]
    assert len(said) == 1, said
    line = said[0]
    assert "actor" in line and "update_actor" in line and "2 mini-batches" in line
    assert "wait=1" in line and "warmup=1" in line and "active=2" in line
    empty = [r for r in records(folder, "trace") if r["status"] == "empty"]
    assert [r["step"] for r in empty] == [1, 2]
    assert all("recorded no window" in r["reason"] for r in empty)
    capsys.readouterr()
    assert profdsl._cli.main(["check", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out.count("recorded no window") == 2 and "all well" not in out


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_a_schedule_that_records_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture, discrete: bool) -> None:
    folder = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        _run(folder, discrete=discrete, mini_batches=4)
    assert "recorded no window" not in caplog.text
    assert not [r for r in records(folder, "trace") if r["status"] == "empty"]


def test_plan_warns_whatever_the_mini_batch_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("enable: true\nsteps: [1]\ndiscrete: true\ntorch:\n  schedule: {wait: 1, warmup: 1, active: 2}\n")
    assert profdsl._cli.main(["plan", str(cfg), "--world-size", "1", "--mini-batches", "2"]) == 0
    out = capsys.readouterr().out
    assert "warning: over 2 mini-batches the schedule records no window" in out
    assert profdsl._cli.main(["plan", str(cfg), "--world-size", "1"]) == 0  # the default count: the bound is still said
    out = capsys.readouterr().out
    assert "warning: a stage of fewer than 3 mini-batches records no window under this schedule" in out
