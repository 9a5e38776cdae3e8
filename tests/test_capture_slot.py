"""The process's one capture slot under threads and failures (`profdsl._runtime.slot`):
no session is driven from a thread that does not own it, none is left running or lost, and
every part of a step keeps the step's name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl._runtime.process import PROCESS

from .profiling import config, records, torch_profiler_running, work
from .traces import names, parsed

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


def regions(folder: Path) -> list[tuple[Any, ...]]:
    """(role, step, part, profdsl regions in time order) of each trace, sorted."""
    found = []
    for name, trace in parsed(folder):
        known = set(trace["profdsl"]["regions"]["stages"])
        found.append(
            (name.role, name.step, -1 if name.part is None else name.part, tuple(n for n in names(trace) if n in known))
        )
    return sorted(found)


def in_thread(target: Any, name: str = "helper") -> threading.Thread:
    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread


@pytest.mark.slow
def test_mini_batch_on_a_worker_thread_does_not_touch_the_session(tmp_path: Path) -> None:
    """A scheduled stage's mini-batches run on worker threads (`asyncio.to_thread` copies the
    context): torch's schedule is never stepped from there (it crashed the process), and the
    process exits cleanly."""
    script = textwrap.dedent(f"""
        import asyncio, torch
        from profdsl import Profiler, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage
        cfg = ProfilerConfig(enable=True, steps=[1], discrete=True, save_path={str(tmp_path)!r},
                             torch=TorchOptions(contents=["cpu"], schedule=Schedule(active=2)))
        def train_mb():
            with mini_batch_window():
                torch.ones(8).sum()
        @profile_stage("update_actor", scheduled=True)
        async def update():
            for _ in range(4):
                await asyncio.to_thread(train_mb)
            with mini_batch_window():   # one on the stage's own thread
                torch.ones(8).sum()
        with Profiler(cfg, role="actor", rank=0, world_size=1) as p, p.step(1):
            asyncio.run(update())
        print("done")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]
    assert "its capture runs on another thread" in done.stderr
    # Only the stage's own-thread mini-batch numbers and drives the schedule: window mb0.
    assert [(n.window, names(t, "mini_batch")) for n, t in parsed(tmp_path)] == [((0, 0), ["mini_batch0"])]


class TestForeignStop:
    """A continuous step stopped from another thread is left for its own thread, then flushed
    there: never lost, never merged with the next step."""

    def stop_elsewhere(self, profiler: Profiler) -> None:
        in_thread(profiler.stop).join(timeout=60)

    def test_flushed_at_close_on_its_own_thread(self, tmp_path: Path) -> None:
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        profiler.start(1)
        profile_stage("s1")(work)()
        self.stop_elsewhere(profiler)
        profiler.close()
        assert regions(tmp_path) == [("actor", 1, -1, ("s1",))]
        assert PROCESS.slot.current is None and not torch_profiler_running()

    def test_next_step_is_not_merged_into_it(self, tmp_path: Path) -> None:
        profiler = Profiler(config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
        profiler.start(1)
        profile_stage("s1")(work)()
        self.stop_elsewhere(profiler)
        with profiler.step(2):
            profile_stage("s2")(work)()
        profiler.close()
        assert regions(tmp_path) == [("actor", 1, -1, ("s1",)), ("actor", 2, -1, ("s2",))]


def test_step_resumes_on_its_own_thread(tmp_path: Path) -> None:
    """ref (continuous, main thread) starts its step while actor's discrete stage on another
    thread holds the slot; when the stage ends there, ref's step starts on ref's thread, and its
    trace is written."""
    ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
    actor = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
    in_stage, go = threading.Event(), threading.Event()

    def stage() -> None:
        with profile_stage("update_actor", role="actor"):
            in_stage.set()
            go.wait(60)
            work()

    with ref, actor:
        actor.start(1)
        thread = in_thread(stage)
        in_stage.wait(60)
        ref.start(1)
        go.set()
        thread.join(timeout=60)
        profile_stage("compute_ref", role="ref")(work)()
        ref.stop()
        actor.stop()
    assert regions(tmp_path) == [("actor", 1, -1, ("update_actor",)), ("ref", 1, -1, ("compute_ref",))]
    assert PROCESS.slot.current is None and not torch_profiler_running()


def test_a_starting_step_is_not_cut_from_another_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While ref's step session is still starting on its thread, a discrete stage on another
    thread is refused the slot (it must not cut a session that does not exist yet): ref's trace
    is written whole and nothing is left running."""
    from profdsl._capture.torch_session import TorchBackend

    real_open = TorchBackend.open
    starting = threading.Event()

    def slow_open(self: TorchBackend, **kwargs: Any) -> Any:
        if threading.current_thread().name == "ref":
            starting.set()
            time.sleep(0.3)
        return real_open(self, **kwargs)

    monkeypatch.setattr(TorchBackend, "open", slow_open)
    ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
    actor = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
    stage_done = threading.Event()

    def ref_thread() -> None:
        ref.start(1)
        profile_stage("compute_ref", role="ref")(work)()
        stage_done.wait(60)
        ref.stop()

    with actor:
        actor.start(1)
        thread = in_thread(ref_thread, name="ref")
        starting.wait(60)
        profile_stage("update_actor", role="actor")(work)()  # refused: the slot is ref's
        stage_done.set()
        thread.join(timeout=60)
        actor.stop()
    ref.close()
    assert regions(tmp_path) == [("ref", 1, -1, ("compute_ref",))]
    assert PROCESS.slot.current is None and not torch_profiler_running()


def test_step_resumes_when_the_cutting_stage_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A discrete stage cuts ref's step, then its own session fails to start: ref's step goes on
    as the next part, so nothing ref runs afterwards is lost."""
    from profdsl._capture.base import CaptureRefusedError
    from profdsl._capture.torch_session import TorchBackend

    real_open = TorchBackend.open

    def flaky_open(self: TorchBackend, **kwargs: Any) -> Any:
        if kwargs["describe"](None).get("stage") == "update_actor":
            raise CaptureRefusedError("refused for the test")
        return real_open(self, **kwargs)

    monkeypatch.setattr(TorchBackend, "open", flaky_open)
    ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
    actor = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
    with ref, actor, ref.step(1), actor.step(1):
        profile_stage("before", role="ref")(work)()
        profile_stage("update_actor", role="actor")(work)()
        profile_stage("after", role="ref")(work)()
    # The stage without a capture of its own is a region where the work ran: in the step's part.
    assert regions(tmp_path) == [("ref", 1, 0, ("before",)), ("ref", 1, 1, ("update_actor", "after"))]


def test_parts_keep_the_step_sessions_name(tmp_path: Path) -> None:
    """actor and ref share a continuous step; a discrete stage of a third role cuts it after
    actor stopped: both parts are named as the step session was (actor's), listing its roles."""
    actor = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
    ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
    critic = Profiler(config(tmp_path, discrete=True), role="critic", rank=0, world_size=1)
    with actor, ref, critic, critic.step(1):
        actor.start(1)
        ref.start(1)
        profile_stage("a", role="actor")(work)()
        actor.stop()
        profile_stage("update_critic", role="critic")(work)()
        profile_stage("r", role="ref")(work)()
        ref.stop()
    found = [(n.role, n.part, t["profdsl"]["roles"]) for n, t in parsed(tmp_path) if n.stage is None]
    assert sorted(found) == [("actor", 0, ["actor", "ref"]), ("actor", 1, ["actor", "ref"])]


def test_mini_batches_on_another_thread_do_not_pause_the_step(tmp_path: Path) -> None:
    """A continuous step with a schedule: a left-out mini-batch on a helper thread must not
    leave collection paused for the owning thread (the stage after the update is recorded)."""
    cfg = config(tmp_path, torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=1, active=1)))

    def helper_mini_batch() -> None:
        with mini_batch_window():  # index 0: left out by the schedule
            work()

    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        with profile_stage("update_actor"):
            in_thread(helper_mini_batch).join(timeout=60)
            with mini_batch_window():  # index 1: recorded, on the owning thread
                work()
        profile_stage("after_update")(work)()
    [(_, trace)] = parsed(tmp_path)
    assert names(trace, "after_update") == ["after_update"]


def test_a_step_resumed_on_its_own_thread_records_a_fused_role_once(tmp_path: Path) -> None:
    """Fused continuous roles (each with its own save_path) claim while another thread's
    discrete stage holds the slot. That stage's end, on its thread, cannot start their step
    session (its owner is the claims' thread, which starts it at its next call): the role
    sharing the session gets one record saying where its trace is, not one per try."""
    actor = Profiler(config(tmp_path / "actor"), role="actor", rank=0, world_size=1)
    ref = Profiler(config(tmp_path / "ref"), role="ref", rank=0, world_size=1)
    critic = Profiler(config(tmp_path / "critic", discrete=True), role="critic", rank=0, world_size=1)
    opened, claimed = threading.Event(), threading.Event()

    def stage_elsewhere() -> None:
        with critic.step(1), profile_stage("update_critic", profiler=critic):
            opened.set()
            claimed.wait(timeout=60)
            work()

    thread = in_thread(stage_elsewhere)
    assert opened.wait(timeout=60)
    with actor.step(1), ref.step(1):
        claimed.set()
        thread.join(timeout=60)
        with profile_stage("update_actor", profiler=actor):
            work()
    for profiler in (actor, ref, critic):
        profiler.close()
    assert [r["role"] for r in records(tmp_path / "ref", "trace")] == ["ref"]
    assert [(r["role"], r["status"]) for r in records(tmp_path / "actor", "trace")] == [("actor", "ok")]


def test_a_cut_step_records_a_fused_role_once(tmp_path: Path) -> None:
    """Fused continuous roles, each with its own save_path, share a step session that a
    discrete stage cuts: the step is written in two parts into actor's save_path, and ref's
    gets one record saying where its trace is, not one per part."""
    actor = Profiler(config(tmp_path / "actor"), role="actor", rank=0, world_size=1)
    ref = Profiler(config(tmp_path / "ref"), role="ref", rank=0, world_size=1)
    critic = Profiler(config(tmp_path / "critic", discrete=True), role="critic", rank=0, world_size=1)
    with actor, ref, critic, critic.step(1), actor.step(1), ref.step(1):
        work()
        profile_stage("update_critic", role="critic")(work)()
        work()
    assert [r["role"] for r in records(tmp_path / "ref", "trace")] == ["ref"]
    assert [(r["role"], r["part"]) for r in records(tmp_path / "actor", "trace")] == [("actor", 0), ("actor", 1)]
