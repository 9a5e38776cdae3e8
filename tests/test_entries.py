"""Each entry of a DSL object keeps its own state: one `profile_stage` or
`rollout_window` object shared by threads and asyncio tasks, re-entered, or re-entered after its
profiler stopped, closes exactly what each entry opened."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, profile_stage, rollout_window
from profdsl.manifest import read_manifest

from .fake_engines import CountingEngine as Engine
from .profiling import config, run_threads, work
from .traces import events, names, parsed

torch = pytest.importorskip("torch")

#: A module-level stage object, the pattern the defect was found with.
SHARED = profile_stage("shared")


class TestSharedAcrossThreads:
    """Two threads inside one shared stage object at once, in discrete mode."""

    def test_each_thread_closes_its_own_entry(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """Thread A opens the stage's capture; thread B enters meanwhile (no capture of its own)
        and leaves last. A's exit ends A's trace, never B's region; nothing is left running, and
        a later stage still gets its trace."""
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

        def a() -> None:
            with SHARED:
                a_in.set()
                b_in.wait(60)
                work()
            a_out.set()

        def b() -> None:
            a_in.wait(60)
            with SHARED:
                b_in.set()
                a_out.wait(60)
                work()

        profiler = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.ERROR, logger="profdsl"), profiler, profiler.step(1):
            run_threads(a, b)
            with profile_stage("later"):
                work()
        assert "started on another thread" not in caplog.text
        assert sorted(n.stage for n, _ in parsed(tmp_path)) == ["later", "shared"]
        skipped = [r for r in read_manifest(tmp_path) if r["status"] == "skipped"]
        assert [r["stage"] for r in skipped] == ["shared"]  # B's entry: recorded, no trace


class TestSharedAcrossTasks:
    """Two asyncio tasks inside one shared stage object at once, on one thread."""

    def test_first_exit_ends_the_first_entrys_capture(self, tmp_path: Path) -> None:
        """Task A owns the stage's capture; task B enters meanwhile and leaves last. Once A has
        left, its trace is written and a new stage in A gets a trace of its own."""

        async def task_a(b_in: asyncio.Event) -> None:
            with SHARED:
                work()
                await b_in.wait()
            with profile_stage("after_a"):
                work()

        async def task_b(b_in: asyncio.Event) -> None:
            with SHARED:
                b_in.set()
                for _ in range(5):
                    await asyncio.sleep(0)

        async def main() -> None:
            b_in = asyncio.Event()
            await asyncio.gather(task_a(b_in), task_b(b_in))

        profiler = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1):
            asyncio.run(main())
        assert sorted(n.stage for n, _ in parsed(tmp_path)) == ["after-a", "shared"]

    def test_continuous_regions_end_with_their_own_task(self, tmp_path: Path) -> None:
        """Continuous mode: each task's region of the shared object spans its own task's work.
        A, entered first, leaves first: its region must end before B's."""
        order: list[str] = []

        async def task(label: str, hold: int) -> None:
            with SHARED:
                for _ in range(hold):
                    await asyncio.sleep(0)
                order.append(label)

        async def main() -> None:
            await asyncio.gather(task("a", 1), task("b", 6))

        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1):
            asyncio.run(main())
        [(_, trace)] = parsed(tmp_path)
        regions = sorted(events(trace, "shared"), key=lambda e: e["ts"])
        assert order == ["a", "b"] and len(regions) == 2
        (a_start, a_end), (b_start, b_end) = ((e["ts"], e["ts"] + e["dur"]) for e in regions)
        assert a_start <= b_start and a_end < b_end


class TestReentry:
    """One object entered again inside itself."""

    def test_nested_reentry_nests(self, tmp_path: Path) -> None:
        """Re-entering a stage object inside itself gives two nested regions of its name."""
        stage = profile_stage("again")
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1), stage:
            with stage:
                work()
            work()
        [(_, trace)] = parsed(tmp_path)
        outer, inner = sorted(events(trace, "again"), key=lambda e: (e["ts"], -e["dur"]))
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
        assert outer["dur"] > inner["dur"]

    def test_reentry_after_its_profiler_stopped(self, tmp_path: Path) -> None:
        """actor and ref share a session; a stage of actor's is re-entered after actor stopped
        (ref still records). The inner entry opens nothing, and its exit must not end the outer
        entry's region: the outer region still spans the work done after the inner block."""
        actor = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
        stage = profile_stage("actor_stage", profiler=actor)
        with actor, ref:
            ref.start(1)
            actor.start(1)
            with stage:
                work()
                actor.stop()
                with stage:  # opens nothing: actor is not profiling any more
                    work()
                with profile_stage("late", profiler=ref):
                    work()
            ref.stop()
        [(_, trace)] = parsed(tmp_path)
        [outer] = events(trace, "actor_stage")
        [late] = events(trace, "late")
        assert outer["ts"] <= late["ts"] and late["ts"] + late["dur"] <= outer["ts"] + outer["dur"]

    def test_nothing_stays_open(self, tmp_path: Path) -> None:
        """After every entry left, a new step of the same stage object behaves as the first."""
        stage = profile_stage("again")
        cfg = config(tmp_path, steps=[1, 2])
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            with profiler.step(1), stage:
                profiler.stop()
                with stage:
                    pass
            with profiler.step(2), stage:
                work()
        assert [names(t, "again") for _, t in parsed(tmp_path)] == [["again"], ["again"]]


class TestOutOfOrder:
    """Entries closed out of order or in another context than they opened in."""

    def test_generator_finished_on_another_thread(self, tmp_path: Path) -> None:
        """A generator's `with` block entered on one thread and left on another: the entry is
        closed there, and nothing stays open (the off path is back to one attribute check)."""
        from profdsl._runtime.process import PROCESS

        def produce() -> Any:
            with profile_stage("produce"):
                yield 1
                yield 2

        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1):
            gen = produce()
            assert next(gen) == 1
            run_threads(lambda: list(gen))
        assert not PROCESS.registry.opened and PROCESS.registry.on is False

    def test_decorated_generators_leave_nothing_on_the_stack(self, tmp_path: Path) -> None:
        """A decorated generator stage whose body holds a `with` across its yields: after each
        call the caller's stack is as it was (entries keep their identity when removed out of
        order)."""
        from profdsl._runtime import context

        inner = profile_stage("inner")

        @profile_stage("produce")
        def produce() -> Any:
            with inner:
                yield 1
                yield 2

        profiler = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1):
            depths = []
            for _ in range(3):
                assert list(produce()) == [1, 2]
                depths.append(sum(1 for _ in context.walk(context.top())))
        assert depths == [0, 0, 0]
        assert [n.stage for n, _ in parsed(tmp_path)] == ["produce"] * 3


class TestSharedRolloutWindow:
    """`rollout_window`'s with form keeps per-entry state too."""

    def test_reentry_after_the_step_stopped(self, tmp_path: Path) -> None:
        """The outer entry started the engine; an inner entry after the step stopped starts
        nothing, and its exit must not stop the engine: the outer exit does."""
        engine = Engine()
        cfg = config(tmp_path, relocate_results=False)
        window = rollout_window([engine])
        with Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as clock:
            clock.start(1)
            with window:
                clock.stop()
                with window:
                    pass
                assert engine.calls == ["start"]
            assert engine.calls == ["start", "stop"]

    def test_nested_reentry_starts_nothing(self, tmp_path: Path) -> None:
        """A decorated generate() called inside a `with` of the same window: the engines are
        started once and stopped once, by the outer exit."""
        engine = Engine()
        cfg = config(tmp_path, relocate_results=False)
        window = rollout_window([engine])

        @window
        def generate() -> str:
            return "x"

        with Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as clock:
            with clock.step(1), window:
                assert generate() == "x"
                assert engine.calls == ["start"]
        assert engine.calls == ["start", "stop"]

    def test_shared_across_threads(self, tmp_path: Path) -> None:
        """Thread A starts the engine; the step stops; thread B enters (starting nothing) and
        leaves last. A's exit stops A's engine; B's exit stops nothing."""
        engine = Engine()
        cfg = config(tmp_path, relocate_results=False)
        window = rollout_window([engine])
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
        seen: list[list[str]] = []
        clock = Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False)

        def a() -> None:
            with window:
                a_in.set()
                b_in.wait(60)
            seen.append(list(engine.calls))
            a_out.set()

        def b() -> None:
            a_in.wait(60)
            clock.stop()
            with window:
                b_in.set()
                a_out.wait(60)

        with clock:
            clock.start(1)
            run_threads(a, b)
        assert seen == [["start", "stop"]]
        assert engine.calls == ["start", "stop"]
