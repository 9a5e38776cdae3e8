"""The runtime's concurrency model (docs/architecture.md) where threads, forks, signals, exit and
the background writer meet.

Each case is one of the faults found at these seams (pool threads, a fork during an append, exit
with a slow export or a hung hook, Ctrl-C inside torch's stop, a step started twice, ``on_step``
inside the capture, the cost of the last step, nsys reports at the last step); cases that need a
signal, a fork or an exit run in a fresh interpreter; the threaded Ray actor runs on the session's
local Ray cluster (tests/conftest.py).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl import FinishHook, Metrics, Profiler, profile_stage
from profdsl.collect import _manifest as manifest
from profdsl.core import _files as files
from profdsl.manifest import read_manifest

from .profiling import config, hooks, records, torch_profiler_running, work
from .traces import names, parsed

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


def script(tmp_path: Path, body: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter with ``sys.argv[1]`` the save path."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body), str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def check(folder: Path) -> int:
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "check", str(folder)], capture_output=True, timeout=120, cwd=ROOT
    ).returncode


class Worker:
    """One long-lived thread running the calls given to it, one at a time: a pool thread that
    stays alive and idle between calls, as a threaded Ray actor's are."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
                self._done.put(None)
            except BaseException as exc:
                self._done.put(exc)

    def run(self, job: Callable[[], object]) -> None:
        self._jobs.put(job)
        error = self._done.get(timeout=120)
        if error is not None:
            raise error

    def end(self) -> None:
        self._jobs.put(None)
        self.thread.join(timeout=60)


@pytest.fixture
def pool() -> Iterator[list[Worker]]:
    workers = [Worker(f"pool-{i}") for i in range(3)]
    yield workers
    for worker in workers:
        worker.end()


class TestPoolThreads:
    """A role driven from pool threads (a threaded Ray actor, ``max_concurrency > 1``): its
    calls land on whichever thread is free, and a thread that ran one call may never call again."""

    def test_steps_spread_over_threads_are_traced(self, tmp_path: Path, pool: list[Worker]) -> None:
        """Step 1 starts on T0, runs its stage on T1 and stops on T2 (T0 never calls again);
        step 2 runs wholly on T1. Both steps are traced with their stages, nothing is recorded
        lost, and close() runs the hook once."""
        t0, t1, t2 = pool
        cfg = config(tmp_path, steps=[1, 2], finish_hook=FinishHook(cmd="true"))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        t0.run(lambda: profiler.start(1))
        t1.run(lambda: profile_stage("stage1")(work)())
        t2.run(profiler.stop)

        def step2() -> None:
            profiler.start(2)
            profile_stage("stage2")(work)()
            profiler.stop()

        t1.run(step2)
        profiler.close()
        assert sorted((n.step, names(t, "stage")) for n, t in parsed(tmp_path)) == [(1, ["stage1"]), (2, ["stage2"])]
        assert [r["status"] for r in records(tmp_path, "trace")] == ["ok", "ok"]
        assert [r["status"] for r in hooks(tmp_path)] == ["ok"]
        assert not torch_profiler_running()

    def test_work_on_an_unseen_thread_is_recorded_once_and_the_role_switches(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A step started on the main thread whose stage runs on another thread: its session
        cannot see that thread; this is logged and recorded once, and the role's next sessions
        capture every thread, so the next step's stage on another thread is in its trace."""
        cfg = config(tmp_path, steps=[1, 2])
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        for step in (1, 2):
            with profiler.step(step):
                thread = threading.Thread(target=profile_stage(f"stage{step}")(work))
                thread.start()
                thread.join(timeout=60)
        profiler.close()
        seen = {n.step: names(t, "stage") for n, t in parsed(tmp_path)}
        assert seen == {1: [], 2: ["stage2"]}
        losses = [r for r in records(tmp_path, "trace") if r["status"] != "ok"]
        assert [(r["status"], r["step"]) for r in losses] == [("incomplete", 1)]
        assert "every thread" in losses[0]["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["continuous", "discrete"])
def test_threaded_ray_actor_traces_every_step(ray_cluster: str, tmp_path: Path, mode: str) -> None:
    """A real threaded Ray actor (``max_concurrency=4``), killed right after finish_profile():
    every profiled step has its trace with its stage, nothing is lost, the hook ran once."""
    import ray

    from .ray_actors import ThreadedWorker

    actor = ray.remote(max_concurrency=4)(ThreadedWorker).remote(str(tmp_path), mode == "discrete")
    for step in (1, 2, 3, 4):
        ray.get(actor.start_profile.remote(step))
        ray.get(actor.update.remote())
        ray.get(actor.stop_profile.remote())
    ray.get(actor.finish_profile.remote())
    ray.kill(actor)  # no exit handler runs: close() must have done everything
    for _ in range(120):  # ray.kill is asynchronous: read the folder once the actor is gone
        try:
            ray.get(actor.pid.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            break
        time.sleep(0.5)
    assert sorted((n.step, names(t, "update_actor")) for n, t in parsed(tmp_path)) == [
        (1, ["update_actor"]),
        (2, ["update_actor"]),
        (3, ["update_actor"]),
    ]
    assert [r["status"] for r in records(tmp_path, "trace")] == ["ok"] * 3
    assert [r["status"] for r in hooks(tmp_path)] == ["ok"]


def test_fork_while_an_append_holds_the_manifest_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child forked while the writer appends to the manifest (a DataLoader worker started at
    that moment) holds nothing the parent needs: the parent's next append completes while the
    child is still alive."""
    inside, release = threading.Event(), threading.Event()
    real = files.ends_a_line

    def paused(fd: int) -> bool:  # the append, caught inside its critical section
        if not release.is_set():
            inside.set()
            release.wait(60)
        return real(fd)

    monkeypatch.setattr(files, "ends_a_line", paused)
    first = threading.Thread(target=manifest.append_record, args=(tmp_path, {"n": 1}))
    first.start()
    assert inside.wait(60)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: lives until the parent says so, then leaves without cleanup
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        release.set()
        first.join(60)
        second = threading.Thread(target=manifest.append_record, args=(tmp_path, {"n": 2}))
        second.start()
        second.join(30)
        finished_while_child_lives = not second.is_alive() and os.waitpid(pid, os.WNOHANG) == (0, 0)
    finally:
        os.write(write, b"x")
        os.close(write)
        os.waitpid(pid, 0)
    second.join(60)
    assert finished_while_child_lives
    assert [r["n"] for r in read_manifest(tmp_path)] == [1, 2]


SLOW_EXPORT = """
import os, sys, time
import profdsl.collect._export as export_module
from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions, profile_stage

save = sys.argv[1]
real = export_module.compress_trace
def slow(*args, **kwargs):  # an export slower than export_timeout_s
    time.sleep(2)
    return real(*args, **kwargs)
export_module.compress_trace = slow

hook = FinishHook(cmd='sleep 2; ls -a "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../seen-by-hook.txt"')
config = ProfilerConfig(enable=True, steps=[1, 2], save_path=save, finish_hook=hook,
                        torch=TorchOptions(contents=["cpu"], export_timeout_s=0.5))
profiler = Profiler(config, role="actor", rank=0, world_size=1)
for step in (1, 2):
    with profiler.step(step):
        with profile_stage("update_actor"):
            import torch
            torch.ones(8).sum()
# exit without close(): the interpreter's exit ends the run
"""


@pytest.mark.slow
def test_exit_with_an_export_slower_than_its_timeout(tmp_path: Path) -> None:
    """At exit, exports slower than ``export_timeout_s`` are given up: each trace gets exactly one
    record (written or incomplete), the hook runs after them, gets its record, and saw every
    trace recorded as written and every events file an incomplete record names."""
    save = tmp_path / "save"
    done = script(save, SLOW_EXPORT)
    assert done.returncode == 0, done.stderr[-4000:]
    found = records(save, "trace")
    assert sorted(r["step"] for r in found) == [1, 2], found
    [hook] = hooks(save)
    assert hook["status"] == "ok"
    seen = set((tmp_path / "seen-by-hook.txt").read_text().split())
    for record in found:
        wanted = record["path"] if record["status"] == "ok" else record["events"]
        assert wanted in seen, (record, seen)
    kinds = [r["kind"] for r in read_manifest(save)]
    assert kinds.index("hook") > max(i for i, k in enumerate(kinds) if k == "trace")


HUNG_HOOK = """
import sys
from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions, profile_stage

save = sys.argv[1]
hook = FinishHook(cmd='echo $$ > "$PROFDSL_SAVE_PATH/../hook.pid"; exec sleep 300', timeout_s=2,
                  background=True)
config = ProfilerConfig(enable=True, steps=[1], save_path=save, finish_hook=hook,
                        torch=TorchOptions(contents=["cpu"]))
profiler = Profiler(config, role="actor", rank=0, world_size=1)
with profiler.step(1):
    with profile_stage("update_actor"):
        pass
# exit while the background hook runs
"""


@pytest.mark.slow
def test_hook_is_killed_at_its_timeout_even_at_exit(tmp_path: Path) -> None:
    """A background hook still running at exit is killed at its ``timeout_s`` (not left behind)
    and recorded."""
    done = script(tmp_path / "save", HUNG_HOOK)
    assert done.returncode == 0, done.stderr[-4000:]
    [hook] = hooks(tmp_path / "save")
    assert hook["status"] == "timeout"
    pid = int((tmp_path / "hook.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


CTRL_C_IN_STOP = """
import json, signal, sys
import torch
import torch.profiler
from profdsl import FinishHook, Profiler, ProfilerConfig, TorchOptions, profile_stage

save, where = sys.argv[1], sys.argv[2]
target = {"torch-stop": (torch.profiler.profile, "stop"),
          "torch-disable": (torch.autograd.profiler.profile, "__exit__")}[where]
real = getattr(*target)
state = {"armed": True}

def interrupted(self, *args):  # a Ctrl-C that lands inside torch's stop, on the main thread
    if state.pop("armed", False):
        signal.raise_signal(signal.SIGINT)
    return real(self, *args)

setattr(*target, interrupted)
config = ProfilerConfig(enable=True, steps=[1, 2], save_path=save, finish_hook=FinishHook(cmd="true"),
                        torch=TorchOptions(contents=["cpu"]))
profiler = Profiler(config, role="actor", rank=0, world_size=1)
caught = 0
for step in (1, 2):
    profiler.start(step)
    with profile_stage(f"stage{step}"):
        torch.ones(8).sum()
    try:
        profiler.stop()
    except KeyboardInterrupt:
        caught += 1
profiler.close()
print(json.dumps({"caught": caught, "running": bool(torch.autograd.profiler._is_profiler_enabled)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["torch-stop", "torch-disable"])
def test_ctrl_c_inside_torch_stop(tmp_path: Path, where: str) -> None:
    """Ctrl-C while torch stops the session: the interrupt still reaches the loop, the trace is
    written (or its loss recorded, and then ``check`` fails), the next step is traced, the
    profiler is left stopped and the hook runs once after both traces."""
    done = script(tmp_path, CTRL_C_IN_STOP, where)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"caught": 1, "running": False}
    found = records(tmp_path, "trace")
    assert sorted(r["step"] for r in found) == [1, 2]
    ok = {r["step"] for r in found if r["status"] == "ok"}
    assert 2 in ok
    assert (check(tmp_path) == 0) == (ok == {1, 2})
    kinds = [r["kind"] for r in read_manifest(tmp_path)]
    assert kinds.count("hook") == 1 and kinds[-1] == "hook"


class TestStartTwice:
    """Older trainers drive a fused worker once per role alias: ``start(S)`` twice for one step."""

    @pytest.mark.parametrize("discrete", [False, True])
    def test_second_start_keeps_the_step(
        self, tmp_path: Path, discrete: bool, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The second ``start(1)`` is a no-op (logged once): the step's trace holds its stage,
        and the hook runs after it."""
        cfg = config(tmp_path, discrete=discrete, finish_hook=FinishHook(cmd="true"))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.INFO, logger="profdsl"):
            profiler.start(1)
            profiler.start(1)
            profiler.start(1)
            profile_stage("update_actor")(work)()
            profiler.stop()
            profiler.close()
        assert [names(t, "update_actor") for _, t in parsed(tmp_path)] == [["update_actor"]]
        assert [r["status"] for r in records(tmp_path, "trace")] == ["ok"]
        assert [r["status"] for r in hooks(tmp_path)] == ["ok"]
        assert caplog.text.count("already open") == 1
        assert "retried step" not in caplog.text


class TestOnStep:
    """``on_step`` and the metrics exporters run after the step's capture has ended."""

    def test_stages_entered_in_on_step_are_not_in_the_trace(self, tmp_path: Path) -> None:
        def on_step(step: int, metrics: dict[str, float]) -> None:
            profile_stage("in_callback")(work)()

        cfg = config(tmp_path, metrics=Metrics(enabled=True))
        with Profiler(cfg, role="actor", rank=0, world_size=1, on_step=on_step) as profiler:
            with profiler.step(1):
                profile_stage("update_actor")(work)()
        [(_, trace)] = parsed(tmp_path)
        assert names(trace, "update_actor") == ["update_actor"] and names(trace, "in_callback") == []

    def test_interrupt_in_on_step_leaves_the_step_stopped(self, tmp_path: Path) -> None:
        """A KeyboardInterrupt from ``on_step``, caught by the loop, finds the step fully
        stopped: the next step is traced and nothing false is recorded."""

        def on_step(step: int, metrics: dict[str, float]) -> None:
            if step == 1:
                raise KeyboardInterrupt

        cfg = config(tmp_path, steps=[1, 2], metrics=Metrics(enabled=True))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1, on_step=on_step)
        for step in (1, 2, 3):
            try:
                with profiler.step(step):
                    profile_stage("update_actor")(work)()
            except KeyboardInterrupt:
                assert step == 1
        profiler.close()
        assert [r["status"] for r in records(tmp_path, "trace")] == ["ok", "ok"]
        assert sorted(n.step for n, _ in parsed(tmp_path)) == [1, 2]
        assert check(tmp_path) == 0


def test_blocked_ms_counts_the_last_steps_wait_for_its_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last profiled step waits for its export before the (foreground) hook: that wait is
    the training thread's, and is in the trace's ``blocked_ms``."""
    import profdsl.collect._export as export_module

    real = export_module.compress_trace

    def slow(*args: Any, **kwargs: Any) -> Any:  # an export that dominates the step's stop
        time.sleep(1.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(export_module, "compress_trace", slow)
    cfg = config(tmp_path, finish_hook=FinishHook(cmd="true"))
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    profiler.start(1)
    profile_stage("update_actor")(work)()
    began = time.perf_counter()
    profiler.stop()
    spent_ms = (time.perf_counter() - began) * 1000
    profiler.close()
    [trace] = records(tmp_path, "trace")
    [hook] = hooks(tmp_path)
    assert trace["blocked_ms"] <= spent_ms
    assert trace["blocked_ms"] + hook["duration_s"] * 1000 >= 0.8 * spent_ms


class TestNsys:
    """nsys reports (written by Nsight Systems; here by the test, in its place) at the last step."""

    def converting(self, folder: Path, *, finish_after: float) -> threading.Thread:
        """A report whose ``.qdstrm`` converts for ``finish_after`` seconds, as nsys does."""
        stem = folder / f"worker_process_{os.getpid()}"
        stem.with_suffix(".qdstrm").write_bytes(b"raw")

        def convert() -> None:
            time.sleep(finish_after)
            stem.with_suffix(".nsys-rep").write_bytes(b"report" * 100)
            stem.with_suffix(".qdstrm").unlink()

        thread = threading.Thread(target=convert)
        thread.start()
        return thread

    def test_report_converting_at_the_last_step_is_moved_before_the_hook(self, tmp_path: Path) -> None:
        """The hook (at the last profiled step) runs after the report finished converting and
        was moved in: the upload sees it."""
        save, reports = tmp_path / "save", tmp_path / "nsight"
        reports.mkdir()
        hook = FinishHook(cmd='ls "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../seen-by-hook.txt"')
        cfg = config(save, tool="nsys", nsys_report_dir=str(reports), finish_hook=hook)
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        with profiler.step(1):
            work()
            converter = self.converting(reports, finish_after=3.0)
        converter.join(60)
        seen = (tmp_path / "seen-by-hook.txt").read_text().split()
        profiler.close()
        [moved] = [r for r in read_manifest(save) if r["kind"] == "nsys"]
        assert moved["status"] == "ok" and moved["path"] in seen

    def test_incomplete_then_moved_is_not_a_loss(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A report recorded incomplete at the last step (its conversion outlasted the wait)
        and moved in later (at close) leaves a folder ``check`` passes: the move supersedes the
        loss."""
        from profdsl._runtime import step_events

        monkeypatch.setattr(step_events, "NSYS_FINAL_WAIT_S", 0.5)
        save, reports = tmp_path / "save", tmp_path / "nsight"
        reports.mkdir()
        cfg = config(save, tool="nsys", nsys_report_dir=str(reports))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        stem = reports / f"worker_process_{os.getpid()}"
        stem.with_suffix(".qdstrm").write_bytes(b"raw")
        with profiler.step(1):
            work()
        assert profiler.process.writer.wait(timeout=60)  # the last step's pass gave up on it
        stem.with_suffix(".nsys-rep").write_bytes(b"report" * 100)  # converts after the last step
        stem.with_suffix(".qdstrm").unlink()
        profiler.close()
        statuses = [r["status"] for r in read_manifest(save) if r["kind"] == "nsys"]
        assert statuses == ["incomplete", "ok"]
        assert check(save) == 0
