"""Sessions that outlive their thread or profiler, and when the finish hook is owed. Crashes are
tested in a subprocess: a torch session left running at exit kills the process (exit 139)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, TorchOptions, profile_stage
from profdsl.config import FinishHook
from tests.profiling import config, records, run_threads, torch_profiler_running, work

PRELUDE = """
import json, os, sys, threading
from profdsl import Profiler, ProfilerConfig, TorchOptions, mini_batch_window, profile_stage
from profdsl.config import FinishHook
save = sys.argv[1]
def work():
    import torch
    torch.ones(8).mul(2).sum()
def cfg(**kw):
    kw.setdefault("enable", True)
    kw.setdefault("steps", [1])
    kw.setdefault("torch", TorchOptions(contents=["cpu"]))
    return ProfilerConfig(save_path=save, **kw)
"""


def run(tmp_path: Path, body: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``body`` (after PRELUDE) in a fresh interpreter, with ``save`` = ``tmp_path``."""
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=timeout)


def traces_ok(folder: Path) -> list[dict[str, Any]]:
    """The ok trace records, each checked to name a file that exists and parses."""
    import gzip

    found = [r for r in records(folder) if r["kind"] == "trace" and r["status"] == "ok"]
    for record in found:
        with gzip.open(folder / record["path"], "rt") as f:
            json.load(f)
    return found


# -- a session left running at exit -------------------------------------------------------
@pytest.mark.slow
def test_session_started_on_a_thread_that_ends_is_stopped_there(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        p = Profiler(cfg(), role="actor", rank=0, world_size=1)
        def begin():
            p.start(1)
            with profile_stage("gen"):
                work()
        t = threading.Thread(target=begin); t.start(); t.join()
        p.stop()   # from another thread than the one that started the session
        p.close()
        print("closed")
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = traces_ok(tmp_path)
    assert [(r["role"], r["step"]) for r in found] == [("actor", 1)]


@pytest.mark.slow
def test_session_of_a_thread_that_ends_before_stop(tmp_path: Path) -> None:
    """The thread that started the step is gone before anyone stops it; close() is never
    called: the session is ended when its thread ends, and the trace is written."""
    result = run(
        tmp_path,
        """
        p = Profiler(cfg(), role="actor", rank=0, world_size=1)
        def begin():
            p.start(1)
            with profile_stage("gen"):
                work()
        t = threading.Thread(target=begin); t.start(); t.join()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(traces_ok(tmp_path)) == 1


@pytest.mark.slow
def test_abandoned_generator_stage_is_stopped_at_exit(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        p = Profiler(cfg(discrete=True), role="actor", rank=0, world_size=1)
        @profile_stage("generate")
        def gen():
            work()
            yield 1
            work()
        p.start(1)
        g = gen(); next(g)   # started and left suspended, still referenced at exit
        keep = [g]
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = traces_ok(tmp_path)
    assert [r["stage"] for r in found] == ["generate"]
    assert "open" in found[0].get("note", "")


@pytest.mark.slow
def test_close_ends_an_open_generator_stage(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        from profdsl._runtime.process import PROCESS
        p = Profiler(cfg(discrete=True), role="actor", rank=0, world_size=1)
        @profile_stage("generate")
        def gen():
            work()
            yield 1
        p.start(1)
        g = gen(); next(g)
        p.stop(); p.close()
        import torch.autograd.profiler as ap
        print("running", bool(ap._is_profiler_enabled))
        keep = [g]
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "running False" in result.stdout
    assert [r["stage"] for r in traces_ok(tmp_path)] == ["generate"]


@pytest.mark.slow
def test_session_of_a_blocked_thread_is_recorded_lost_at_exit(tmp_path: Path) -> None:
    """An event loop's thread (it owns its session) blocks and never comes back: the session
    cannot be ended cleanly; the loss is recorded and the process still exits normally."""
    result = run(
        tmp_path,
        """
        import asyncio
        p = Profiler(cfg(), role="actor", rank=0, world_size=1)
        started, never = threading.Event(), threading.Event()
        async def begin():
            p.start(1)
            work()
            started.set()
            never.wait()   # blocks its event loop for good
        threading.Thread(target=asyncio.run, args=(begin(),), daemon=True).start()
        started.wait(60)
        p.stop()
        p.close()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lost = [r for r in records(tmp_path) if r["kind"] == "trace"]
    assert [(r["status"], r["step"]) for r in lost] == [("failed", 1)]
    assert "thread" in lost[0]["error"]


# -- the hook runs after the last artifact ------------------------------------------------
def hook_config(tmp_path: Path, **kwargs: Any) -> Any:
    cmd = f"{sys.executable} -c \"import os; print(sorted(os.listdir('{tmp_path}')))\" > {tmp_path}/hook.out"
    return config(tmp_path, finish_hook=FinishHook(cmd=cmd), **kwargs)


def hook_then_traces(tmp_path: Path) -> tuple[list[str], list[str]]:
    """The trace files the hook saw, and those that exist now (once the traces being written
    in the background, and a hook due after them, are done)."""
    from profdsl._runtime.process import PROCESS

    assert PROCESS.writer.wait(timeout=120)
    assert all(job.wait(timeout=120) for job in PROCESS.rounds.unfinished())
    seen = (tmp_path / "hook.out").read_text() if (tmp_path / "hook.out").exists() else "None"
    names = ast.literal_eval(seen) or []
    now = sorted(p.name for p in tmp_path.glob("*.json.gz"))
    return [n for n in names if n.endswith(".json.gz")], now


def stop_while_a_stage_is_open(profiler: Profiler, after_stop: Any = None) -> None:
    """Step 1 stops (from this thread) while its stage is open on another thread; then
    ``after_stop()`` runs, the stage ends there, and the profiler closes."""
    inside, release = threading.Event(), threading.Event()

    def stage() -> None:
        with profile_stage("generate"):
            work()
            inside.set()
            release.wait(60)

    profiler.start(1)
    thread = threading.Thread(target=stage)
    thread.start()
    assert inside.wait(60)
    profiler.stop()
    if after_stop is not None:
        after_stop()
    release.set()
    thread.join(60)
    profiler.close()


def test_hook_waits_for_a_stage_still_open_on_another_thread(tmp_path: Path) -> None:
    profiler = Profiler(hook_config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)

    def hook_not_yet() -> None:  # the last profiled step ended while its stage is still open
        assert not (tmp_path / "hook.out").exists()

    stop_while_a_stage_is_open(profiler, hook_not_yet)
    seen, now = hook_then_traces(tmp_path)
    assert len(now) == 1 and seen == now


def test_retried_last_step_is_not_profiled_after_the_hook(tmp_path: Path) -> None:
    profiler = Profiler(hook_config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
    for step in (1, 2, 2, 3):
        with profiler.step(step), profile_stage("s"):
            work()
    profiler.close()
    seen, now = hook_then_traces(tmp_path)
    assert len(now) == 2 and seen == now
    hooks = [r for r in records(tmp_path) if r["kind"] == "hook"]
    assert len(hooks) == 1


def test_recreated_profiler_for_the_same_save_path_runs_the_hook_promptly(tmp_path: Path) -> None:
    first = Profiler(hook_config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
    with first.step(1), profile_stage("s"):
        work()
    # re-created (a trainer re-initialised) without closing the first one
    second = Profiler(hook_config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
    for step in (1, 2):
        with second.step(step), profile_stage("s"):
            work()
    seen, now = hook_then_traces(tmp_path)  # before any close() or exit
    assert len(now) == 3 and seen == now
    second.close()
    first.close()


def test_second_round_after_the_hook_ran_gets_its_own_hook(tmp_path: Path) -> None:
    first = Profiler(hook_config(tmp_path), role="actor", rank=0, world_size=1)
    with first.step(1), profile_stage("s"):
        work()
    first.close()
    second = Profiler(hook_config(tmp_path), role="critic", rank=0, world_size=1)
    with second.step(1), profile_stage("s"):
        work()
    second.close()
    seen, now = hook_then_traces(tmp_path)
    assert len(now) == 2 and seen == now
    assert [r["status"] for r in records(tmp_path) if r["kind"] == "hook"] == ["ok", "ok"]


def test_hook_waits_for_a_session_stopped_from_another_thread(tmp_path: Path) -> None:
    """stop() from another thread defers the session's end to its own thread: the hook waits
    for that trace instead of running before it exists."""
    import asyncio

    profiler = Profiler(hook_config(tmp_path), role="actor", rank=0, world_size=1)
    begun, stopped, go_on = threading.Event(), threading.Event(), threading.Event()

    async def steps() -> None:  # an async actor's loop: its thread owns the session
        profiler.start(1)
        with profile_stage("s"):
            work()
        begun.set()
        stopped.wait(60)  # main stops the step meanwhile
        with profile_stage("after"):  # this thread's next profdsl call ends its session
            work()
        go_on.set()

    thread = threading.Thread(target=asyncio.run, args=(steps(),))
    thread.start()
    assert begun.wait(60)
    profiler.stop()
    assert not (tmp_path / "hook.out").exists()
    stopped.set()
    assert go_on.wait(60)
    thread.join(60)
    seen, now = hook_then_traces(tmp_path)
    assert len(now) == 1 and seen == now
    profiler.close()


def test_all_threads_session_sees_other_threads_and_records_nothing_odd(tmp_path: Path) -> None:
    options = TorchOptions(contents=["cpu"], all_threads=True)
    profiler = Profiler(config(tmp_path, torch=options), role="actor", rank=0, world_size=1)

    def stage() -> None:
        with profile_stage("update_actor"):
            work()

    with profiler.step(1):
        thread = threading.Thread(target=stage)
        thread.start()
        thread.join(60)
    profiler.close()
    assert [r["status"] for r in records(tmp_path)] == ["ok"]


# -- a forked child inherits no profiling duty --------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_that_exits_inside_a_step_writes_nothing_and_runs_no_hook(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        f"""
        cmd = "echo ran >> {tmp_path}/hook.out"
        p = Profiler(cfg(finish_hook=FinishHook(cmd=cmd)), role="actor", rank=0, world_size=1)
        def train():
            with p.step(1):
                with profile_stage("s"):
                    work()
                    pid = os.fork()
                    if pid == 0:
                        work()
                        sys.exit(0)   # the child unwinds the parent's with blocks
                    _, status = os.waitpid(pid, 0)
                    print("child", status)
        try:
            train()
        except SystemExit:   # only in the child, once the with blocks are unwound
            os._exit(0)  # torch's own exit hangs in a fork of a profiling process
        p.close()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "child 0" in result.stdout
    assert len(traces_ok(tmp_path)) == 1
    assert (tmp_path / "hook.out").read_text().split() == ["ran"]
    assert len([r for r in records(tmp_path) if r["kind"] == "hook"]) == 1


def test_profiler_in_process_not_running_after_tests() -> None:
    assert not torch_profiler_running()


# -- item 6: Ctrl-C during the export of the last profiled step ----------------------------
@pytest.mark.slow
def test_export_cut_short_on_the_writer_is_recorded_before_the_hook(tmp_path: Path) -> None:
    """torch's write of the events (on the writer's thread) stops half-way with an exception
    that is no ``Exception``: the trace is recorded incomplete, its temporaries are removed, and
    the hook still runs after that record and sees none of them; training is not interrupted."""
    result = run(
        tmp_path,
        f"""
        import torch.autograd.profiler
        real = torch.autograd.profiler.profile.export_chrome_trace
        def interrupted(self, path, *args, **kwargs):
            with open(path, "w") as f:
                f.write('{{"traceEvents": [')   # part of the file, then out
            raise KeyboardInterrupt
        cmd = f"ls -a {{save}} > {tmp_path}/hook.out"
        p = Profiler(cfg(steps=[1, 2], finish_hook=FinishHook(cmd=cmd)), role="actor", rank=0,
                     world_size=1)
        try:
            for step in (1, 2):
                if step == 2:
                    torch.autograd.profiler.profile.export_chrome_trace = interrupted
                with p.step(step), profile_stage("s"):
                    work()
        except KeyboardInterrupt:
            print("interrupted")
        torch.autograd.profiler.profile.export_chrome_trace = real
        p.close()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "interrupted" not in result.stdout
    found = sorted((r["step"], r["status"]) for r in records(tmp_path) if r["kind"] == "trace")
    assert found == [(1, "ok"), (2, "incomplete")]
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".profdsl-tmp")]
    assert leftovers == []
    hooks = [r for r in records(tmp_path) if r["kind"] == "hook"]
    assert [h["status"] for h in hooks] == ["ok"]
    listed = (tmp_path / "hook.out").read_text().split()
    assert not any(name.startswith(".profdsl-tmp") for name in listed)


# -- found in review: forks from threads, close from other threads, interrupted close ------
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_from_the_thread_owning_the_session_writes_no_duplicate(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        p = Profiler(cfg(), role="actor", rank=0, world_size=1)
        def train():
            with p.step(1), profile_stage("s"):
                work()
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
        t = threading.Thread(target=train); t.start(); t.join()
        p.close()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(traces_ok(tmp_path)) == 1
    assert [r["kind"] for r in records(tmp_path)] == ["trace"]


def test_close_from_another_thread_ends_the_session_at_the_owners_next_call(tmp_path: Path) -> None:
    profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
    with profiler.step(1), profile_stage("s"):
        work()
        closer = threading.Thread(target=profiler.close)
        closer.start()
        closer.join(60)
    profiler.start(2)  # the owner's next call (ignored: closed) ends the session
    assert not torch_profiler_running()
    from profdsl._runtime.process import PROCESS

    assert PROCESS.writer.wait(timeout=120)  # its trace is written in the background
    assert len(traces_ok(tmp_path)) == 1


@pytest.mark.slow
def test_ctrl_c_while_close_waits_for_the_hook(tmp_path: Path) -> None:
    """Ctrl-C while ``close()`` waits for the hook: the hook's process group is killed and the
    run recorded ``interrupted``; the interrupt goes on; a second ``close()`` runs nothing more."""
    result = run(
        tmp_path,
        f"""
        import signal
        cmd = "echo $$ > {tmp_path}/hook.pid; exec sleep 300"
        p = Profiler(cfg(finish_hook=FinishHook(cmd=cmd, background=True)), role="actor", rank=0,
                     world_size=1)
        with p.step(1), profile_stage("s"):
            work()
        threading.Timer(2.0, signal.raise_signal, args=(signal.SIGINT,)).start()
        try:
            p.close()
        except KeyboardInterrupt:
            print("interrupted")
        p.close()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "interrupted" in result.stdout
    assert [(r["kind"], r["status"]) for r in records(tmp_path)] == [("trace", "ok"), ("hook", "interrupted")]
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "hook.pid").read_text()), 0)


def test_interrupt_in_the_hook_event_leaves_the_hook_owed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C at the last step's boundary, before the hook event: the hook stays owed, and
    ``close()`` runs it after the trace."""
    from profdsl._runtime.slot.slot import CaptureSlot

    real = CaptureSlot.release

    def release(self: CaptureSlot, claim: Any) -> None:
        real(self, claim)
        raise KeyboardInterrupt  # delivered as the step's capture is released

    monkeypatch.setattr(CaptureSlot, "release", release)
    profiler = Profiler(hook_config(tmp_path), role="actor", rank=0, world_size=1)
    with pytest.raises(KeyboardInterrupt):
        with profiler.step(1), profile_stage("s"):
            work()
    monkeypatch.setattr(CaptureSlot, "release", real)
    assert not (tmp_path / "hook.out").exists()
    profiler.close()
    seen, now = hook_then_traces(tmp_path)
    assert len(now) == 1 and seen == now


@pytest.mark.slow
def test_background_hook_due_at_exit_runs_to_its_end(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        f"""
        cmd = "sleep 1; echo ran > {tmp_path}/hook.out"
        p = Profiler(cfg(finish_hook=FinishHook(cmd=cmd, background=True)), role="actor", rank=0,
                     world_size=1)
        started, never = threading.Event(), threading.Event()
        def begin():
            p.start(1); work(); started.set(); never.wait()
        threading.Thread(target=begin, daemon=True).start()
        started.wait(60)
        p.stop(); p.close()
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "hook.out").read_text().split() == ["ran"]
    assert [r["status"] for r in records(tmp_path) if r["kind"] == "hook"] == ["ok"]


# -- found in review: re-created profilers ------------------------------------------------
def test_profiler_of_another_rank_or_disabled_replaces_nothing(tmp_path: Path) -> None:
    first = Profiler(config(tmp_path), role="actor", rank=0, world_size=2)
    Profiler(config(tmp_path), role="actor", rank=1, world_size=2)
    Profiler(config(tmp_path, enable=False), role="actor", rank=0, world_size=2)
    with first.step(1), profile_stage("s"):
        work()
    first.close()
    assert [(r["rank"], r["status"]) for r in records(tmp_path)] == [(0, "ok")]


def test_hook_after_a_recreated_profiler_names_every_profiled_step(tmp_path: Path) -> None:
    cmd = f"echo $PROFDSL_STEPS > {tmp_path}/steps.out"
    first = Profiler(
        config(tmp_path, steps=[1, 2, 3], finish_hook=FinishHook(cmd=cmd)), role="actor", rank=0, world_size=1
    )
    with first.step(1), profile_stage("s"):
        work()
    second = Profiler(
        config(tmp_path, steps=[1, 2, 3], finish_hook=FinishHook(cmd=cmd)), role="actor", rank=0, world_size=1
    )
    for step in (2, 3):
        with second.step(step), profile_stage("s"):
            work()
    from profdsl._runtime.process import PROCESS

    assert PROCESS.writer.wait(timeout=120)
    assert (tmp_path / "steps.out").read_text().split() == ["1,2,3"]
    first.close()
    second.close()


# -- found in review: stopped early, thread idents, another role's capture -----------------
def test_stage_that_ends_on_its_own_thread_after_stop_is_not_cut_short(tmp_path: Path) -> None:
    profiler = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
    stop_while_a_stage_is_open(profiler)
    found = traces_ok(tmp_path)
    assert len(found) == 1 and "note" not in found[0]


def test_step_whose_thread_ended_is_not_restarted_by_a_new_thread(tmp_path: Path) -> None:
    """An event loop's thread begins the step (its session is its own) and ends: the session
    stops there; regions of later threads are recorded missed, and no new session starts."""
    import asyncio

    profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)

    async def started() -> None:
        profiler.start(1)
        with profile_stage("a"):
            work()

    def begin() -> None:
        asyncio.run(started())

    def later() -> None:
        with profile_stage("b"):
            work()

    run_threads(begin)
    for _ in range(3):  # new threads, some of which get the ended thread's ident
        run_threads(later)
    profiler.stop()
    profiler.close()
    assert len(traces_ok(tmp_path)) == 1
    missed = [r for r in records(tmp_path) if r["status"] == "incomplete"]
    assert [(r["step"], r["stage"]) for r in missed] == [(1, "b")]


def test_stage_while_another_roles_capture_holds_the_slot(tmp_path: Path) -> None:
    options = TorchOptions(contents=["cpu"])
    actor = Profiler(config(tmp_path, discrete=True, torch=options), role="actor", rank=0, world_size=1)
    ref = Profiler(config(tmp_path, torch=options), role="ref", rank=0, world_size=1)
    inside, go = threading.Event(), threading.Event()

    def actor_stage() -> None:
        with actor.step(1), profile_stage("update_actor", role="actor"):
            work()
            inside.set()
            go.wait(60)

    thread = threading.Thread(target=actor_stage)
    thread.start()
    assert inside.wait(60)
    with ref.step(1), profile_stage("compute_ref", role="ref"):
        work()
    go.set()
    thread.join(60)
    actor.close()
    ref.close()
    missed = [r for r in records(tmp_path) if r["status"] == "incomplete"]
    assert [(r["role"], r["stage"]) for r in missed] == [("ref", "compute_ref")]
    assert "update_actor" in missed[0]["reason"] and "all_threads" not in missed[0]["reason"]
    from profdsl.analysis._reader import header

    actor_trace = [r for r in traces_ok(tmp_path) if r["role"] == "actor"][0]
    regions = header(tmp_path / actor_trace["path"])["profdsl"]["regions"]
    assert "compute_ref" not in regions["stages"]


# -- torch: a region spanning a schedule's window boundary corrupts its heap ---------------
@pytest.mark.slow
def test_scheduled_stage_region_never_spans_a_window_boundary(tmp_path: Path) -> None:
    """The stage's own region stays open across its mini-batches; torch's schedule steps
    between them. Without closing it around each step the process crashed (exit 139 or 134)
    in about half of these runs, anywhere later."""
    result = run(
        tmp_path,
        """
        import torch
        from profdsl import Schedule
        options = TorchOptions(contents=["cpu"], schedule=Schedule(active=2))
        p = Profiler(cfg(steps=list(range(1, 41)), discrete=True, torch=options), role="actor",
                     rank=0, world_size=1)
        model = torch.nn.Linear(8, 4)
        @profile_stage("update_actor", scheduled=True)
        def update(x):
            with profile_stage("inner"):
                for chunk in mini_batch_window(x.chunk(4)):
                    model(chunk).pow(2).mean().backward()
        for step in range(1, 41):
            with p.step(step):
                update(torch.ones(64, 8))
        p.close()
        print("done")
    """,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "done" in result.stdout
    found = traces_ok(tmp_path)
    assert len(found) == 80  # two windows of two mini-batches per step
