"""The runtime under a hostile user: signals inside torch's start and stop, a capture that cannot
start, a profiler re-created mid-step, concurrent calls on one profiler, a reset mid-flight, a
background hook of one save_path beside another role's steps, fused roles with two save_paths,
and a re-entrant close (a signal handler that closes while profdsl holds its own locks).

Each case was found by a hostile review of runtime v2; the signals run in this interpreter's main
thread (pytest's), their handlers restored afterwards.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from profdsl import FinishHook, Profiler, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.manifest import read_manifest

from .profiling import config, torch_profiler_running, work

torch = pytest.importorskip("torch")


def statuses(folder: Path, kind: str) -> list[tuple[Any, str]]:
    return [(r.get("step"), r["status"]) for r in read_manifest(folder) if r["kind"] == kind]


@pytest.fixture
def handler() -> Iterator[Callable[[int, Callable[..., None]], None]]:
    """Install a signal handler for the test; the previous ones come back afterwards."""
    saved: dict[int, Any] = {}

    def install(signum: int, fn: Callable[..., None]) -> None:
        saved.setdefault(signum, signal.getsignal(signum))
        signal.signal(signum, fn)

    yield install
    for signum, previous in saved.items():
        signal.signal(signum, previous)


def raise_once(monkeypatch: pytest.MonkeyPatch, method: str, signum: int, *, after: bool) -> list[int]:
    """Make torch's ``profile.<method>`` raise ``signum`` at this process once (before or after
    the real call); returns a list that holds 1 once it fired."""
    real = getattr(torch.profiler.profile, method)
    fired: list[int] = []

    def patched(self: Any) -> Any:
        if not after and not fired:
            fired.append(1)
            signal.raise_signal(signum)
        result = real(self)
        if after and not fired:
            fired.append(1)
            signal.raise_signal(signum)
        return result

    monkeypatch.setattr(torch.profiler.profile, method, patched)
    return fired


def sys_exit(signum: int, frame: object) -> None:
    raise SystemExit(f"signal {signum}")


def test_a_sigterm_handler_raising_inside_torchs_stop_keeps_both_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handler: Any
) -> None:
    """A trainer's SIGTERM handler that raises (torchelastic's) lands inside ``prof.stop()``: the
    exit reaches the loop once, after the step ended; no trace is lost and torch is stopped."""
    fired = raise_once(monkeypatch, "stop", signal.SIGTERM, after=False)
    handler(signal.SIGTERM, sys_exit)
    profiler = Profiler(
        config(tmp_path, steps=[1, 2], finish_hook=FinishHook(cmd="true")), role="actor", rank=0, world_size=1
    )
    caught = []
    for step in (1, 2):
        profiler.start(step)
        profile_stage(f"stage{step}")(work)()
        try:
            profiler.stop()
        except SystemExit as exc:
            caught.append((step, str(exc), profiler.current_step))
    profiler.close()
    assert fired and caught == [(1, f"signal {int(signal.SIGTERM)}", None)]
    assert statuses(tmp_path, "trace") == [(1, "ok"), (2, "ok")]
    assert statuses(tmp_path, "hook") == [(None, "ok")]
    assert not torch_profiler_running()


def test_ctrl_c_at_the_end_of_torchs_start_comes_after_the_step_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handler: Any
) -> None:
    """Ctrl-C lands just after torch's ``prof.start()``: ``start()`` raises it once the step has
    begun, so the loop that goes on stops that step as usual and both traces are kept."""
    fired = raise_once(monkeypatch, "start", signal.SIGINT, after=True)
    handler(signal.SIGINT, signal.default_int_handler)
    profiler = Profiler(config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
    begun = []
    for step in (1, 2):
        try:
            profiler.start(step)
        except KeyboardInterrupt:
            begun.append(profiler.current_step)
        profile_stage(f"stage{step}")(work)()
        profiler.stop()
    profiler.close()
    assert fired and begun == [1]
    assert statuses(tmp_path, "trace") == [(1, "ok"), (2, "ok")]
    assert not torch_profiler_running()


def test_a_capture_that_cannot_start_is_recorded_failed_and_the_next_step_is_kept(tmp_path: Path) -> None:
    """Another torch profiler runs during step 1 (torch allows one): step 1's trace is recorded
    ``failed`` with the reason (``check`` can tell), and step 2 is captured as usual."""
    profiler = Profiler(config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
    theirs = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    theirs.start()
    try:
        profiler.start(1)
        work()
        profiler.stop()
    finally:
        theirs.stop()
    profiler.start(2)
    profile_stage("s2")(work)()
    profiler.stop()
    profiler.close()
    records = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
    assert [(r["step"], r["status"]) for r in records] == [(1, "failed"), (2, "ok")]
    assert "another torch profiler" in records[0]["error"]
    assert not torch_profiler_running()


def test_a_profiler_re_created_mid_step_closes_the_earlier_one(tmp_path: Path) -> None:
    """A trainer re-initialised mid-step drops its profiler without stop() or close(): the new
    one profiles steps 1 and 2; the earlier step 1 is kept too, under its own name, and the hook
    runs once, after every trace."""
    saw = tmp_path.parent / f"{tmp_path.name}-hook.txt"
    cfg = config(tmp_path, steps=[1, 2], finish_hook=FinishHook(cmd=f'ls "$PROFDSL_SAVE_PATH" > "{saw}"'))
    old = Profiler(cfg, role="actor", rank=0, world_size=1)
    old.start(1)
    profile_stage("old_stage")(work)()
    del old
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    for step in (1, 2):
        profiler.start(step)
        profile_stage(f"stage{step}")(work)()
        profiler.stop()
    profiler.close()
    traces = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
    assert sorted((r["step"], r["status"]) for r in traces) == [(1, "ok"), (1, "ok"), (2, "ok")]
    assert [r["status"] for r in read_manifest(tmp_path) if r["kind"] == "hook" and r["status"] == "ok"] == ["ok"]
    assert {r["path"] for r in traces} <= set(saw.read_text().split())
    assert not torch_profiler_running()


def test_two_threads_calling_one_profiler_at_once(tmp_path: Path) -> None:
    """A fused worker driven from two pool threads at once (a threaded actor, max_concurrency=2):
    start, a stage and stop race on one profiler; each profiled step is traced once."""
    profiler = Profiler(
        config(tmp_path, steps=[1, 2, 3, 4], finish_hook=FinishHook(cmd="true")), role="actor", rank=0, world_size=1
    )
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def alias(name: str) -> None:
        try:
            for step in range(1, 7):
                barrier.wait(timeout=60)
                profiler.start(step)
                with profile_stage(name):
                    work()
                barrier.wait(timeout=60)
                profiler.stop()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=alias, args=(name,)) for name in ("actor", "ref")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    profiler.close()
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert sorted(statuses(tmp_path, "trace")) == [(1, "ok"), (2, "ok"), (3, "ok"), (4, "ok")]
    assert statuses(tmp_path, "hook") == [(None, "ok")]
    assert not torch_profiler_running()


def test_reset_while_a_stage_is_open_on_another_thread_leaves_no_profiler_running(tmp_path: Path) -> None:
    """``profdsl.testing.reset()`` while a discrete stage is open on a worker thread: the stage
    ends normally and no torch profiler is left running."""
    import profdsl.testing

    profiler = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
    profiler.start(1)
    inside, go = threading.Event(), threading.Event()

    def stage() -> None:
        with profile_stage("gen"):
            work()
            inside.set()
            go.wait(60)
            work()

    thread = threading.Thread(target=stage)
    thread.start()
    assert inside.wait(60)
    profdsl.testing.reset()
    go.set()
    thread.join(60)
    profiler.stop()
    profiler.close()
    assert not thread.is_alive() and not torch_profiler_running()
    assert PROCESS.slot.current is None


def test_close_while_a_stage_is_open_on_a_thread_that_lives_on_leaves_no_profiler_running(tmp_path: Path) -> None:
    """``close()`` while a discrete stage is open on a pool thread (which never comes back to
    profdsl but for the stage's exit): the stage's capture is recorded lost, and its exit, on
    its owner, stops it (it used to run on until the thread ended: the next profiler's capture
    was refused)."""
    profiler = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
    profiler.start(1)
    inside, go = threading.Event(), threading.Event()

    def stage() -> None:
        with profile_stage("gen"):
            work()
            inside.set()
            go.wait(60)

    with ThreadPoolExecutor(1) as pool:
        left = pool.submit(stage)
        assert inside.wait(60)
        profiler.close()
        go.set()
        left.result(60)
        assert not torch_profiler_running()
    # The loss record is the writer's, handed over at the stage's exit (after close() returned):
    # waited for, bounded.
    deadline = time.monotonic() + 60
    while not statuses(tmp_path, "trace") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [status for _, status in statuses(tmp_path, "trace")] == ["failed"]


def test_a_background_hook_does_not_hold_up_another_roles_steps(tmp_path: Path) -> None:
    """ref is done after step 1 and its hook (an upload) runs in the background; it waits until
    actor's steps 2..4 are over, which they can be only if nothing of theirs waits for it."""
    go = tmp_path / "go"
    said = tmp_path / "said"
    wait_for_go = (
        f'for i in $(seq 600); do [ -f "{go}" ] && echo go > "{said}" && exit 0; '
        f'sleep 0.1; done; echo timeout > "{said}"'
    )
    ref = Profiler(
        config(tmp_path / "ref", finish_hook=FinishHook(cmd=wait_for_go, background=True)),
        role="ref",
        rank=0,
        world_size=1,
    )
    actor = Profiler(config(tmp_path / "actor", steps=[1, 2, 3, 4]), role="actor", rank=0, world_size=1)
    for step in range(1, 5):
        ref.start(step)
        actor.start(step)
        profile_stage("update", role="actor")(work)()
        actor.stop()
        ref.stop()
    go.touch()
    actor.close()
    ref.close()
    assert said.read_text().strip() == "go"
    assert statuses(tmp_path / "ref", "hook") == [(None, "ok")]
    assert [status for _, status in statuses(tmp_path / "actor", "trace")].count("ok") >= 3


def test_fused_roles_with_two_save_paths_say_where_their_shared_capture_went(tmp_path: Path) -> None:
    """actor and ref of one process share one capture but write to two save_paths: the trace
    lands in the folder of the role that opened it, and the other folder records where."""
    actor = Profiler(config(tmp_path / "actor"), role="actor", rank=0, world_size=1)
    ref = Profiler(config(tmp_path / "ref"), role="ref", rank=0, world_size=1)
    ref.start(1)
    actor.start(1)
    with profile_stage("update_actor", role="actor"):
        work()
    actor.stop()
    ref.stop()
    actor.close()
    ref.close()
    assert statuses(tmp_path / "ref", "trace") == [(1, "ok")]
    skipped = [r for r in read_manifest(tmp_path / "actor") if r["kind"] == "trace"]
    assert [(r["step"], r["status"]) for r in skipped] == [(1, "skipped")]
    assert str(tmp_path / "ref") in skipped[0]["reason"]


def test_close_from_inside_profdsl_on_the_same_thread_does_not_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal handler that closes the profiler runs while profdsl holds its own locks (here:
    the registry's, inside ``start()``): the re-entrant close completes and the trace is kept."""
    from profdsl._runtime.registry import Registry

    profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
    real = Registry._update
    closed: list[bool] = []

    def update(self: Registry) -> None:
        real(self)
        if not closed and any(s.recorder for s in self.steps):
            closed.append(True)
            profiler.close()  # what a SIGTERM handler would do here

    monkeypatch.setattr(Registry, "_update", update)

    def loop() -> None:
        profiler.start(1)
        profile_stage("s")(work)()
        profiler.stop()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive() and closed == [True]
    profiler.close()
    assert statuses(tmp_path, "trace") == [(1, "ok")]
    assert not torch_profiler_running()
