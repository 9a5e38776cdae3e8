"""Collecting under faults: an interrupted finish hook, torn manifest lines, nsys
reports still converting at close, and an engine file that never completes."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl import FinishHook, Profiler, ProfilerConfig, RolloutOptions, TorchOptions, profile_stage, rollout_window
from profdsl.collect import _relocate as relocate
from profdsl.collect._manifest import MANIFEST_NAME, append_record, make_record
from profdsl.manifest import read_manifest
from profdsl.rollout import _run as rollout_run
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout.vllm import VllmEngine, vllm_launch

from .fake_engines import FakeVllmLLM

torch = pytest.importorskip("torch")

# A generous bound for anything asynchronous (signal delivery, a subprocess starting up).
BOUND_S = 120.0


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def eventually(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# -- an interrupt while the finish hook runs -----------------------------------------------------

HOOK_SCRIPT = textwrap.dedent("""
    import signal, sys, time
    from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions
    save, mode = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))  # a trainer's graceful-exit handler
    # Ctrl-C raises KeyboardInterrupt, as in a trainer run from a shell, even when this process was
    # started with SIGINT ignored (a background job of a non-interactive shell inherits SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cmd = ('sleep 600 & echo "$$ $!" > "$PROFDSL_SAVE_PATH/../hook.pids"; wait')
    cfg = ProfilerConfig(enable=True, steps=[1], save_path=save, torch=TorchOptions(contents=["cpu"]),
                         finish_hook=FinishHook(cmd=cmd, background=mode != "foreground"))
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    with profiler.step(1):  # the last profiled step: its stop runs the hook
        pass
    if mode == "background-close":
        profiler.close()  # waits for the background hook
    time.sleep(600)  # the loop goes on while the background hook runs
""")


@pytest.mark.parametrize(
    ("mode", "sig", "raised"),
    [
        ("foreground", signal.SIGINT, "KeyboardInterrupt"),
        ("foreground", signal.SIGTERM, "SystemExit"),
        ("background-close", signal.SIGINT, "KeyboardInterrupt"),
        ("background-loop", signal.SIGINT, "KeyboardInterrupt"),
    ],
)
@pytest.mark.slow
def test_interrupted_hook_is_killed_and_recorded(tmp_path: Path, mode: str, sig: signal.Signals, raised: str) -> None:
    """A signal that ends the process while the hook runs (in the step, in close(), or on its
    background thread at interpreter exit): the hook's whole process group is killed, the
    manifest records the hook as interrupted with the reason, and the exception propagates."""
    save = tmp_path / "p"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOOK_SCRIPT, str(save), mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids_file = tmp_path / "hook.pids"
    try:
        assert eventually(lambda: len(pids_file.read_text().split()) == 2 if pids_file.exists() else False)
        shell, child = (int(p) for p in pids_file.read_text().split())
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        proc.kill()
    if raised == "SystemExit":
        assert proc.returncode == 3, stderr  # the handler's sys.exit(3) went through
    else:
        assert raised in stderr, stderr
    assert eventually(lambda: not process_alive(shell) and not process_alive(child))
    [hook] = [r for r in read_manifest(save) if r["kind"] == "hook"]
    assert hook["status"] == "interrupted" and raised in hook["error"], hook


@pytest.mark.slow
def test_background_hook_still_finishes_at_a_normal_exit(tmp_path: Path) -> None:
    """Without an interrupt, a background hook still running at interpreter exit is waited for."""
    script = textwrap.dedent(f"""
        from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions
        cmd = 'sleep 1; echo done > "$PROFDSL_SAVE_PATH/../done.txt"'
        cfg = ProfilerConfig(enable=True, steps=[1], save_path={str(tmp_path / "p")!r},
                             torch=TorchOptions(contents=["cpu"]),
                             finish_hook=FinishHook(cmd=cmd, background=True))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        with profiler.step(1):
            pass
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND_S * 2)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "done.txt").read_text() == "done\n"
    assert [r["status"] for r in read_manifest(tmp_path / "p") if r["kind"] == "hook"] == ["ok"]


# -- a torn manifest line -----------------------------------------------------------------------


def test_torn_line_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    """A half line (a writer that died mid-write) is followed by a whole, readable record."""
    assert append_record(tmp_path, make_record("trace", "a"))
    with open(tmp_path / MANIFEST_NAME, "ab") as f:
        f.write(b'{"kind": "trace", "path": "lo')
    assert append_record(tmp_path, make_record("trace", "b"))
    assert [r["path"] for r in read_manifest(tmp_path)] == ["a", "b"]


def short_writes(cut: int) -> Callable[[int, Any], int]:
    """An ``os.write`` that writes ``cut`` bytes, then finds the disk full."""
    real = os.write
    calls = []

    def write(fd: int, data: Any) -> int:
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, bytes(data)[:cut])

    return write


def test_short_write_returns_false_and_the_next_record_reads_back(tmp_path: Path) -> None:
    """A short write on a full disk returns False; the next append starts on a fresh line."""
    assert append_record(tmp_path, make_record("trace", "a"))
    with mock.patch.object(os, "write", short_writes(10)):
        assert not append_record(tmp_path, make_record("trace", "lost"))
    assert append_record(tmp_path, make_record("trace", "b"))
    assert [r["path"] for r in read_manifest(tmp_path)] == ["a", "b"]


def test_a_write_that_makes_no_progress_is_short(tmp_path: Path) -> None:
    """``write`` returning 0 is a short write: False at once, no spinning."""
    calls = []

    def stuck(fd: int, data: Any) -> int:
        calls.append(fd)
        if len(calls) > 100:
            raise OSError(errno.EIO, "gave up")
        return 0

    with mock.patch.object(os, "write", stuck):
        assert not append_record(tmp_path, make_record("trace", "a"))
    assert len(calls) == 1


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 0)),
        st.tuples(st.just("torn"), st.integers(0, 200)),  # a dead writer's half line, written directly
        st.tuples(st.just("short"), st.integers(0, 200)),  # append_record hitting a full disk
    ),
    max_size=12,
)


@settings(deadline=None)
@given(ops=OPS)
def test_manifest_survives_any_mix_of_torn_and_whole_writes(ops: list[tuple[str, int]]) -> None:
    """Oracle: every append that returned True reads back, in order; nothing else does; a
    short append returns False."""
    with tempfile.TemporaryDirectory() as folder:
        expected = []
        for index, (op, cut) in enumerate(ops):
            record = make_record("trace", f"r{index}", note="x" * (index * 7))
            line = (json.dumps(record, sort_keys=True) + "\n").encode()
            if op == "append":
                assert append_record(folder, record)
                expected.append(record["path"])
            elif op == "torn":
                with open(os.path.join(folder, MANIFEST_NAME), "ab") as f:
                    f.write(line[: min(cut, len(line) - 2)])  # never the whole object
            else:
                with mock.patch.object(os, "write", short_writes(min(cut, len(line) - 2))):
                    assert not append_record(folder, record)
        assert [r["path"] for r in read_manifest(folder)] == expected


# -- nsys reports still converting at close ------------------------------------------------------


def nsys_config(tmp_path: Path, **kwargs: Any) -> ProfilerConfig:
    (tmp_path / "nsight").mkdir(exist_ok=True)
    kwargs.setdefault("steps", [1])
    return ProfilerConfig(
        enable=True, tool="nsys", save_path=str(tmp_path / "save"), nsys_report_dir=str(tmp_path / "nsight"), **kwargs
    )


def converting(tmp_path: Path, index: int) -> Path:
    """nsys is converting capture ``index`` of this process: a .qdstrm beside a partial report."""
    nsight = tmp_path / "nsight"
    (nsight / f"worker_process_{os.getpid()}.{index}.qdstrm").write_bytes(b"raw")
    report = nsight / f"worker_process_{os.getpid()}.{index}.nsys-rep"
    report.write_bytes(b"partial")
    return report


def nsys_records(tmp_path: Path) -> list[tuple[str, str | None]]:
    return [(r["status"], r.get("source")) for r in read_manifest(tmp_path / "save") if r["kind"] == "nsys"]


@pytest.fixture
def short_nsys_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The final passes wait 0.3 s (not 30 s) for reports still converting."""
    from profdsl._runtime import step_events

    monkeypatch.setattr(step_events, "NSYS_FINAL_WAIT_S", 0.3)


@pytest.mark.usefixtures("short_nsys_wait")
class TestNsysAtClose:
    """The final passes (the last profiled step's, and close()'s) record what is still
    converting once they waited for it; a later move supersedes the record."""

    def test_report_still_converting_at_close_is_recorded_incomplete(self, tmp_path: Path) -> None:
        profiler = Profiler(nsys_config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler.step(1), profile_stage("s"):
            pass
        report = converting(tmp_path, 1)  # the last step's report: nsys converts it after the stop
        profiler.close()
        assert nsys_records(tmp_path) == [("incomplete", str(report))]
        assert report.exists()

    def test_report_converting_at_the_last_step_and_done_by_close_is_moved(self, tmp_path: Path) -> None:
        """Still converting after the last step's wait, done by close(): recorded incomplete,
        then moved whole (the move supersedes the loss for ``check``)."""
        profiler = Profiler(nsys_config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler.step(1), profile_stage("s"):
            report = converting(tmp_path, 1)
        report.with_suffix(".qdstrm").unlink()  # conversion over
        report.write_bytes(b"whole report")
        profiler.close()
        assert [status for status, _ in nsys_records(tmp_path)] == ["incomplete", "ok"]
        [moved] = (tmp_path / "save").glob("*.nsys-rep")
        assert moved.read_bytes() == b"whole report"

    def test_hook_owed_at_close_runs_after_the_final_pass(self, tmp_path: Path) -> None:
        """Training stops before the last profiled step: at close() the report still converting
        is recorded first, then the hook runs and sees that record."""
        cmd = 'cp "$PROFDSL_MANIFEST" "$PROFDSL_SAVE_PATH/../seen.jsonl"'
        cfg = nsys_config(tmp_path, steps=[1, 5], finish_hook=FinishHook(cmd=cmd))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        with profiler.step(1):
            pass
        converting(tmp_path, 1)
        profiler.close()
        assert '"incomplete"' in (tmp_path / "seen.jsonl").read_text()
        assert [status for status, _ in nsys_records(tmp_path)] == ["incomplete"]


# -- an engine file that never completes ---------------------------------------------------------


def vllm_engines(cfg: ProfilerConfig, n: int) -> list[Any]:
    engines = []
    for r in range(n):
        launch = vllm_launch(cfg, r, replica_world_size=1, num_replicas=n, version="0.33.0")
        engines.append(VllmEngine(FakeVllmLLM(launch.engine_args.get("profiler_config"), platform="cuda")))
    return engines


def test_dead_engine_file_is_recorded_once_and_not_waited_for_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 0-byte file the engine never completes: recorded incomplete once, the good files of the
    same window moved; the next window neither waits for it nor records it again."""
    waited: list[list[str]] = []
    real_wait = relocate.wait_complete

    def spy(paths: list[str], timeout_s: float, poll_s: float = relocate.POLL_S) -> list[str]:
        waited.append(sorted(paths))
        return real_wait(paths, timeout_s, poll_s)

    monkeypatch.setattr(relocate, "wait_complete", spy)
    cfg = ProfilerConfig(
        enable=True,
        steps=[1, 2],
        save_path=str(tmp_path / "p"),
        torch=TorchOptions(contents=["cpu"]),
        rollout=RolloutOptions(flush_wait_s=0.5),
    )
    engines = vllm_engines(cfg, 1)
    folder = Path(rollout_trace_dir(cfg.save_path, 0))
    folder.mkdir(parents=True)
    dead = folder / "stuck.pt.trace.json.gz"
    dead.touch()
    with Profiler(cfg, role="trainer", rank=0, world_size=1) as profiler:
        for step in (1, 2):
            with profiler.step(step), rollout_window(engines):
                pass
    records = [r for r in read_manifest(cfg.save_path) if r["kind"] == "rollout"]
    assert [(r["status"], r["step"]) for r in records if r.get("source") == str(dead)] == [("incomplete", 1)]
    assert sorted(r["step"] for r in records if r["status"] == "ok") == [1, 2]
    assert len(waited) == 2 and str(dead) in waited[0] and str(dead) not in waited[1]
    assert dead.exists()


def test_remote_nodes_relocate_concurrently_under_one_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas on two other nodes: both relocations run at once (neither waits for the other),
    each within the window's one flush_wait_s budget."""
    budgets: dict[str, float] = {}
    barrier = threading.Barrier(2, timeout=10)

    def fake_run_on_node(node: str, fn: Any, *args: Any, timeout: float) -> None:
        budgets[node] = args[-1]  # the wait left for this node's relocation
        barrier.wait()  # both nodes relocate at the same time, or this breaks

    monkeypatch.setattr(rollout_run, "_nodes", lambda engines: ([], {"A": [0], "B": [1]}))
    monkeypatch.setattr(rollout_run, "run_on_node", fake_run_on_node)
    monkeypatch.setattr(rollout_run, "current_node", lambda: "here")
    cfg = ProfilerConfig(
        enable=True,
        steps=[1],
        all_ranks=True,
        save_path=str(tmp_path / "p"),
        torch=TorchOptions(contents=["cpu"]),
        rollout=RolloutOptions(flush_wait_s=30),
    )
    with Profiler(cfg, role="trainer", rank=0, world_size=1) as profiler:
        with profiler.step(1), rollout_window(vllm_engines(cfg, 2)):
            pass
    assert sorted(budgets) == ["A", "B"] and not barrier.broken
    assert all(0 < wait <= 30 for wait in budgets.values()), budgets
