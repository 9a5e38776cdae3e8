"""``profdsl merge`` says what the artifacts it left out are ("1 hook record, 2 traces of
another step"), not only how many. Real traces, the real CLI in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profdsl.collect._manifest import append_record
from profdsl.records.manifest import HookRecord

from .profiling import profile_two_ranks

pytest.importorskip("torch")


def merge(folder: Path, out: Path, *more: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "merge", str(folder), "-o", str(out), *more],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_skipped_names_what_it_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    profile_two_ranks(folder)
    append_record(folder, HookRecord(status="ok", exit_code=0, rank=0, steps=(1,)))
    append_record(folder, HookRecord(status="ok", exit_code=0, rank=1, steps=(1,)))
    [line] = [line for line in merge(folder, tmp_path / "m.json").splitlines() if line.startswith("skipped")]
    assert line == "skipped 2 artifacts: 2 hook records"
