"""The examples run as a user would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_plan_preview_runs(tmp_path: Path) -> None:
    """examples/plan_preview.py prints the sessions, ranks, windows and names of its config."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "plan_preview.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "sessions (open step, close step): [(2, 2), (3, 3), (6, 6)]" in out.stdout
    assert "profiled ranks of 8: [0, 4]" in out.stdout
    assert "trace files (mini-batch windows): [(3, 4), (7, 8)]" in out.stdout
    assert "_mb3-4_" in out.stdout


def test_plan_preview_reads_a_yaml_config(tmp_path: Path) -> None:
    """Given a YAML config and a world size, the preview uses them; a bad config fails clearly."""
    good = tmp_path / "p.yaml"
    good.write_text("enable: true\nsteps: [4, 5]\ncontinuous_steps: true\nall_ranks: true\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "plan_preview.py"), str(good), "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "sessions (open step, close step): [(4, 5)]" in out.stdout
    assert "profiled ranks of 3: [0, 1, 2]" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("enable: true\nstepz: [4]\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "plan_preview.py"), str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0 and "unknown key 'stepz' in ProfilerConfig; did you mean 'steps'?" in out.stderr


def test_train_loop_runs(tmp_path: Path) -> None:
    """examples/train_loop.py profiles steps 2 and 4: 3 stage traces each, 2 of them windows."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_loop.py"), "--out", str(tmp_path / "p")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "8 traces in" in out.stdout
    from profdsl.manifest import read_manifest

    records = read_manifest(tmp_path / "p")
    assert sorted({(r["step"], r["stage"]) for r in records}) == [
        (2, "compute_log_prob"),
        (2, "generate"),
        (2, "update_actor"),
        (4, "compute_log_prob"),
        (4, "generate"),
        (4, "update_actor"),
    ]
    assert [r["window"] for r in records if r["stage"] == "update_actor"] == [[2, 3], [6, 7]] * 2


def test_ray_ppo_runs(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """examples/ray_ppo.py profiles steps 1 and 2 on rank 0 and replica 0, and runs its hook."""
    pytest.importorskip("ray")
    request.getfixturevalue("own_ray_cluster")  # its own, in the subprocess (tests/conftest.py)
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ray_ppo.py"), "--out", str(tmp_path / "p")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    from profdsl.manifest import read_manifest

    records = read_manifest(tmp_path / "p")
    assert sorted({(r["kind"], r["step"], r["rank"]) for r in records if r["kind"] != "hook"}) == [
        ("rollout", 1, 0),
        ("rollout", 2, 0),
        ("trace", 1, 0),
        ("trace", 2, 0),
    ]
    assert [r["status"] for r in records if r["kind"] == "hook"].count("ok") == 1
