"""``profdsl check`` flags a finish hook that ran before a trace of its folder was recorded (one
uploader per node, listed in ``finish_hook.ranks``, waits only for its own process: a later rank's
trace on the same node misses the upload). Real processes, one after the other."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import profdsl._cli

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # real processes, one after the other

SCRIPT = textwrap.dedent(
    """
    import sys
    from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions, profile_stage

    save, rank = sys.argv[1], int(sys.argv[2])
    config = ProfilerConfig(
        enable=True, steps=[1], all_ranks=True, save_path=save, torch=TorchOptions(contents=["cpu"]),
        finish_hook=FinishHook(cmd="true", ranks=[0]),
    )
    profiler = Profiler(config, role="actor", rank=rank, world_size=2)
    for step in range(3):
        with profiler.step(step), profile_stage("update_actor"):
            sum(range(1000))
    profiler.close()
    """
)


def _rank(tmp_path: Path, save: Path, rank: int) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    subprocess.run([sys.executable, str(script), str(save), str(rank)], check=True, timeout=300)


def _check(save: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = profdsl._cli.main(["check", str(save)])
    return code, [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]


def test_a_trace_after_the_node_s_upload_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "profiles"
    _rank(tmp_path, save, 0)  # the uploader: its hook runs after its own step 1
    _rank(tmp_path, save, 1)  # then rank 1's trace of step 1 is recorded: not uploaded
    code, lines = _check(save, capsys)
    assert code == 1
    (line,) = lines
    assert "rank 1" in line and "step 1" in line and "rank 0" in line and "finish hook" in line


def test_an_upload_after_every_trace_is_well(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "profiles"
    _rank(tmp_path, save, 1)
    _rank(tmp_path, save, 0)
    assert _check(save, capsys) == (0, [])
