"""Run a Python script in a fresh interpreter, for tests where a fault would hang or kill the
test process (a signal handler, a fork, a deadlock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_script(script: str, *args: str) -> tuple[int, str, str]:
    """Run ``script`` in a fresh interpreter (a hang must not hang the tests): its exit code,
    stdout and stderr; past 120 s its whole process group (its forked children too) is killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return -1, out, f"hung (killed after 120 s)\n{err}"
    return process.returncode, out, err
