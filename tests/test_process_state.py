"""The process-state seam: one object (`profdsl._runtime.process.PROCESS`), one reset
(`profdsl.testing.reset`), one after-fork rule; region names belong to the session that saw them."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import profdsl.testing
from profdsl import FinishHook, Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage
from profdsl._runtime.process import PROCESS, Process
from profdsl.core._log import once

from .profiling import config, in_forked_child, torch_profiler_running
from .traces import parsed

torch = pytest.importorskip("torch")


class TestReset:
    """`profdsl.testing.reset()` returns profdsl to a fresh process's state."""

    def test_reset_forgets_everything(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        stage = profile_stage("left_open")
        profiler = Profiler(
            config(tmp_path / "a", finish_hook=FinishHook(cmd="true")), role="actor", rank=0, world_size=1
        )
        profiler.start(1)
        stage.__enter__()  # a with-entry a failing test never left
        once("reset-probe", logging.WARNING, "probe")
        assert PROCESS.live and any(s.recorder for s in PROCESS.registry.steps) and PROCESS.registry.on
        assert PROCESS.slot.current is not None and torch_profiler_running()

        profdsl.testing.reset()

        assert not PROCESS.live and PROCESS.registry.steps == ()
        assert not PROCESS.registry.opened and PROCESS.registry.on is False
        assert PROCESS.slot.current is None and not torch_profiler_running()
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            once("reset-probe", logging.WARNING, "probe again")
        assert "probe again" in caplog.text
        # A new profiler starts its own session; the old one's hook does not wait for anything.
        other = Profiler(config(tmp_path / "b"), role="actor", rank=0, world_size=1)
        with other, other.step(1), profile_stage("fresh"):
            pass
        assert [t["profdsl"]["regions"]["stages"] for _, t in parsed(tmp_path / "b")] == [["fresh"]]

    def test_reset_replaces_the_registry(self, tmp_path: Path) -> None:
        """The reset replaces the registry instead of scrubbing it in place: words made before it
        (a decorated function, a shared stage) read the new one at their next entry."""

        @profile_stage("decorated_before")
        def decorated() -> int:
            return 3

        shared = profile_stage("shared_before")
        before = PROCESS.registry
        profiler = Profiler(config(tmp_path / "a"), role="actor", rank=0, world_size=1)
        profiler.start(1)
        assert before.steps

        profdsl.testing.reset()

        assert PROCESS.registry is not before and PROCESS.registry.steps == () and not PROCESS.registry.on
        fresh = Profiler(config(tmp_path / "b"), role="actor", rank=0, world_size=1)
        with fresh, fresh.step(1):
            assert decorated() == 3
            with shared:
                pass
        [(_, trace)] = parsed(tmp_path / "b")
        assert sorted(trace["profdsl"]["regions"]["stages"]) == ["decorated_before", "shared_before"]

    def test_a_stage_open_on_a_thread_that_lives_on_ends_its_capture_after_the_reset(self, tmp_path: Path) -> None:
        """A discrete stage open on a pool thread (which outlives the test) across the reset:
        its exit still ends its capture there, so no torch profiler is left running for the
        next test, whose profiler captures as usual (the exit used to find the new registry off
        and do nothing: the next step's trace was lost, another torch profiler running)."""
        profiler = Profiler(config(tmp_path / "a", discrete=True), role="actor", rank=0, world_size=1)
        profiler.start(1)
        inside, go = threading.Event(), threading.Event()

        def stage() -> None:
            with profile_stage("gen"):
                inside.set()
                go.wait(60)

        with ThreadPoolExecutor(1) as pool:
            left = pool.submit(stage)
            assert inside.wait(60)
            profdsl.testing.reset()
            go.set()
            left.result(60)  # (raises what the exit raised)
            assert not torch_profiler_running() and not PROCESS.registry.on
            assert pool.submit(torch_profiler_running).result(60) is False  # the thread lives on

            profdsl.testing.reset()  # the next test
            fresh = Profiler(config(tmp_path / "b", discrete=True), role="actor", rank=0, world_size=1)
            with fresh, fresh.step(1):
                pool.submit(profile_stage("fresh")(torch.ones(2).sum)).result(60)
        assert [t["profdsl"]["stage"] for _, t in parsed(tmp_path / "b")] == ["fresh"]
        assert not (tmp_path / "a").exists() or parsed(tmp_path / "a") == []

    def test_an_entry_left_open_on_a_thread_that_lives_on_takes_nothing_of_a_later_step(self) -> None:
        """A timed stage open on a pool thread across the reset, then exited: the next test's
        step times its stages on that thread at the top of its own tree (they used to nest in
        the forgotten step's tree, under the stale entry: absent from the new step's metrics)."""
        metrics = ProfilerConfig(metrics=Metrics(enabled=True))
        profiler = Profiler(metrics, role="actor", rank=0, world_size=1)
        profiler.start(1)
        inside, go = threading.Event(), threading.Event()

        def stage() -> None:
            with profile_stage("left"):
                inside.set()
                go.wait(60)

        with ThreadPoolExecutor(1) as pool:
            left = pool.submit(stage)
            assert inside.wait(60)
            profdsl.testing.reset()
            go.set()
            left.result(60)

            profdsl.testing.reset()  # the next test
            fresh = Profiler(metrics, role="actor", rank=0, world_size=1)
            with fresh:
                with fresh.step(1):
                    pool.submit(profile_stage("fresh")(lambda: None)).result(60)
                    with profile_stage("main"):
                        pass
                counts = {k: v for k, v in fresh.metrics.items() if k.startswith("timing_count/")}
        assert counts == {"timing_count/fresh": 1, "timing_count/main": 1}


class TestOtherProcessState:
    """A profiler given its own process state (``Profiler(process=...)``) and passed to a DSL
    word as ``profiler=`` is what that word records into, although this process's registry has
    nothing on (the DSL used to test only this process's switch)."""

    def test_its_entries_are_recorded_and_timed(self, tmp_path: Path) -> None:
        cfg = config(tmp_path, metrics=Metrics(enabled=True))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1, process=Process())
        stage = profile_stage("in_with", profiler=profiler)

        @profile_stage("decorated", profiler=profiler)
        def decorated() -> int:
            return 7

        try:
            with profiler.step(1):
                assert PROCESS.registry.on is False and profiler.process.registry.on
                with stage:
                    torch.ones(2).sum()
                assert decorated() == 7
                assert [mb for mb in mini_batch_window([1, 2], profiler=profiler)] == [1, 2]
        finally:
            profiler.close()
        [(_, trace)] = parsed(tmp_path)
        assert sorted(trace["profdsl"]["regions"]["stages"]) == ["decorated", "in_with"]
        assert trace["profdsl"]["regions"]["mini_batches"] == ["mini_batch"]
        assert profiler.metrics["timing_count/in_with"] == 1 and profiler.metrics["timing_count/decorated"] == 1
        assert not profiler.process.registry.on and not profiler.process.registry.opened


class TestRegionNames:
    """Each trace lists the region names its own session saw, not a process-wide set."""

    def test_names_do_not_leak_into_later_sessions(self, tmp_path: Path) -> None:
        with Profiler(config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1) as profiler:
            for step, name in ((1, "first"), (2, "second")):
                with profiler.step(step), profile_stage(name):
                    torch.ones(2).sum()
        assert [t["profdsl"]["regions"]["stages"] for _, t in parsed(tmp_path)] == [["first"], ["second"]]


class TestManyThreads:
    """A shared stage object entered and left many times from many threads while profiling:
    every entry's state is its own, and once all have left, nothing stays open."""

    def test_balanced(self, tmp_path: Path) -> None:
        shared = profile_stage("busy")
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                for _ in range(50):
                    with shared:
                        with shared:
                            pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            threads = [threading.Thread(target=worker) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            assert not PROCESS.registry.opened
        assert not errors and PROCESS.registry.on is False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
class TestFork:
    """A child forked mid-step (a DataLoader worker) inherits none of the parent's profiling."""

    def test_child_profiles_nothing(self, tmp_path: Path) -> None:
        cfg = config(tmp_path, tool="nsys")  # no torch session to carry across the fork
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        profiler.start(1)
        assert any(s.recorder for s in PROCESS.registry.steps) and PROCESS.live
        state = in_forked_child(
            lambda: {
                "recorders": len([s for s in PROCESS.registry.steps if s.recorder]),
                "on": PROCESS.registry.on,
                "live": len(PROCESS.live),
                "current": PROCESS.slot.current is not None,
                "result": profile_stage("in_child")(lambda: 7)(),
            }
        )
        profiler.close()
        assert state == {"recorders": 0, "on": False, "live": 0, "current": False, "result": 7}


def test_process_state_lives_behind_one_object() -> None:
    """No profdsl module keeps mutable module-level state of its own (a lowercase name bound to a
    container, or any lock or set made at import); constant tables (UPPER_CASE) are allowed."""
    import ast

    root = Path(__file__).resolve().parents[1] / "profdsl"
    stateful_calls = {"Lock", "RLock", "set", "dict", "list", "WeakSet", "WeakKeyDictionary"}
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else ([node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
            )
            for target in targets:
                name = getattr(target, "id", "")
                value = node.value  # type: ignore[union-attr]
                call = getattr(getattr(value, "func", None), "attr", None) or getattr(
                    getattr(value, "func", None), "id", None
                )
                container = isinstance(value, (ast.List, ast.Dict, ast.Set))
                if name == "__all__":
                    continue
                if call in stateful_calls or (container and not name.isupper()):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert offenders == [], offenders
