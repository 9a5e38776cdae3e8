"""``profdsl check`` judges each rank of a capture request against the steps it was asked for:
ranks that began a step apart (documented for ``trigger`` without ``--at-step``) trace 5-6 and
6-7, and nothing is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import profdsl._cli

from .profiling import records

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # real processes, one after the other


SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import profdsl._cli
    from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage

    save, rank, last, trigger_after, wait_before = sys.argv[1], *map(int, sys.argv[2:])
    config = ProfilerConfig(enable=True, steps=[], save_path=save, torch=TorchOptions(contents=["cpu"]))
    profiler = Profiler(config, role="actor", rank=rank, world_size=2)
    open(os.path.join(save, f"ready{rank}"), "w").close()
    request = os.path.join(save, "profdsl-requests", "look.json")
    for step in range(last):
        if step == wait_before:  # the other rank is a step ahead: it writes the request now
            deadline = time.monotonic() + 240
            while not os.path.exists(request) and time.monotonic() < deadline:
                time.sleep(0.05)
        with profiler.step(step), profile_stage("update_actor"):
            sum(range(1000))
        if step == trigger_after:
            argv = ["trigger", save, "--steps", "2", "--ranks", "all", "--id", "look"]
            assert profdsl._cli.main(argv) == 0
    profiler.close()
    """
)


def _offset_run(tmp_path: Path) -> Path:
    """Ranks 0 and 1 of one job, both running, rank 1 a step ahead when ``trigger --steps 2``
    (every rank) is written: rank 1 writes it after its step 5 and begins it at 6; rank 0, waiting
    before its step 5 until the file is there, begins it at 5."""
    save = tmp_path / "profiles"
    save.mkdir()
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)

    def start(*args: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(script), str(save), *map(str, args)])

    rank0 = start(0, 9, -1, 5)
    try:
        deadline = time.monotonic() + 240
        while not (save / "ready0").exists() and rank0.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (save / "ready0").exists()
        assert (
            subprocess.run([sys.executable, str(script), str(save), "1", "10", "5", "-1"], timeout=300).returncode == 0
        )
        assert rank0.wait(timeout=300) == 0
    finally:
        if rank0.poll() is None:
            rank0.kill()
            rank0.wait()
    for name in ("ready0", "ready1"):
        (save / name).unlink()
    return save


def test_ranks_a_step_apart_are_well(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = _offset_run(tmp_path)
    traced = sorted((r["rank"], r["step"]) for r in records(save, "trace") if r["status"] == "ok")
    assert traced == [(0, 5), (0, 6), (1, 6), (1, 7)]
    capsys.readouterr()
    assert profdsl._cli.main(["check", str(save)]) == 0, capsys.readouterr().out


def test_a_step_a_rank_was_asked_for_and_did_not_write_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1's trace of step 7 removed from the manifest: its one missing step is named."""
    import json

    from profdsl.collect._manifest import MANIFEST_NAME

    save = _offset_run(tmp_path)
    kept = [r for r in records(save) if not (r.get("rank") == 1 and r.get("step") == 7 and r["kind"] == "trace")]
    for r in records(save):
        if r not in kept and r.get("path"):
            (save / r["path"]).unlink()
    (save / MANIFEST_NAME).write_text("".join(json.dumps(r) + "\n" for r in kept))
    capsys.readouterr()
    assert profdsl._cli.main(["check", str(save)]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert fails == ["FAIL step 7 (capture request look): profiled rank 1 wrote no trace"]
