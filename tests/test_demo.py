"""`profdsl demo`, as the README runs it, in both modes (real subprocesses; Ray for --ray)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from profdsl.manifest import read_manifest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")


@pytest.mark.parametrize("mode", ["local", "ray"])
def test_demo(tmp_path: Path, mode: str) -> None:
    """The demo profiles steps 2 and 3 of 0..4 on rank 0: each stage's trace, the scheduled
    update's window, replica 0's rollout trace, one hook run that packs the folder."""
    if mode == "ray":
        pytest.importorskip("ray")
    out = tmp_path / "profiles"
    command = [sys.executable, "-m", "profdsl", "demo", "--out", str(out)] + (["--ray"] if mode == "ray" else [])
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "step 4 of 0..4" in result.stdout and "where each step went" in result.stdout
    records = read_manifest(out)
    stages = sorted({(r["role"], r["stage"], r["step"]) for r in records if r["kind"] == "trace"})
    assert stages == sorted((role, stage, step) for step in (2, 3) for role, stage in (
        ("actor", "update_actor"), ("ref", "compute_ref_log_prob"), ("critic", "compute_values"),
        ("critic", "update_critic")))
    assert {tuple(r["window"]) for r in records if r["stage"] == "update_actor"} == {(1, 2)}
    assert "profiling's own cost" in result.stdout, result.stdout  # every trace record carries blocked_ms
    cost = result.stdout.split("profiling's own cost", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    assert sorted(line.split()[:2] for line in cost) == sorted(
        [role, str(step)] for role in ("actor", "critic", "ref") for step in (2, 3)), result.stdout
    assert sorted((r["step"], r["replica"]) for r in records if r["kind"] == "rollout") == [(2, 0), (3, 0)]
    # The always-on table: every stage of all five steps on every rank, beside the traces' figures.
    table = result.stdout.split("always-on metrics", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    rows = {tuple(line.split()[:2]): line.split() for line in table}
    ranks = "2" if mode == "ray" else "1"
    for role, stage in (("actor", "update_actor"), ("ref", "compute_ref_log_prob"),
                        ("critic", "compute_values"), ("critic", "update_critic")):
        assert rows[(role, stage)][2:4] == ["5", ranks] and rows[(role, stage)][-2] == "2", result.stdout
    # the traces hold the recorded mini-batches under the scheduled stage: 2 windows' worth
    assert rows[("actor", "update_actor/mini_batch")][-2] == "4", result.stdout
    assert sorted(r["status"] for r in records if r["kind"] == "hook") == ["ok", "skipped", "skipped"]
    check = subprocess.run([sys.executable, "-m", "profdsl", "check", str(out)], capture_output=True,
                           text=True, timeout=600)
    assert check.returncode == 0, check.stdout
    with tarfile.open(str(out) + ".tgz") as tar:
        packed = {Path(n).name for n in tar.getnames()}
    assert {r["path"] for r in records if r["path"]} <= packed
