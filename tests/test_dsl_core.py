"""Tests for the one DSL core (issue 21): the seven wrong answers the three implementations gave.

Each test here failed on 09faa7e, before the DSL words shared one annotation base, one
decorator, one entry object and one predicate; they use only the public API and the test
helpers, so they run on either tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli
from profdsl import Metrics, Profiler, mini_batch_window, profile_stage, rollout_window
from profdsl.integrations.verl import DistProfiler, DistProfilerExtension
from profdsl.manifest import read_manifest

from .fake_engines import CountingEngine as Engine
from .metrics_support import FakeClock, fake_clock
from .profiling import config, work

torch = pytest.importorskip("torch")


def summary_rows(folder: Path) -> list[dict[str, Any]]:
    """``profdsl summary FOLDER --json``, in-process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert profdsl._cli.main(["summary", str(folder), "--json"]) == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def paths(rows: list[dict[str, Any]]) -> dict[tuple[str, ...], int]:
    """Stage path → entries, summed over the rows (steps, ranks, traces)."""
    found: dict[tuple[str, ...], int] = {}
    for row in rows:
        key = tuple(row["path"])
        found[key] = found.get(key, 0) + row["count"]
    return found


@pytest.fixture
def driver(tmp_path: Path) -> Profiler:
    """A driver's step clock (captures nothing), timing its steps, on profiled step 1."""
    clock = Profiler(
        config(tmp_path, relocate_results=False, metrics=Metrics(enabled=True)),
        role="trainer",
        rank=0,
        world_size=1,
        capture=False,
    )
    yield clock
    clock.close()


class TestItem1DescriptorsEitherOrder:
    """`@rollout_window` above `@staticmethod` / `@classmethod` (and the two other words,
    both orders) calls the function, profiled or not."""

    @pytest.mark.parametrize("profiled", [False, True])
    def test_every_word_above_and_below(self, driver: Profiler, profiled: bool) -> None:
        log: list[str] = []
        window = rollout_window([Engine(log)])

        class Sampler:
            scale = 10

            @window
            @staticmethod
            def static_above(x: int) -> int:
                return x + 1

            @window
            @classmethod
            def class_above(cls, x: int) -> int:
                return x * cls.scale

            @classmethod
            @window
            def class_below(cls, x: int) -> int:
                return x * cls.scale + 1

            @mini_batch_window()
            @staticmethod
            def mb_static(x: int) -> int:
                return -x

            @profile_stage("s")
            @classmethod
            def stage_class(cls, x: int) -> int:
                return x - cls.scale

        if profiled:
            driver.start(1)
        got = [
            Sampler.static_above(1),
            Sampler().static_above(1),
            Sampler.class_above(2),
            Sampler().class_above(2),
            Sampler.class_below(2),
            Sampler.mb_static(3),
            Sampler().stage_class(4),
        ]
        if profiled:
            driver.stop()
        assert got == [2, 2, 20, 20, 21, -3, -6]
        assert log == (["start", "stop"] * 5 if profiled else [])


class TestItem2AsyncGeneratorWindow:
    """`@rollout_window` on an async generator: the engines run around the whole generation,
    and its time is the generation's."""

    def test_engines_span_the_generation(self, driver: Profiler, monkeypatch: pytest.MonkeyPatch) -> None:
        log: list[str] = []

        with fake_clock(monkeypatch) as clock:

            @rollout_window([Engine(log)], name="gen")
            async def generate(n: int) -> Any:
                for i in range(n):
                    await asyncio.sleep(0)
                    clock.advance(0.5)
                    log.append(f"item{i}")
                    yield i

            async def consume() -> list[int]:
                out = []
                async for item in generate(3):
                    clock.advance(8.0)  # the consumer's time is not generation
                    out.append(item)
                return out

            with driver.step(1):
                assert asyncio.run(consume()) == [0, 1, 2]
        assert log == ["start", "item0", "item1", "item2", "stop"]
        assert driver.metrics["timing_s/gen"] == 1.5
        assert driver.metrics["timing_count/gen"] == 1


class Worker(DistProfilerExtension):
    """A verl-style worker whose methods are annotated through the facade."""

    def __init__(self, cfg: Any) -> None:
        DistProfilerExtension.__init__(self, DistProfiler(rank=0, config=cfg, save_file_prefix="actor", world_size=1))

    @DistProfiler.annotate(color="red", role="update_actor")
    def update(self, clock: FakeClock) -> int:
        clock.advance(2.0)
        return 7

    @DistProfiler.annotate(role="generate")
    async def generate(self, clock: FakeClock) -> int:
        await asyncio.sleep(0)
        clock.advance(1.0)
        return 3


class TestItem3FacadeIsTimed:
    """`DistProfiler.annotate` is timed by the always-on metrics, whether or not the step is
    profiled."""

    @pytest.mark.parametrize("enable", [False, True])
    def test_annotated_methods_are_timed(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enable: bool) -> None:
        worker = Worker(config(tmp_path, enable=enable, metrics=Metrics(enabled=True)))
        with fake_clock(monkeypatch) as clock:
            worker.start_profile(profile_step=1)
            assert worker.update(clock) == 7
            assert asyncio.run(worker.generate(clock)) == 3
            worker.stop_profile()
        worker.finish_profile()
        metrics = worker.profiler.profiler.metrics  # type: ignore[union-attr]
        assert (metrics["timing_s/update_actor"], metrics["timing_count/update_actor"]) == (2.0, 1)
        assert (metrics["timing_s/generate"], metrics["timing_count/generate"]) == (1.0, 1)


def _async_update() -> Any:
    @profile_stage("update")
    async def update() -> None:
        for _ in mini_batch_window(range(3)):
            with profile_stage("fb"):
                work()
                await asyncio.sleep(0)
                work()

    return lambda: asyncio.run(update())


def _generator_update() -> Any:
    @profile_stage("update")
    def update() -> Any:
        for mb in mini_batch_window(range(3)):
            with profile_stage("fb"):
                work()
                yield mb
                work()

    def consume() -> None:
        for _ in update():
            work()  # the consumer's, between items

    return consume


class TestItem4SuspendedStagesNest:
    """A decorated `async def` (or generator) stage whose mini-batch loop awaits (or yields)
    inside each mini-batch: the trace nests as the code does, in both modes, and the metrics
    keep every path."""

    EXPECTED = {("update",): 1, ("update", "mini_batch"): 3, ("update", "mini_batch", "fb"): 3}

    @pytest.mark.parametrize("discrete", [False, True])
    @pytest.mark.parametrize("body", [_async_update, _generator_update], ids=["async", "generator"])
    def test_summary_and_metrics(self, tmp_path: Path, discrete: bool, body: Any) -> None:
        run = body()
        cfg = config(tmp_path, discrete=discrete, metrics=Metrics(enabled=True))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            run()
        rows = summary_rows(tmp_path)
        assert paths(rows) == self.EXPECTED
        assert all(row["self_ms"] >= 0 for row in rows)
        counts = {k.split("/", 1)[1]: v for k, v in profiler.metrics.items() if k.startswith("timing_count/")}
        assert counts == {"/".join(path): count for path, count in self.EXPECTED.items()}


SHARED = profile_stage("shared")


class TestItem5InterleavedTasks:
    """200 asyncio tasks inside one shared `with` block that awaits: the metrics count 200
    entries, and summary shows one stage of 200 entries marked interleaved, not a deep path."""

    def test_summary_says_interleaved(self, tmp_path: Path) -> None:
        async def task() -> None:
            with SHARED:
                work()
                await asyncio.sleep(0)
                work()

        async def main() -> None:
            await asyncio.gather(*(task() for _ in range(200)))

        cfg = config(tmp_path, metrics=Metrics(enabled=True))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            asyncio.run(main())
        assert profiler.metrics["timing_count/shared"] == 200
        rows = summary_rows(tmp_path)
        assert [(row["path"], row["count"], row.get("interleaved")) for row in rows] == [(["shared"], 200, True)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            profdsl._cli.main(["summary", str(tmp_path)])
        assert "shared (interleaved)" in out.getvalue()


class Raising:
    """A replica whose ``method`` raises ``error`` (a BaseException that is no Exception)."""

    def __init__(self, error: BaseException, method: str) -> None:
        self.error, self.method = error, method

    def start_profile(self) -> None:
        if self.method == "start_profile":
            raise self.error

    def stop_profile(self) -> None:
        if self.method == "stop_profile":
            raise self.error


class AsyncRaising(Raising):
    """The same with ``async`` methods (an engine called in the event loop)."""

    async def start_profile(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        super().start_profile()

    async def stop_profile(self) -> None:  # type: ignore[override]
        super().stop_profile()


class TestItem6EngineFaultsContained:
    """What an engine call raises is recorded as what happened; it never reaches generation."""

    def test_async_engine_cancelled_error(self, driver: Profiler) -> None:
        engine = AsyncRaising(asyncio.CancelledError(), "start_profile")

        async def generate() -> str:
            async with rollout_window([engine]):
                await asyncio.sleep(0)
                return "out"

        with driver.step(1):
            assert asyncio.run(generate()) == "out"
        [record] = [r for r in read_manifest(driver.config.save_path) if r["kind"] == "rollout"]
        assert (record["call"], record["status"]) == ("start_profile", "failed")
        assert "CancelledError" in record["error"]

    def test_system_exit_on_the_call_thread(self, driver: Profiler) -> None:
        engine = Raising(SystemExit(3), "stop_profile")
        with driver.step(1), rollout_window([engine]):
            pass
        [record] = [r for r in read_manifest(driver.config.save_path) if r["kind"] == "rollout"]
        assert (record["call"], record["status"]) == ("stop_profile", "failed")
        assert "SystemExit" in record["error"] and "took over" not in record["error"]

    def test_callers_own_interrupt_propagates(self, driver: Profiler) -> None:
        """A KeyboardInterrupt in the caller's own code passes through unchanged; the engine is
        still stopped."""
        log: list[str] = []
        error = KeyboardInterrupt()
        with driver.step(1), pytest.raises(KeyboardInterrupt) as info, rollout_window([Engine(log)]):
            raise error
        assert info.value is error and log == ["start", "stop"]


class TestItem7ThreadsAddExactly:
    """Entries of one stage ending on two threads at once both count, in full, even when a
    thread switch falls inside the update."""

    def test_concurrent_exits(self, monkeypatch: pytest.MonkeyPatch) -> None:
        inside = threading.Barrier(3, timeout=30)
        meet = threading.Barrier(2, timeout=30)
        go = threading.Event()
        armed = [False]
        read = FakeClock.__call__

        def switching(self: FakeClock) -> float:
            value = read(self)
            if armed[0] and threading.current_thread() is not threading.main_thread():
                with contextlib.suppress(threading.BrokenBarrierError):
                    meet.wait()  # both threads read the clock before either goes on
            return value

        def worker() -> None:
            with SHARED:
                inside.wait()
                go.wait(30)

        cfg = config("unused", enable=False, metrics=Metrics(enabled=True))
        with fake_clock(monkeypatch) as clock:
            monkeypatch.setattr(FakeClock, "__call__", switching)
            with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
                threads = [threading.Thread(target=worker) for _ in range(2)]
                for thread in threads:
                    thread.start()
                inside.wait()
                clock.advance(1.0)
                armed[0] = True
                go.set()
                for thread in threads:
                    thread.join(30)
                armed[0] = False
        assert profiler.metrics["timing_count/shared"] == 2
        assert profiler.metrics["timing_s/shared"] == 2.0
