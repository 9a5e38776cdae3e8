"""Exports still pending when the process ends are never lost: at interpreter exit the
wait gives up after ``TorchOptions.export_timeout_s``, the trace is recorded ``incomplete`` with
torch's events kept on disk, and the finish hook runs after that record; at a hard exit
(``os._exit``, SIGKILL) nothing can be recorded, and ``profdsl check`` names what was left.

Each case runs in a fresh interpreter whose compression hangs (a disk that stops answering).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from profdsl.collect._manifest import read_manifest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

PRELUDE = """
import os, sys, time
import profdsl.collect._export as export_module
from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
from profdsl.config import FinishHook
save = sys.argv[1]

def hung(*args, **kwargs):  # compression never returns: a hung disk
    time.sleep(600)

export_module.compress_trace = hung

def work():
    import torch
    torch.ones(8).mul(2).sum()

hook = FinishHook(cmd=f'cp "$PROFDSL_MANIFEST" "{save}/seen-by-hook.jsonl"')
config = ProfilerConfig(enable=True, steps=[1], save_path=save, finish_hook=hook,
                        torch=TorchOptions(contents=["cpu"], export_timeout_s=0.5))
profiler = Profiler(config, role="actor", rank=0, world_size=1)
profiler.start(1)
with profile_stage("update_actor"):
    work()
profiler.stop()  # the last profiled step: waits 0.5 s for the export, which hangs
"""


def run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=240)


def events_left(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(".profdsl-tmp-") and p.suffix == ".json")


def holds_the_stage(events_file: Path) -> bool:
    """torch's events, intact: a JSON object whose events include the stage's region."""
    data: dict[str, Any] = json.loads(events_file.read_text())
    return any(e.get("name") == "update_actor" for e in data["traceEvents"])


def test_interpreter_exit_records_the_pending_export_incomplete_before_the_hook(tmp_path: Path) -> None:
    result = run(tmp_path, "")  # the script ends: interpreter exit closes the profiler
    assert result.returncode == 0, result.stderr[-3000:]
    assert "still being written" in result.stderr
    traces = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
    assert [(r["status"], r["step"], r["path"]) for r in traces] == [("incomplete", 1, None)]
    kept = events_left(tmp_path)
    assert [p.name for p in kept] == [traces[0]["events"]]  # torch's events are not lost
    assert holds_the_stage(kept[0])
    hooks = [r for r in read_manifest(tmp_path) if r["kind"] == "hook"]
    assert [h["exit_code"] for h in hooks] == [0]
    seen = [json.loads(line) for line in (tmp_path / "seen-by-hook.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["status"]) for r in seen] == [("trace", "incomplete")]  # after the record
    check = subprocess.run(
        [sys.executable, "-m", "profdsl", "check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 1
    assert f"{kept[0].name}: torch's events of the incomplete actor trace of step 1" in check.stdout


def test_hard_exit_leaves_the_events_and_check_names_them(tmp_path: Path) -> None:
    """A hard exit while a mid-run trace is being finished: nothing is recorded; torch's events
    are left, and ``check`` names them and the process that left them."""
    result = run(
        tmp_path,
        """
        import glob
        config2 = ProfilerConfig(enable=True, steps=[2, 3], save_path=save,
                                 torch=TorchOptions(contents=["cpu"]))
        again = Profiler(config2, role="ref", rank=0, world_size=1)
        again.start(2)
        with profile_stage("update_actor"):
            work()
        again.stop()  # a mid-run step: its export goes on in the background, and hangs
        while len(glob.glob(os.path.join(save, ".profdsl-tmp-*.json"))) < 2:
            time.sleep(0.05)  # both traces' events are on disk
        os._exit(0)  # no atexit, no record for the mid-run trace: only the files tell
    """,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The prelude's last step gave its hung export up (recorded) for the hook; ref's is unrecorded.
    [given_up] = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
    assert (given_up["role"], given_up["status"]) == ("actor", "incomplete")
    kept = events_left(tmp_path)
    assert len(kept) == 2 and all(holds_the_stage(k) for k in kept)
    [unrecorded] = [k for k in kept if k.name != given_up["events"]]
    check = subprocess.run(
        [sys.executable, "-m", "profdsl", "check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 1
    pid = unrecorded.name.split("-")[2]
    assert f"{unrecorded.name}: torch's events of a trace still being exported when process {pid} ended" in check.stdout


def test_check_reports_an_export_given_up_at_exit_once(tmp_path: Path) -> None:
    """Compression began (a half-written ``.gz`` next to torch's events), then the disk stopped
    answering: ``check`` prints one line for that one loss, naming the events file the record
    keeps, and neither file as "not in the manifest" or as a leftover of its own."""
    partial = """def hung(source, destination, *args, **kwargs):  # compression starts, then hangs
    with open(destination, "wb") as out:
        out.write(b"\\\\x1f\\\\x8b\\\\x08\\\\x00 half")
    time.sleep(600)
"""
    code = PRELUDE.replace(PRELUDE[PRELUDE.index("def hung") : PRELUDE.index("export_module.compress_trace")], partial)
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".profdsl-tmp-"))
    (record,) = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
    assert left == [record["events"], record["events"] + ".gz"]  # torch's events and the half .gz
    check = subprocess.run(
        [sys.executable, "-m", "profdsl", "check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 1
    fails = [line for line in check.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1, check.stdout
    assert fails[0].startswith(f"FAIL {record['events']}: torch's events of the incomplete actor trace of step 1")
    assert "still being written in the background" in fails[0]
    assert "not in the manifest" not in check.stdout
