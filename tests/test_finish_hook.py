"""Tests for the finish hook with real subprocess commands: environment, once-only, ranks,
owed-at-close, timeout, a background child holding the pipe, failures, background mode, atexit."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from profdsl import FinishHook, Profiler, ProfilerConfig, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.collect import _finish_hook as finish_hook

from .profiling import config, hooks
from .traces import trace_files

pytest.importorskip("torch")


def hook_config(save_path: Path, cmd: str, hook: dict[str, Any] | None = None, **kwargs: Any) -> ProfilerConfig:
    """The tests' config (:func:`tests.profiling.config`) with the finish hook ``cmd`` (and ``hook``'s options)."""
    return config(save_path, finish_hook=FinishHook(cmd=cmd, **(hook or {})), **kwargs)


def run_steps(profiler: Profiler, steps: range | list[int], close: bool = True) -> None:
    for step in steps:
        with profiler.step(step), profile_stage("stage"):
            pass
    if close:
        profiler.close()


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class TestWhenAndWhere:
    """When the hook runs, on which ranks, how often."""

    def test_environment_and_no_splicing(self, tmp_path: Path) -> None:
        """The command sees the PROFDSL_* values through the environment only: a save_path full
        of shell syntax is never executed."""
        save = tmp_path / "run 7;$(touch INJECTED)'\""
        cmd = 'env | grep ^PROFDSL_ | sort > "$PROFDSL_SAVE_PATH/env.txt"'
        profiler = Profiler(hook_config(save, cmd, steps=[1, 3]), role="actor", rank=0, world_size=2)
        run_steps(profiler, range(5))
        env = dict(line.split("=", 1) for line in (save / "env.txt").read_text().splitlines())
        assert env["PROFDSL_SAVE_PATH"] == str(save)
        assert env["PROFDSL_MANIFEST"] == str(save / "profdsl-manifest.jsonl")
        assert (env["PROFDSL_TOOL"], env["PROFDSL_ROLE"], env["PROFDSL_RANK"]) == ("torch", "actor", "0")
        assert (env["PROFDSL_WORLD_SIZE"], env["PROFDSL_STEPS"]) == ("2", "1,3")
        assert env["PROFDSL_PID"] == str(os.getpid()) and env["PROFDSL_HOST"]
        assert not (tmp_path / "INJECTED").exists() and not Path("INJECTED").exists()
        assert [(h["status"], h["exit_code"]) for h in hooks(save)] == [("ok", 0)]

    def test_runs_after_the_last_step_s_traces(self, tmp_path: Path) -> None:
        """When the hook runs, the last profiled step's trace is already in save_path."""
        cmd = 'ls "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../listing.txt"'
        profiler = Profiler(hook_config(tmp_path / "p", cmd, steps=[1, 2]), role="actor", rank=0, world_size=1)
        run_steps(profiler, [0, 1, 2], close=False)
        listing = (tmp_path / "listing.txt").read_text()
        assert "step000002" in listing and "step000001" in listing
        profiler.close()

    def test_fused_roles_upload_once(self, tmp_path: Path) -> None:
        """Two roles in one process with one save_path: one run, one skipped record."""
        cmd = 'echo ran >> "$PROFDSL_SAVE_PATH/../count.txt"'
        actor = Profiler(hook_config(tmp_path / "p", cmd), role="actor", rank=0, world_size=1)
        ref = Profiler(hook_config(tmp_path / "p", cmd), role="ref", rank=0, world_size=1)
        with actor.step(1), ref.step(1):  # ref stops first, while the shared session is open
            pass
        assert (tmp_path / "count.txt").read_text() == "ran\n"
        assert len(trace_files(tmp_path / "p")) == 1  # written before the upload ran
        actor.close()
        ref.close()
        assert (tmp_path / "count.txt").read_text() == "ran\n"
        assert sorted(h["status"] for h in hooks(tmp_path / "p")) == ["ok", "skipped"]

    @pytest.mark.parametrize(
        ("profiled", "hook_ranks", "runs_on"),
        [([0], [], [0]), ([0], [1], [1]), ([], [], [0]), ([1, 2], [], [1, 2])],
    )
    def test_hook_ranks(self, tmp_path: Path, profiled: list[int], hook_ranks: list[int], runs_on: list[int]) -> None:
        """The hook runs on its ranks (which need not be profiled), else on the profiled ranks."""
        ran = []
        for rank in range(3):
            PROCESS.rounds.clear()  # ranks are separate processes in real life
            save = tmp_path / f"rank{rank}"
            cfg = hook_config(save, "true", ranks=profiled, hook={"ranks": hook_ranks})
            run_steps(Profiler(cfg, role="actor", rank=rank, world_size=3), range(3))
            if hooks(save):
                ran.append(rank)
        assert ran == runs_on

    def test_owed_at_close(self, tmp_path: Path) -> None:
        """Steps (2, 5) but training stops after step 3: close() runs the hook (verl B5)."""
        profiler = Profiler(hook_config(tmp_path, "true", steps=[2, 5]), role="actor", rank=0, world_size=1)
        run_steps(profiler, range(4), close=False)
        assert hooks(tmp_path) == []
        profiler.close()
        profiler.close()
        assert [h["status"] for h in hooks(tmp_path)] == ["ok"]

    def test_not_owed_without_a_profiled_step(self, tmp_path: Path) -> None:
        """No profiled step ran: no hook, nothing written."""
        profiler = Profiler(hook_config(tmp_path, "true", steps=[7]), role="actor", rank=0, world_size=1)
        run_steps(profiler, range(3))
        assert hooks(tmp_path) == []

    @pytest.mark.slow
    def test_atexit_runs_a_forgotten_hook_once(self, tmp_path: Path) -> None:
        """A script that never calls close(): the hook runs at interpreter exit, exactly once."""
        script = textwrap.dedent(f"""
            from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions
            cfg = ProfilerConfig(enable=True, steps=[1, 9], save_path={str(tmp_path / "p")!r},
                                 torch=TorchOptions(contents=["cpu"]),
                                 finish_hook=FinishHook(cmd='echo x >> "$PROFDSL_SAVE_PATH/../count.txt"'))
            profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
            for step in range(3):
                with profiler.step(step):
                    pass
            other = Profiler(cfg, role="ref", rank=0, world_size=1)
            other.close()
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert (tmp_path / "count.txt").read_text() == "x\n"
        assert len(trace_files(tmp_path / "p")) == 1


class TestBoundedAndSafe:
    """Hooks never hang, never raise, and are recorded."""

    def test_timeout_kills_the_whole_group(self, tmp_path: Path) -> None:
        """A hook past its timeout is killed with its children, and recorded as timeout."""
        cmd = 'sleep 600 & echo $! > "$PROFDSL_SAVE_PATH/../child.pid"; sleep 600'
        cfg = hook_config(tmp_path / "p", cmd, hook={"timeout_s": 1.0})
        run_steps(Profiler(cfg, role="actor", rank=0, world_size=1), [1])
        assert [(h["status"], h["exit_code"] is not None) for h in hooks(tmp_path / "p")] == [("timeout", True)]
        child = int((tmp_path / "child.pid").read_text())
        deadline = time.monotonic() + 60  # SIGKILL is delivered asynchronously: a bounded wait
        while process_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(child)

    def test_background_child_holding_the_pipe_does_not_block(self, tmp_path: Path) -> None:
        """The shell exits while a child keeps stdout open: the hook returns ok anyway."""
        cmd = 'sleep 600 & echo $! > "$PROFDSL_SAVE_PATH/../child.pid"; echo started'
        cfg = hook_config(tmp_path / "p", cmd, hook={"timeout_s": 900.0})
        try:
            run_steps(Profiler(cfg, role="actor", rank=0, world_size=1), [1])
            assert [h["status"] for h in hooks(tmp_path / "p")] == ["ok"]
        finally:
            child = int((tmp_path / "child.pid").read_text())
            os.kill(child, 9)

    def test_failure_logged_once_and_recorded(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A non-zero exit is recorded with its code and logged once with the rank."""
        cfg = hook_config(tmp_path, "echo oops; exit 3", ranks=[2])
        with caplog.at_level(logging.INFO, logger="profdsl"):
            run_steps(Profiler(cfg, role="actor", rank=2, world_size=4), [1])
        assert [(h["status"], h["exit_code"]) for h in hooks(tmp_path)] == [("failed", 3)]
        assert "[profdsl rank 2] oops" in caplog.text
        assert caplog.text.count("[profdsl rank 2] finish hook failed: exit code 3") == 1

    def test_missing_shell(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """No shell: recorded as failed, never raised."""
        monkeypatch.setattr(finish_hook, "SHELL", str(tmp_path / "no-such-sh"))
        run_steps(Profiler(hook_config(tmp_path / "p", "true"), role="actor", rank=0, world_size=1), [1])
        [record] = hooks(tmp_path / "p")
        assert record["status"] == "failed" and "FileNotFoundError" in str(record["error"])

    def test_background_hook_waited_for_at_close(self, tmp_path: Path) -> None:
        """background=True: the step returns at once; close() waits for the hook."""
        cmd = 'sleep 1; echo done > "$PROFDSL_SAVE_PATH/../done.txt"'
        profiler = Profiler(
            hook_config(tmp_path / "p", cmd, hook={"background": True}), role="actor", rank=0, world_size=1
        )
        run_steps(profiler, [1], close=False)
        profiler.close()
        assert (tmp_path / "done.txt").read_text() == "done\n"
        assert [h["status"] for h in hooks(tmp_path / "p")] == ["ok"]

    def test_run_command_result(self) -> None:
        """run_command reports exit codes and never raises."""
        env = dict(os.environ)
        assert finish_hook.run_command("exit 0", env, timeout_s=60, rank=0).status == "ok"
        result = finish_hook.run_command("exit 7", env, timeout_s=60, rank=0)
        assert (result.status, result.exit_code, result.error) == ("failed", 7, "exit code 7")
