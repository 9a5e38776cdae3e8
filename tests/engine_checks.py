"""What the rollout engine tests read back from a save_path: the summary's rows, `check`'s
verdict, and a description of what landed there that the fake and the real engine must share."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import attrs

from profdsl._cli import main
from profdsl.manifest import read_manifest

#: The stage name an engine trace's generation gets in the stage model.
GENERATE = "generate (engine)"


@attrs.frozen
class Driven:
    """What an engine driver's run left: its exit code, output, report and ``--out`` folder."""

    returncode: int
    log: str
    report: dict[str, Any]
    out: Path

    def scenario(self, name: str) -> dict[str, Any]:
        """The report of scenario ``name``; fails with the driver's output if it did not run."""
        assert self.returncode == 0, f"driver exited {self.returncode}:\n{self.log[-6000:]}"
        entry: dict[str, Any] = self.report["scenarios"][name]
        assert "error" not in entry, entry["error"]
        return entry


def run_cli(*args: str) -> tuple[int, str]:
    """Run a ``profdsl`` command in this process: (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def summary_rows(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """``profdsl summary DIR --json``."""
    code, text = run_cli("summary", str(folder), "--json")
    assert code == 0, text
    rows: list[dict[str, Any]] = json.loads(text)
    return rows


def stage_counts(folder: str | os.PathLike[str]) -> dict[tuple[int, str, str], int]:
    """(step, role, stage) → entries, from the summary."""
    return {(r["step"], r["role"], r["stage"]): r["count"] for r in summary_rows(folder)}


def check_output(folder: str | os.PathLike[str]) -> tuple[int, str]:
    """``profdsl check DIR``: (exit code, what it printed)."""
    return run_cli("check", str(folder))


_NS = re.compile(r"(?<![0-9])[0-9]{12,}(?![0-9])")  # a time in ns, or SGLang's profile id
_STAMP = re.compile(r"_[0-9]{8}T[0-9]{9}")  # profdsl's time in a trace name


def _normal(name: str, pids: set[int]) -> str:
    """A file name with what changes between runs replaced: host, pids, times."""
    host = re.escape(socket.gethostname())
    for pid in pids:
        name = re.sub(rf"_{host}_(pid)?{pid}(?=[._])", r"_<host>_\1<pid>", name)
    return _STAMP.sub("_<time>", _NS.sub("<ns>", name))


def landed(folder: str | os.PathLike[str], *pids: int) -> dict[str, Any]:
    """What a run left in ``folder``, described so that two runs of one scenario compare equal:
    each manifest record (kind, status, step, rank, replica, its file and the engine file it
    came from, normalized), and the files left in the replicas' folders."""
    root = Path(folder)
    pid_set = set(pids) | {r["pid"] for r in read_manifest(root) if isinstance(r.get("pid"), int)}
    records = sorted(
        (
            r["kind"],
            r["status"],
            r["step"],
            r["rank"],
            r["replica"],
            _normal(r["path"], pid_set) if r["path"] else None,
            _normal(os.path.basename(r["source"]), pid_set) if r.get("source") else None,
        )
        for r in read_manifest(root)
    )
    left = sorted(
        f"{d.name}/{_normal(f.name, pid_set)}"
        for d in root.glob("rollout_replica_*")
        for f in d.iterdir()
        if not f.name.startswith(".")
    )
    return {"records": records, "left": left}


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found


def run_in_group(
    command: list[str],
    *,
    log: Path,
    timeout: float,
    cwd: str | os.PathLike[str] | None = None,
    reap_timeout: float = 60.0,
) -> int:
    """Run ``command`` in a new process group, its output into ``log``, at most ``timeout``
    seconds; then kill the whole group (an engine's core, workers and resource tracker) and
    wait until it is gone, whatever happened. Returns the exit code (negative: a signal)."""
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            command, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            deadline = time.monotonic() + reap_timeout
            while True:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.poll()
                if not group_members(process.pid) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            process.wait(timeout=reap_timeout)
    left = group_members(process.pid)
    assert not left, f"processes of {command[:3]} outlived it: {left}"
    return process.returncode
