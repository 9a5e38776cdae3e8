"""Always-on stage metrics from the DSL's annotations: every entry of every step on every rank,
total and self time by nesting, the flat mapping, on_step, and what happens to odd uses."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl import (
    Metrics,
    Profiler,
    ProfilerConfig,
    mini_batch_window,
    profile_stage,
    rollout_window,
)
from profdsl._runtime import context
from profdsl._runtime.process import PROCESS
from profdsl.metrics import NAMES, StageTiming, StepTimings

from .metrics_support import FakeClock, fake_clock, metered, totals
from .profiling import config, in_forked_child, run_threads


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    with fake_clock(monkeypatch) as fake:
        yield fake


class TestFlatMapping:
    """The per-step mapping, named like the timings trainers log."""

    def test_nested_stages_and_mini_batches(self, clock: FakeClock) -> None:
        """A stage over four mini-batches with a nested stage each: totals, self times, counts
        and means by path; the step's wall time."""

        @profile_stage("update_actor")
        def update() -> None:
            clock.advance(0.5)  # the stage's own work
            for _ in mini_batch_window(range(4)):
                clock.advance(0.25)
                with profile_stage("forward_backward"):
                    clock.advance(1.0)

        with metered() as profiler:
            with profiler.step(3):
                with profile_stage("gen"):
                    clock.advance(2.0)
                update()
                clock.advance(0.125)  # between stages: only in the step's wall time
            flat = profiler.metrics
        assert totals(flat) == {
            "gen": 2.0,
            "update_actor": 5.5,
            "update_actor/mini_batch": 5.0,
            "update_actor/mini_batch/forward_backward": 4.0,
        }
        assert totals(flat, NAMES.own) == {
            "gen": 2.0,
            "update_actor": 0.5,
            "update_actor/mini_batch": 1.0,
            "update_actor/mini_batch/forward_backward": 4.0,
        }
        assert totals(flat, NAMES.count) == {
            "gen": 1,
            "update_actor": 1,
            "update_actor/mini_batch": 4,
            "update_actor/mini_batch/forward_backward": 4,
        }
        assert totals(flat, NAMES.mean)["update_actor/mini_batch"] == 1.25
        assert flat["timing_step_s"] == 7.625
        assert NAMES.overflow not in flat and not any(k.startswith(NAMES.device) for k in flat)

    def test_stop_returns_the_step_and_on_step_gets_it(self, clock: FakeClock) -> None:
        """stop() returns the step's StepTimings; on_step(step, metrics) gets the flat mapping,
        every step; profiler.metrics is the last step's."""
        seen: list[tuple[int, dict[str, float]]] = []
        profiler = metered(on_step=lambda step, metrics: seen.append((step, metrics)))
        results = []
        for step in (1, 2, 5):
            profiler.start(step)
            with profile_stage("gen"):
                clock.advance(float(step))
            results.append(profiler.stop())
        profiler.close()
        assert [s for s, _ in seen] == [1, 2, 5]
        assert [m["timing_s/gen"] for _, m in seen] == [1.0, 2.0, 5.0]
        assert results[-1] == StepTimings(
            role="actor", rank=0, step=5, wall_s=5.0, stages={"gen": StageTiming(total_s=5.0, self_s=5.0, count=1)}
        )
        assert profiler.metrics == seen[-1][1] == results[-1].flat()

    def test_step_context_gives_the_metrics(self, clock: FakeClock) -> None:
        """From the step() context: the profiler it yields has the step's metrics after it."""
        with metered() as profiler:
            with profiler.step(1) as p, profile_stage("gen"):
                clock.advance(1.0)
            assert p.metrics["timing_s/gen"] == 1.0
            assert p.meter.timings is not None and p.meter.timings.step == 1

    def test_a_stage_entered_twice_adds_up(self, clock: FakeClock) -> None:
        """Two entries of one path in a step: one key, count 2, mean the average."""
        stage = profile_stage("compute_log_prob")
        with metered() as profiler, profiler.step(1):
            for seconds in (1.0, 3.0):
                with stage:
                    clock.advance(seconds)
        assert totals(profiler.metrics) == {"compute_log_prob": 4.0}
        assert totals(profiler.metrics, NAMES.mean) == {"compute_log_prob": 2.0}

    def test_names_with_slashes_cannot_pass_for_nesting(self, clock: FakeClock) -> None:
        """A '/' (or '%') in a stage name is escaped in its path."""
        with metered() as profiler, profiler.step(1):
            with profile_stage("a/b"):
                clock.advance(1.0)
            with profile_stage("a"), profile_stage("b"):
                clock.advance(2.0)
            with profile_stage("100%"):
                clock.advance(4.0)
        assert totals(profiler.metrics) == {"a%2Fb": 1.0, "a": 2.0, "a/b": 2.0, "100%25": 4.0}


class TestEveryStepEveryRank:
    """Metrics do not depend on what is profiled."""

    @pytest.mark.parametrize(
        "extra",
        [
            {},  # profiling disabled
            {"enable": True, "steps": [7], "tool": "nsys"},  # enabled, but step 1 is not profiled
            {"enable": True, "steps": [1], "ranks": [0], "tool": "nsys"},  # enabled, rank 3 not selected
        ],
    )
    def test_unprofiled_steps_and_ranks_are_timed(
        self, clock: FakeClock, tmp_path: Path, extra: dict[str, Any]
    ) -> None:
        with metered(rank=3, world_size=4, config={"save_path": str(tmp_path), **extra}) as profiler:
            with profiler.step(1), profile_stage("gen"):
                clock.advance(1.0)
            assert not any(s.recorder for s in PROCESS.registry.steps)
        assert profiler.metrics["timing_s/gen"] == 1.0
        assert profiler.meter.timings is not None and profiler.meter.timings.rank == 3

    def test_profiled_steps_give_the_same_timings(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A profiled torch step and a step only timed record the same tree, every DSL form
        included."""

        traced: list[bool] = []

        def run(profiler: Profiler, clock: FakeClock) -> StepTimings | None:
            @profile_stage("update_actor")
            def update() -> None:
                for _ in mini_batch_window(range(2)):
                    clock.advance(0.5)
                    with profile_stage("inner"):
                        clock.advance(0.25)

            @profile_stage("log_prob")
            def log_prob() -> int:
                clock.advance(1.0)
                return 1

            profiler.start(1)
            traced.append(any(s.recorder for s in PROCESS.registry.steps))
            with profile_stage("gen"):
                clock.advance(2.0)
                assert log_prob() == 1
            update()
            with mini_batch_window():
                clock.advance(0.125)
            return profiler.stop()

        results = []
        for cfg in (
            ProfilerConfig(metrics=Metrics(enabled=True)),
            config(tmp_path, discrete=False, metrics=Metrics(enabled=True)),
        ):
            with fake_clock(monkeypatch) as clock, Profiler(cfg, role="actor", rank=0, world_size=1) as p:
                results.append(run(p, clock))
                assert PROCESS.registry.on is False
        unprofiled, profiled = results
        assert traced == [False, True]
        assert unprofiled is not None and profiled is not None
        assert unprofiled.stages == profiled.stages
        assert list(profiled.stages) == [
            "gen",
            "gen/log_prob",
            "update_actor",
            "update_actor/mini_batch",
            "update_actor/mini_batch/inner",
            "mini_batch",
        ]

    def test_off_changes_nothing(self) -> None:
        """Metrics off (the default): the DSL stays on its one-check path and nothing is timed."""
        with Profiler(ProfilerConfig(), role="actor", rank=0, world_size=1) as profiler:
            with profiler.step(1):
                assert PROCESS.registry.on is False and not any(s.root for s in PROCESS.registry.steps)
                with profile_stage("gen"):
                    pass
            assert profiler.stop() is None
            assert profiler.metrics == {} and profiler.meter.timings is None

    def test_between_steps_nothing_is_timed(self, clock: FakeClock) -> None:
        with metered() as profiler:
            with profile_stage("outside"):
                clock.advance(1.0)
            with profiler.step(1), profile_stage("inside"):
                clock.advance(1.0)
            with profile_stage("outside"):
                clock.advance(1.0)
        assert totals(profiler.metrics) == {"inside": 1.0}


class TestRoles:
    """Each role's stages go to its own step; unbound stages follow the enclosing one."""

    def test_fused_roles(self, clock: FakeClock) -> None:
        actor, ref = metered("actor"), metered("ref")
        actor.start(1)
        ref.start(1)
        with profile_stage("update_actor", role="actor"):
            clock.advance(1.0)
            with profile_stage("forward"):  # unbound: nested in the actor's stage
                clock.advance(0.5)
            with profile_stage("ref_pass", role="ref"):  # another role: its own top level
                clock.advance(0.25)
        with profile_stage("loose"):  # unbound, nothing open: the first role timing a step
            clock.advance(2.0)
        with profile_stage("by_profiler", profiler=ref):
            clock.advance(4.0)
        with profile_stage("nobody", role="critic"):  # a role not timing: nothing
            clock.advance(8.0)
        a, r = actor.stop(), ref.stop()
        actor.close()
        ref.close()
        assert a is not None and r is not None
        assert {p: t.total_s for p, t in a.stages.items()} == {
            "update_actor": 1.75,
            "update_actor/forward": 0.5,
            "loose": 2.0,
        }
        assert a.stages["update_actor"].self_s == 1.25  # the other role's stage is not nested
        assert {p: t.total_s for p, t in r.stages.items()} == {"ref_pass": 0.25, "by_profiler": 4.0}


class TestDecoratedForms:
    """Methods, async def, generators and async generators."""

    def test_async_def_includes_its_awaits(self, clock: FakeClock) -> None:
        @profile_stage("fetch")
        async def fetch() -> int:
            clock.advance(1.0)
            await asyncio.sleep(0)
            clock.advance(2.0)
            return 5

        async def main() -> int:
            return await fetch()

        with metered() as profiler, profiler.step(1):
            assert asyncio.run(main()) == 5
        assert totals(profiler.metrics) == {"fetch": 3.0}

    def test_generator_counts_its_own_slices(self, clock: FakeClock) -> None:
        """A generator's time is its body's, not its consumer's between items; one entry."""

        @profile_stage("produce")
        def produce() -> Iterator[int]:
            for i in range(3):
                clock.advance(1.0)
                with profile_stage("item"):
                    clock.advance(0.5)
                yield i

        with metered() as profiler, profiler.step(1):
            for _ in produce():
                clock.advance(10.0)  # the consumer's time
        assert totals(profiler.metrics) == {"produce": 4.5, "produce/item": 1.5}
        assert totals(profiler.metrics, NAMES.count) == {"produce": 1, "produce/item": 3}

    def test_async_generator_steps_include_awaits(self, clock: FakeClock) -> None:
        @profile_stage("stream")
        async def stream() -> Any:
            for i in range(2):
                clock.advance(1.0)
                await asyncio.sleep(0)
                clock.advance(1.0)
                yield i

        async def main() -> list[int]:
            out = []
            async for item in stream():
                clock.advance(10.0)
                out.append(item)
            return out

        with metered() as profiler, profiler.step(1):
            assert asyncio.run(main()) == [0, 1]
        assert totals(profiler.metrics) == {"stream": 4.0}

    def test_methods(self, clock: FakeClock) -> None:
        class Worker:
            @profile_stage("update")
            def update(self, x: int) -> int:
                clock.advance(1.0)
                return x + 1

            @profile_stage("static")
            @staticmethod
            def static() -> int:
                clock.advance(2.0)
                return 2

        with metered() as profiler, profiler.step(1):
            assert Worker().update(1) == 2 and Worker.static() == 2
        assert totals(profiler.metrics) == {"update": 1.0, "static": 2.0}

    def test_exceptions_still_time_the_entry(self, clock: FakeClock) -> None:
        @profile_stage("fails")
        def fails() -> None:
            clock.advance(1.0)
            raise ValueError("boom")

        with metered() as profiler, profiler.step(1):
            with pytest.raises(ValueError, match="boom"):
                fails()
            with pytest.raises(KeyError), profile_stage("fails_too"):
                clock.advance(2.0)
                raise KeyError("x")
        assert totals(profiler.metrics) == {"fails": 1.0, "fails_too": 2.0}


class TestRollout:
    def test_rollout_window_is_timed(self, clock: FakeClock) -> None:
        """rollout_window entries are timed as their name, on every step, with no engines
        profiled (nothing is enabled)."""

        class Engine:
            def start_profile(self) -> None:
                raise AssertionError("not profiled")

            def stop_profile(self) -> None:
                raise AssertionError("not profiled")

        @rollout_window([Engine()], name="gen")
        def generate() -> str:
            clock.advance(3.0)
            return "out"

        with metered() as profiler, profiler.step(1):
            with rollout_window([Engine()]):
                clock.advance(1.0)
            assert generate() == "out"
        assert totals(profiler.metrics) == {"rollout": 1.0, "gen": 3.0}

    def test_async_rollout_window(self, clock: FakeClock) -> None:
        async def main() -> None:
            async with rollout_window([]):
                clock.advance(2.0)

        with metered() as profiler, profiler.step(1):
            asyncio.run(main())
        assert totals(profiler.metrics) == {"rollout": 2.0}

    def test_bad_name(self) -> None:
        from profdsl import ConfigError

        with pytest.raises(ConfigError, match="rollout_window name"):
            rollout_window([], name="")


class TestConcurrency:
    """Threads and tasks each nest their own entries; counts are exact."""

    def test_shared_stage_from_many_threads(self) -> None:
        shared = profile_stage("busy")
        inner = profile_stage("inner")

        def worker() -> None:
            for _ in range(500):
                with shared:
                    with inner:
                        pass

        with metered() as profiler, profiler.step(1):
            run_threads(*[worker] * 8)
        counts = totals(profiler.metrics, NAMES.count)
        assert counts == {"busy": 4000, "busy/inner": 4000}

    def test_tasks_nest_their_own_entries(self, clock: FakeClock) -> None:
        """Concurrent tasks, each inside its own stage: a task's stage nests only its own."""

        async def request(i: int) -> None:
            with profile_stage(f"req{i}"):
                await asyncio.sleep(0)
                with profile_stage("decode"):
                    clock.advance(1.0)
                    await asyncio.sleep(0)

        async def main() -> None:
            with profile_stage("gen"):
                await asyncio.gather(*(request(i) for i in range(3)))

        with metered() as profiler, profiler.step(1):
            asyncio.run(main())
        paths = totals(profiler.metrics, NAMES.count)
        assert paths == {
            "gen": 1,
            **{f"gen/req{i}": 1 for i in range(3)},
            **{f"gen/req{i}/decode": 1 for i in range(3)},
        }
        # The three requests overlap: their nested time exceeds gen's wall time; self stays >= 0.
        assert totals(profiler.metrics, NAMES.own)["gen"] == 0.0

    def test_interleaved_generators_close_out_of_order(self, clock: FakeClock) -> None:
        """With blocks in generators interleave on one stack: exits out of order still close
        the right entries."""

        def gen(name: str) -> Iterator[None]:
            with profile_stage(name):
                clock.advance(1.0)
                yield
                clock.advance(1.0)
                yield

        with metered() as profiler, profiler.step(1):
            a, b = gen("a"), gen("b")
            next(a)
            next(b)
            next(a, None)
            next(a, None)  # a's exit while b's entry is above it
            with profile_stage("c"):
                clock.advance(4.0)
            next(b, None)
            next(b, None)
        # b was entered inside a, and c inside b: their paths keep that nesting.
        assert totals(profiler.metrics) == {"a": 3.0, "a/b": 7.0, "a/b/c": 4.0}
        assert totals(profiler.metrics, NAMES.own)["a"] == 0.0  # b outlived a: never below zero

    def test_a_decorated_async_generator_resumed_by_another_task_ends_once(self) -> None:
        """A decorated async generator begun in one task and finished by a sibling task (which
        did not inherit its entries): one entry of it and of each block inside, and the first
        task's later stages nest where that task is, not in the generator."""

        @profile_stage("stream")
        async def stream() -> Any:
            for i in range(2):
                with profile_stage("item"):
                    yield i

        with metered() as profiler, profiler.step(1):
            asyncio.run(_begun_here_finished_by_a_sibling(stream()))
        assert totals(profiler.metrics, NAMES.count) == {"stream": 1, "stream/item": 2, "after": 1}

    def test_decorated_async_generators_closed_by_the_event_loop_end_once(self) -> None:
        """Decorated async generators left open at a ``yield`` inside a block, closed by the
        event loop (``shutdown_asyncgens``, outside their tasks), which closes each one's body
        too, in no set order: the body's block, closed first there, where its entry is not
        (the stage holds it), is still counted once (it used to be left out)."""

        @profile_stage("stream")
        async def stream() -> Any:
            with profile_stage("item"):
                yield 1
                yield 2

        left: list[Any] = []

        async def main() -> None:
            left.extend(stream() for _ in range(16))
            for each in left:
                assert await each.__anext__() == 1

        with metered() as profiler, profiler.step(1):
            asyncio.run(main())
            with profile_stage("after"):
                pass
        assert totals(profiler.metrics, NAMES.count) == {"stream": 16, "stream/item": 16, "after": 1}

    def test_a_profiled_with_block_in_an_async_generator_ends_in_the_task_that_resumes_it(self, tmp_path: Path) -> None:
        """On a profiled step, a plain ``with`` block inside an undecorated async generator,
        finished by a sibling task, is found there (it is listed open with its region): its
        region closes and its time counts once, and the first task's later stages do not nest
        in it. (Timed only, it is not found there: docs/dsl.md.)"""

        async def stream() -> Any:
            with profile_stage("item"):
                yield 1
                yield 2

        cfg = config(tmp_path, metrics=Metrics(enabled=True))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            with profiler.step(1):
                asyncio.run(_begun_here_finished_by_a_sibling(stream()))
            counts = totals(profiler.metrics, NAMES.count)
        assert counts == {"item": 1, "after": 1}
        assert not PROCESS.registry.opened


async def _begun_here_finished_by_a_sibling(stream: Any) -> None:
    """Take ``stream``'s first item in one task, the rest in a sibling task (created beside the
    first, so without its entries), then enter stage ``after`` in the first."""
    first, rest = asyncio.Event(), asyncio.Event()

    async def begins() -> None:
        await stream.__anext__()
        first.set()
        await rest.wait()
        with profile_stage("after"):
            pass

    async def finishes() -> None:
        await first.wait()
        async for _ in stream:
            pass
        rest.set()

    await asyncio.gather(begins(), finishes())


class TestStepBoundaries:
    def test_entry_open_across_stop_is_dropped_and_does_not_nest_later(self, clock: FakeClock) -> None:
        """An entry still open at stop() is not counted, and the next step's entries in the same
        context do not nest under it."""
        left = profile_stage("left_open")
        with metered() as profiler:
            profiler.start(1)
            left.__enter__()
            clock.advance(1.0)
            first = profiler.stop()
            with profiler.step(2), profile_stage("next"):
                clock.advance(2.0)
            left.__exit__(None, None, None)  # closed after its step: harmless
        assert first is not None and first.stages == {}
        assert totals(profiler.metrics) == {"next": 2.0}
        assert context.top() is None  # the ended step's entry left the stack

    def test_entry_begun_before_the_step(self, clock: FakeClock) -> None:
        """A stage around the whole loop (entered before start) times nothing and breaks nothing."""
        with metered() as profiler:
            with profile_stage("fit"):
                for step in (1, 2):
                    with profiler.step(step), profile_stage("gen"):
                        clock.advance(1.0)
        assert totals(profiler.metrics) == {"gen": 1.0}

    def test_close_inside_a_step_publishes_nothing(self) -> None:
        seen: list[int] = []
        profiler = metered(on_step=lambda step, _: seen.append(step))
        profiler.start(1)
        profiler.close()
        assert seen == [] and not any(s.root for s in PROCESS.registry.steps)

    def test_an_unnumbered_step_is_not_timed(self, caplog: pytest.LogCaptureFixture) -> None:
        with metered() as profiler:
            profiler.start(-1)
            assert not any(s.root for s in PROCESS.registry.steps)
            assert profiler.stop() is None


class TestBounds:
    """Hostile names cannot grow the metrics without bound."""

    def test_distinct_paths_are_capped_and_counted(self, clock: FakeClock) -> None:
        steps = []
        with metered(max_stages=3) as profiler:
            for step in range(3):
                profiler.start(step)
                for i in range(10):
                    with profile_stage(f"stage{step}-{i}"):
                        clock.advance(1.0)
                        with profile_stage("nested"):
                            pass
                steps.append(profiler.stop())
        first, _, last = steps
        assert first is not None and last is not None
        assert list(first.stages) == ["stage0-0", "stage0-0/nested", "stage0-1"]
        assert first.overflow == 17  # the other 17 entries, nested ones included
        assert last.stages == {} and last.overflow == 20  # the three allowed paths are step 0's
        assert profiler.metrics[NAMES.overflow] == 20

    def test_first_step_keeps_the_allowed_paths(self, clock: FakeClock) -> None:
        with metered(max_stages=2) as profiler, profiler.step(0):
            for name in ("a", "b", "c"):
                with profile_stage(name):
                    clock.advance(1.0)
        assert totals(profiler.metrics) == {"a": 1.0, "b": 1.0}
        assert profiler.metrics[NAMES.overflow] == 1

    def test_stages_filter(self, clock: FakeClock) -> None:
        """Only the listed names (or paths) are reported; self times still subtract the rest."""
        with metered(stages=["update_actor", "gen/decode"]) as profiler, profiler.step(1):
            with profile_stage("update_actor"):
                clock.advance(1.0)
                with profile_stage("hidden"):
                    clock.advance(2.0)
            with profile_stage("gen"), profile_stage("decode"):
                clock.advance(4.0)
        assert totals(profiler.metrics) == {"update_actor": 3.0, "gen/decode": 4.0}
        assert totals(profiler.metrics, NAMES.own) == {"update_actor": 1.0, "gen/decode": 4.0}

    def test_steps_do_not_accumulate(self) -> None:
        """Each step's tree is garbage once the step is published: nothing grows per step."""
        from profdsl.metrics._tree import Node, Root

        def nodes() -> int:
            gc.collect()
            return sum(type(o) in (Node, Root) for o in gc.get_objects())

        with metered() as profiler:
            before = nodes()
            for step in range(200):
                with profiler.step(step):
                    for _ in mini_batch_window(range(3)):
                        with profile_stage("s"):
                            pass
            assert nodes() == before  # the steps' trees are all gone
            assert profiler.meter._paths.seen == {"mini_batch", "mini_batch/s"}


class TestFaults:
    def test_failing_callback_is_logged_once(self, caplog: pytest.LogCaptureFixture) -> None:
        calls: list[int] = []

        def on_step(step: int, metrics: dict[str, float]) -> None:
            calls.append(step)
            raise RuntimeError("tracker down")

        with caplog.at_level(logging.ERROR, logger="profdsl"), metered(on_step=on_step) as profiler:
            for step in range(3):
                with profiler.step(step), profile_stage("gen"):
                    pass
        assert calls == [0, 1, 2]
        assert caplog.text.count("tracker down") == 1
        assert "timing_s/gen" in profiler.metrics

    def test_callback_gets_its_own_copy(self) -> None:
        def on_step(step: int, metrics: dict[str, float]) -> None:
            metrics.clear()

        with metered(on_step=on_step) as profiler, profiler.step(1), profile_stage("gen"):
            pass
        assert "timing_s/gen" in profiler.metrics

    def test_internal_fault_never_reaches_the_caller(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A fault in the metrics' own code is logged once; the stage's result is unchanged."""
        from profdsl._runtime import meter

        def broken(*_: object) -> None:
            raise RuntimeError("metrics broke")

        monkeypatch.setattr(meter, "child", broken)
        with caplog.at_level(logging.ERROR, logger="profdsl"), metered() as profiler, profiler.step(1):
            assert profile_stage("a", role="actor")(lambda: 3)() == 3
            with profile_stage("b", role="actor"):
                pass
        assert caplog.text.count("metrics broke") == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_times_nothing() -> None:
    """A child forked mid-step inherits no step being timed."""

    def report() -> dict[str, Any]:
        with profile_stage("in_child"):
            pass
        return {"meters": len([s for s in PROCESS.registry.steps if s.root]), "on": PROCESS.registry.on}

    with metered() as profiler:
        profiler.start(1)
        state = in_forked_child(report)
        profiler.stop()
    assert state == {"meters": 0, "on": False}


def test_reset_forgets_steps_being_timed() -> None:
    import profdsl.testing

    profiler = metered()
    profiler.start(1)
    assert any(s.root for s in PROCESS.registry.steps) and PROCESS.registry.on
    profdsl.testing.reset()
    assert not any(s.root for s in PROCESS.registry.steps) and PROCESS.registry.on is False


def test_threads_see_the_step() -> None:
    """A stage on another thread than start() is timed in the step (as under Ray)."""
    done = threading.Event()
    with metered() as profiler, profiler.step(1):

        def worker() -> None:
            with profile_stage("elsewhere"):
                done.set()

        run_threads(worker)
    assert done.is_set() and "timing_s/elsewhere" in profiler.metrics


def test_a_step_ending_between_the_checks_is_harmless() -> None:
    """The DSL reads `on`, then the step trees without a lock: a step that ended in between (the
    switch still set, no tree left) times nothing and raises nothing."""
    registry = PROCESS.registry
    registry.on = True  # as another thread's stop() leaves it for an instant
    assert registry.steps == ()
    with profile_stage("late"):
        pass
    assert profile_stage("late")(lambda: 4)() == 4
    registry.refresh()
    assert registry.on is False


def test_decorated_function_pickled_by_value_is_timed() -> None:
    """Ray ships functions defined in __main__ by value: the copy is timed on the other side
    (the registry it names reduces to that process's own)."""
    cloudpickle = pytest.importorskip("ray.cloudpickle")

    @profile_stage("shipped")
    def shipped(x: int) -> int:
        return x * 3

    copy = cloudpickle.loads(cloudpickle.dumps(shipped))
    with metered() as profiler, profiler.step(1):
        assert copy(2) == 6
    assert totals(profiler.metrics, NAMES.count) == {"shipped": 1}
