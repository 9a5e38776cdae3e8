"""``profdsl diff`` on two folders written by real runs with one known injected change: it comes
first, called slower, and the untouched stages are called unchanged (from the metrics logs), or
at least it comes first (from the traces, real times)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from profdsl import Metrics, Profiler, profile_stage
from profdsl._cli import main
from profdsl._runtime.process import PROCESS

from .metrics_support import FakeClock, fake_clock
from .profiling import config, work

pytest.importorskip("torch")

#: Each untouched stage's seconds per step: a pattern over three steps, as a steady run jitters.
JITTER = (0.0, 0.001, 0.002)


def logged_run(folder: Path, clock: FakeClock, *, update_s: float, shift: int) -> None:
    """12 untraced steps of actor (update_actor, compute_log_prob) and ref (compute_ref_log_prob)
    on two ranks, every step in the metrics log; ``update_s`` is update_actor's base time."""
    cfg = config(folder, steps=[], metrics=Metrics(enabled=True, log=True))
    profilers = [
        (Profiler(cfg, role=role, rank=rank, world_size=2), role) for rank in (0, 1) for role in ("actor", "ref")
    ]
    for step in range(12):
        jitter = JITTER[(step + shift) % 3]
        for profiler, role in profilers:
            with profiler.step(step):
                if role == "actor":
                    with profile_stage("update_actor", profiler=profiler):
                        clock.advance(update_s + jitter)
                    with profile_stage("compute_log_prob", profiler=profiler):
                        clock.advance(0.004 + jitter)
                else:
                    with profile_stage("compute_ref_log_prob", profiler=profiler):
                        clock.advance(0.003 + jitter)
    for profiler, _ in profilers:
        profiler.close()
    assert PROCESS.writer.wait(timeout=60)


def rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["diff", *args, "--json"]) == 0
    return list(json.loads(capsys.readouterr().out)["rows"])


def test_from_the_metrics_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """B's update_actor takes 30 ms more per step; every other stage is the same (its jitter in
    another order): update_actor first and slower, the others unchanged, n = 24 (12 steps, 2
    ranks) from the logs."""
    a, b = tmp_path / "a", tmp_path / "b"
    with fake_clock(monkeypatch) as clock:
        logged_run(a, clock, update_s=0.010, shift=0)
        logged_run(b, clock, update_s=0.040, shift=1)
    found = rows(capsys, str(a), str(b))
    assert [(r["role"], r["stage"], r["verdict"]) for r in found][0] == ("actor", "update_actor", "slower")
    assert found[0]["change_s"] == pytest.approx(0.030)
    assert {(r["role"], r["stage"]): r["verdict"] for r in found[1:]} == {
        ("actor", "compute_log_prob"): "unchanged",
        ("ref", "compute_ref_log_prob"): "unchanged",
    }
    assert all(r["a"]["n"] == 24 and r["b"]["n"] == 24 for r in found)  # type: ignore[index]
    # the table says the same, with the method and the counts; the plot is drawn
    plot = tmp_path / "change.png"
    assert main(["diff", str(a), str(b), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "samples from the metrics logs" in lines[0] and lines[1].startswith("noise: 2 x the standard error")
    assert "1 of 3 stage(s) changed beyond it" in lines[1]
    first = lines[5].split()
    assert first[:2] == ["actor", "update_actor"] and first[-1] == "slower" and "(n 24/24)" in lines[5]
    assert plot.stat().st_size > 0


def test_from_the_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No metrics logs: the traces of steps 0-3, real times. B's update_actor sleeps 50 ms more
    a step: it comes first, slower."""
    for folder, pause in ((tmp_path / "a", 0.0), (tmp_path / "b", 0.05)):
        profiler = Profiler(config(folder, steps=[0, 1, 2, 3], discrete=True), role="actor", rank=0, world_size=1)
        for step in range(4):
            with profiler.step(step):
                with profile_stage("update_actor", profiler=profiler):
                    work()
                    time.sleep(pause)
                with profile_stage("compute_log_prob", profiler=profiler):
                    work()
        profiler.close()
    found = rows(capsys, str(tmp_path / "a"), str(tmp_path / "b"))
    assert (found[0]["role"], found[0]["stage"], found[0]["verdict"]) == ("actor", "update_actor", "slower")
    assert found[0]["change_s"] > 0.04  # type: ignore[operator]
    assert {r["stage"] for r in found} == {"update_actor", "compute_log_prob"}
    assert all(r["a"]["n"] == 4 for r in found)  # type: ignore[index]
