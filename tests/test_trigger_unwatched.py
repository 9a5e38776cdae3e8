"""``profdsl trigger`` on a folder no job has written a manifest into says so on stderr (the
request is still written, the exit code the same): a typo'd save_path is seen at once. The real
CLI in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.collect._requests import REQUESTS_DIR


def trigger(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "trigger", str(folder), "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_manifest_is_said(tmp_path: Path) -> None:
    done = trigger(tmp_path)
    assert done.returncode == 0
    assert "no manifest" in done.stderr and str(tmp_path) in done.stderr
    assert list((tmp_path / REQUESTS_DIR).iterdir())


def test_a_watched_folder_is_quiet(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text("")
    done = trigger(tmp_path)
    assert done.returncode == 0 and done.stderr == ""
