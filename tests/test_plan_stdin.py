"""``profdsl plan`` reads its config by content, not only by name: a process substitution
(``<(cat profiler.yaml)``, a ``/dev/fd/N`` path with no suffix) works for YAML and for JSON.
The real CLI in a real shell."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "profiler.yaml"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for <(...)")


def plan_from_a_pipe(source: Path) -> subprocess.CompletedProcess[str]:
    line = f'"{sys.executable}" -m profdsl plan <(cat "{source}") --world-size 2'
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_yaml_through_dev_fd() -> None:
    done = plan_from_a_pipe(EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_json_through_dev_fd(tmp_path: Path) -> None:
    source = tmp_path / "profiler"
    source.write_text(json.dumps(yaml.safe_load(EXAMPLE.read_text())))
    done = plan_from_a_pipe(source)
    assert done.returncode == 0, done.stderr
    assert done.stdout == plan_from_a_pipe(EXAMPLE).stdout
