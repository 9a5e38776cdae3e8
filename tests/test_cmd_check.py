"""``profdsl check`` names each loss once: the record of a lost trace is its one line (not also
"profiled rank wrote no trace", nor "not in the manifest" for files the record accounts for)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import profdsl._cli
from profdsl.collect._manifest import MANIFEST_NAME, make_record

from .profiling import profile_two_ranks, records

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pristine") / "profiles"
    profile_two_ranks(folder)
    return folder


def fails(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``check`` told that ranks 0 and 1 of 2 were profiled at step 1: its FAIL lines."""
    config = folder.parent / "profiler.yaml"
    config.write_text("enable: true\nsteps: [1]\nall_ranks: true\n")
    assert profdsl._cli.main(["check", str(folder), "--config", str(config), "--world-size", "2"]) == 1
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]


def test_a_lost_trace_is_one_line(pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 1's traces of step 1 were lost (one recorded ``failed``): one line, naming the file it
    would have been, and no "rank 1 wrote no trace" besides."""
    folder = Path(shutil.copytree(pristine, tmp_path / "profiles"))
    kept = [r for r in records(folder) if r["rank"] == 0]
    for record in records(folder):
        if record["rank"] == 1:
            (folder / record["path"]).unlink()
    lost = make_record(
        "trace",
        None,
        status="failed",
        role="actor",
        stage="update_actor",
        step=1,
        rank=1,
        world_size=2,
        intended="actor.update-actor_step000001_rank1-of-2_x_pid1_20260101T000000000.pt.trace.json.gz",
        error="OSError: disk full",
    )
    (folder / MANIFEST_NAME).write_text("".join(json.dumps(r) + "\n" for r in [*kept, lost]))
    (line,) = fails(folder, capsys)
    assert line == f"FAIL {lost['intended']}: trace failed OSError: disk full"


def test_a_rank_that_wrote_nothing_is_still_named(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other side: without a record of the loss, the missing rank is the one line."""
    folder = Path(shutil.copytree(pristine, tmp_path / "profiles"))
    kept = [r for r in records(folder) if r["rank"] == 0]
    for record in records(folder):
        if record["rank"] == 1:
            (folder / record["path"]).unlink()
    (folder / MANIFEST_NAME).write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert fails(folder, capsys) == ["FAIL step 1: profiled rank 1 wrote no trace"]
