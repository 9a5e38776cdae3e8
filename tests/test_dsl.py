"""Tests for the DSL (`profile_stage`, `mini_batch_window`) in every form, profiled and not."""

from __future__ import annotations

import asyncio
import inspect
import logging
import pickle
from pathlib import Path
from typing import Any

import pytest

from profdsl import ConfigError, Profiler, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl._capture.annotators import TorchAnnotator
from profdsl._runtime.process import PROCESS

from .traces import events, names, parsed, trace_files

torch = pytest.importorskip("torch")


@pytest.fixture
def profiling(tmp_path: Path):
    """A continuous profiler profiling step 1 for the duration of the test."""
    cfg = ProfilerConfig(enable=True, steps=[1], save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    profiler.start(1)
    yield tmp_path
    profiler.close()


def close_profiling() -> None:
    """Close the profiler the `profiling` fixture started (its step's trace is written)."""
    for profiler in list(PROCESS.live):
        profiler.close()


def only_trace(folder: Path) -> dict[str, Any]:
    files = parsed(folder)
    assert len(files) == 1
    return files[0][1]


@pytest.fixture
def no_backend_calls(monkeypatch: pytest.MonkeyPatch):
    """Fail if any region reaches the torch annotator."""

    def refuse(self: object, *args: object) -> None:
        raise AssertionError("backend called while nothing is profiled")

    monkeypatch.setattr(TorchAnnotator, "push", refuse)
    monkeypatch.setattr(TorchAnnotator, "pop", refuse)


class Model:
    """A class whose methods are decorated."""

    @profile_stage("method_stage")
    def method(self, x: int, *, scale: int = 2) -> int:
        """Doc of method."""
        return x * scale

    @profile_stage("async_stage")
    async def amethod(self, x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    @profile_stage("gen_stage")
    def gen(self, n: int):
        yield from range(n)
        return "done"


class TestProfileStage:
    """`profile_stage` as with-block and decorator, profiled and not."""

    def test_with_profiled(self, profiling: Path) -> None:
        """A with block is a named region in the trace."""
        with profile_stage("with_stage"):
            torch.ones(2).sum()
        close_profiling()
        assert names(only_trace(profiling), "with_stage") == ["with_stage"]

    def test_decorator_profiled(self, profiling: Path) -> None:
        """Decorated methods, coroutines and generators give their regions and results."""
        model = Model()
        assert model.method(3) == 6
        assert asyncio.run(model.amethod(1)) == 2
        gen = model.gen(2)
        assert list(gen) == [0, 1]
        close_profiling()
        trace = only_trace(profiling)
        assert names(trace, "method_stage") == ["method_stage"]
        assert names(trace, "async_stage") == ["async_stage", "async_stage"]  # one per slice
        assert names(trace, "gen_stage") == ["gen_stage"] * 3

    def test_not_profiled(self, no_backend_calls: None) -> None:
        """Nothing profiled: every form runs its body and calls no backend."""
        model = Model()
        with profile_stage("x"):
            pass
        assert model.method(3, scale=3) == 9
        assert asyncio.run(model.amethod(1)) == 2
        assert list(model.gen(3)) == [0, 1, 2]

    def test_transparency(self) -> None:
        """Names, docstrings, signatures, kinds and return values are kept."""
        assert Model.method.__name__ == "method" and Model.method.__doc__ == "Doc of method."
        assert inspect.signature(Model.method) == inspect.signature(Model.method.__wrapped__)
        assert list(inspect.signature(Model.method).parameters) == ["self", "x", "scale"]
        assert inspect.iscoroutinefunction(Model.amethod)
        assert inspect.isgeneratorfunction(Model.gen)

        def gen_return():
            return (yield from Model().gen(1))

        assert list(gen_return()) == [0]

    @pytest.mark.parametrize("profiled", [False, True])
    def test_exceptions_pass_through(self, tmp_path: Path, profiled: bool) -> None:
        """The same exception object comes out of every form, and regions are closed."""
        cfg = ProfilerConfig(enable=profiled, steps=[1], save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))
        error = KeyError("k")

        @profile_stage("raise_sync")
        def sync() -> None:
            raise error

        @profile_stage("raise_async")
        async def coro() -> None:
            await asyncio.sleep(0)
            raise error

        @profile_stage("raise_gen")
        def gen():
            yield 1
            raise error

        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            for run in (sync, lambda: asyncio.run(coro()), lambda: list(gen())):
                with pytest.raises(KeyError) as info:
                    run()
                assert info.value is error
            with pytest.raises(KeyError) as info, profile_stage("raise_with"):
                raise error
            assert info.value is error
        if profiled:
            trace = only_trace(tmp_path)
            for name in ("raise_sync", "raise_async", "raise_gen", "raise_with"):
                assert names(trace, name), name

    def test_generator_close_closes_region(self, profiling: Path) -> None:
        """A generator stage abandoned early runs its cleanup in a region and closes it."""
        gen = Model().gen(10)
        assert next(gen) == 0
        gen.close()
        close_profiling()
        assert names(only_trace(profiling), "gen_stage") == ["gen_stage", "gen_stage"]

    def test_async_regions_never_overlap_across_tasks(self, profiling: Path) -> None:
        """Interleaved tasks' stage regions on one thread are disjoint, not mis-nested."""

        @profile_stage("task_stage")
        async def task(i: int) -> int:
            for _ in range(3):
                torch.ones(4).sum()
                await asyncio.sleep(0)
            return i

        async def main() -> list[int]:
            return await asyncio.gather(task(0), task(1), task(2))

        assert asyncio.run(main()) == [0, 1, 2]
        close_profiling()
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events(only_trace(profiling), "task_stage"))
        assert len(spans) == 12
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start

    def test_async_cancellation_reaches_body(self, profiling: Path) -> None:
        """Cancelling a task cancels the decorated coroutine's own await."""
        seen: list[str] = []

        @profile_stage("cancel_stage")
        async def slow() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        async def main() -> None:
            t = asyncio.ensure_future(slow())
            await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t

        asyncio.run(main())
        assert seen == ["cancelled"]

    def test_bad_name(self) -> None:
        """An empty or non-string name is a ConfigError naming it."""
        with pytest.raises(ConfigError, match="profile_stage name must be a non-empty string, got ''"):
            profile_stage("")
        with pytest.raises(ConfigError, match="got 3"):
            profile_stage(3)  # type: ignore[arg-type]

    @pytest.mark.parametrize("color", ["mauve", "#12345", "#GGGGGG", -1, 2**32, 1.5, True, b"red"])
    def test_bad_color(self, color: object) -> None:
        """A colour that is no ARGB integer, hex string or NVTX colour name is refused at once."""
        with pytest.raises(ConfigError, match="profile_stage color must be"):
            profile_stage("s", color=color)  # type: ignore[arg-type]

    def test_decorated_function_pickles(self) -> None:
        """A decorated module-level function survives pickling (Ray ships them)."""
        assert pickle.loads(pickle.dumps(Model)) is Model


class Methods:
    """profile_stage above and below @staticmethod and @classmethod, in every body form."""

    factor = 3

    @profile_stage("static_above")
    @staticmethod
    def static_above(x: int) -> int:
        return x + 1

    @staticmethod
    @profile_stage("static_below")
    def static_below(x: int) -> int:
        return x + 2

    @profile_stage("class_above")
    @classmethod
    def class_above(cls, x: int) -> int:
        return x * cls.factor

    @classmethod
    @profile_stage("class_below")
    def class_below(cls, x: int) -> int:
        return x * cls.factor + 1

    @profile_stage("static_async")
    @staticmethod
    async def static_async(x: int) -> int:
        await asyncio.sleep(0)
        return -x

    @profile_stage("class_gen")
    @classmethod
    def class_gen(cls, n: int):
        yield from range(n * cls.factor)


class TestAsyncGenerators:
    """`@profile_stage` on an `async def ... yield` function: an async generator stays one, its
    region open exactly while its own code runs."""

    @staticmethod
    @profile_stage("agen_stage")
    async def numbers(n: int):
        for i in range(n):
            await asyncio.sleep(0)
            torch.ones(2).sum()
            try:
                got = yield i
            except KeyError:
                got = -1
            if got is not None:
                yield got * 10

    async def consume(self) -> list[int]:
        out = [i async for i in self.numbers(3)]
        gen = self.numbers(5)
        out.append(await gen.__anext__())
        out.append(await gen.asend(7))
        out.append(await gen.__anext__())
        out.append(await gen.athrow(KeyError("k")))
        await gen.aclose()
        return out

    def test_not_profiled(self) -> None:
        assert inspect.isasyncgenfunction(TestAsyncGenerators.numbers)
        assert asyncio.run(self.consume()) == [0, 1, 2, 0, 70, 1, -10]

    def test_profiled(self, profiling: Path) -> None:
        assert asyncio.run(self.consume()) == [0, 1, 2, 0, 70, 1, -10]
        close_profiling()
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events(only_trace(profiling), "agen_stage"))
        assert spans and all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))

    def test_discrete_stage_spans_the_whole_generator(self, tmp_path: Path) -> None:
        """Discrete mode: the stage's own trace spans the generator's whole life, not just the
        creation of the generator object."""
        cfg = ProfilerConfig(
            enable=True, steps=[1], discrete=True, save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"])
        )

        async def consume() -> list[int]:
            return [i async for i in self.numbers(2)]

        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            assert asyncio.run(consume()) == [0, 1]
        [trace] = [t for _, t in parsed(tmp_path)]
        assert len(names(trace, "agen_stage")) >= 2
        assert [e for e in trace["traceEvents"] if e.get("name") == "aten::ones"]


class TestStopWhileSuspended:
    """An async stage suspended across its profiler's stop does not reopen its region after."""

    def test_no_slice_after_stop(self, tmp_path: Path) -> None:
        cfg = ProfilerConfig(enable=True, steps=[1], save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))
        actor = Profiler(cfg, role="actor", rank=0, world_size=1)
        ref = Profiler(cfg, role="ref", rank=0, world_size=1)  # keeps the shared session going

        @profile_stage("actor_async", role="actor")
        async def stage(resume: asyncio.Event) -> None:
            torch.ones(2).sum()
            await resume.wait()
            for _ in range(3):
                torch.ones(2).sum()
                await asyncio.sleep(0)

        async def main() -> None:
            resume = asyncio.Event()
            task = asyncio.ensure_future(stage(resume))
            await asyncio.sleep(0)
            actor.stop()
            with profile_stage("marker", role="ref"):
                torch.ones(2).sum()
            resume.set()
            await task

        with actor, ref:
            ref.start(1)
            actor.start(1)
            asyncio.run(main())
            ref.stop()
        trace = only_trace(tmp_path)
        [marker] = events(trace, "marker")
        assert all(e["ts"] < marker["ts"] for e in events(trace, "actor_async"))


class TestMethodDecorators:
    """`@profile_stage` works above or below `@staticmethod` / `@classmethod`."""

    def calls(self) -> list[object]:
        obj = Methods()
        return [
            Methods.static_above(1),
            obj.static_above(1),
            Methods.static_below(1),
            obj.static_below(1),
            Methods.class_above(2),
            obj.class_above(2),
            Methods.class_below(2),
            obj.class_below(2),
            asyncio.run(Methods.static_async(4)),
            list(obj.class_gen(1)),
        ]

    EXPECTED = [2, 2, 3, 3, 6, 6, 7, 7, -4, [0, 1, 2]]

    def test_not_profiled(self) -> None:
        """Nothing profiled: every form returns its result."""
        assert self.calls() == self.EXPECTED
        assert inspect.iscoroutinefunction(Methods.static_async)
        assert inspect.isgeneratorfunction(Methods.__dict__["class_gen"].__func__)

    def test_profiled(self, profiling: Path) -> None:
        """Profiled: the same results, and each method's region is in the trace."""
        assert self.calls() == self.EXPECTED
        close_profiling()
        trace = only_trace(profiling)
        for name in ("static_above", "static_below", "class_above", "class_below", "static_async", "class_gen"):
            assert names(trace, name), name


class TestMiniBatchWindow:
    """`mini_batch_window` as iterator, with-block and decorator."""

    def schedule_cfg(self, tmp_path: Path) -> ProfilerConfig:
        return ProfilerConfig(
            enable=True,
            steps=[1],
            discrete=True,
            save_path=str(tmp_path),
            torch=TorchOptions(contents=["cpu"], schedule=Schedule(active=2)),
        )

    @pytest.mark.parametrize("form", ["iterate", "with", "decorator"])
    def test_forms_advance_the_schedule(self, tmp_path: Path, form: str) -> None:
        """Each form advances the schedule once per mini-batch: 3 mini-batches, 2 windows."""

        @mini_batch_window()
        def one(mb: int) -> int:
            torch.ones(2).sum()
            return mb

        with Profiler(self.schedule_cfg(tmp_path), role="actor", rank=0, world_size=1) as p, p.step(1):
            with profile_stage("update", scheduled=True):
                if form == "iterate":
                    assert list(mini_batch_window([5, 6, 7])) == [5, 6, 7]
                elif form == "with":
                    for _ in range(3):
                        with mini_batch_window():
                            torch.ones(2).sum()
                else:
                    assert [one(i) for i in range(3)] == [0, 1, 2]
        assert [(n.window, names(t, "mini_batch")) for n, t in parsed(tmp_path)] == [
            ((0, 1), ["mini_batch0", "mini_batch1"]),
            ((2, 2), ["mini_batch2"]),
        ]

    def test_custom_name(self, profiling: Path) -> None:
        """name= names the regions."""
        list(mini_batch_window(range(2), name="micro"))
        close_profiling()
        assert names(only_trace(profiling), "micro") == ["micro0", "micro1"]

    def test_not_profiled_is_a_plain_iterator(self, no_backend_calls: None) -> None:
        """Nothing profiled: iteration hands back the iterable's own iterator."""
        items = [1, 2, 3]
        assert type(iter(mini_batch_window(items))) is type(iter(items))
        with mini_batch_window():
            pass

    def test_break_closes_the_region(self, profiling: Path) -> None:
        """Leaving the loop early closes the open mini-batch region."""
        for mb in mini_batch_window(range(5)):
            if mb == 1:
                break
        close_profiling()
        assert names(only_trace(profiling), "mini_batch") == ["mini_batch0", "mini_batch1"]

    def test_iterating_without_iterable(self) -> None:
        """Iterating a window built without an iterable is a clear TypeError."""
        with pytest.raises(TypeError, match="needs an iterable"):
            iter(mini_batch_window())


def test_internal_fault_is_swallowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A fault inside profdsl's region code is logged once; the stage's result is unchanged."""
    cfg = ProfilerConfig(enable=True, steps=[1], save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))

    def broken(self: object, *args: object) -> object:
        raise RuntimeError("annotator broke")

    monkeypatch.setattr(TorchAnnotator, "push", broken)
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        assert profile_stage("s")(lambda: 7)() == 7
        assert profile_stage("s")(lambda: 8)() == 8
    assert caplog.text.count("annotator broke") == 1
    assert len(trace_files(tmp_path)) == 1


def test_decorated_function_pickles_by_value(tmp_path: Path) -> None:
    """A decorated function pickled by value (as Ray does for classes in __main__) works on the
    other side and uses that process's registry."""
    cloudpickle = pytest.importorskip("ray.cloudpickle")

    @profile_stage("shipped")
    def shipped(x: int) -> int:
        return x * 3

    copy = cloudpickle.loads(cloudpickle.dumps(shipped))
    assert copy(2) == 6
    cfg = ProfilerConfig(enable=True, steps=[1], save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        assert copy(3) == 9
    assert names(only_trace(tmp_path), "shipped") == ["shipped"]


class TestUnboundStage:
    """A stage bound to no role, in a process where several roles step: it nests in its
    context's innermost role, and otherwise goes to the first, saying once which role took it."""

    def test_which_role_took_it_is_said_once(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        from profdsl import Metrics

        cfg = ProfilerConfig(
            enable=True,
            steps=[1],
            save_path=str(tmp_path),
            metrics=Metrics(enabled=True),
            torch=TorchOptions(contents=["cpu"]),
        )
        actor = Profiler(cfg, role="actor", rank=0, world_size=1)
        ref = Profiler(cfg, role="ref", rank=0, world_size=1)
        with caplog.at_level(logging.WARNING, logger="profdsl"), actor, ref:
            actor.start(1)
            ref.start(1)
            for _ in range(2):
                with profile_stage("unbound"):
                    torch.ones(2).sum()
            with profile_stage("ref_outer", role="ref"), profile_stage("nested"):
                torch.ones(2).sum()
            ref.stop()
            actor.stop()
        said = [r.getMessage() for r in caplog.records if "bound to no role" in r.getMessage()]
        assert len(said) == 2  # once for its region, once for its time; never for `nested`
        assert all("'unbound'" in m and "'actor', 'ref'" in m and "goes to 'actor'" in m for m in said)
        assert actor.metrics["timing_count/unbound"] == 2 and "timing_s/unbound" not in ref.metrics
        assert ref.metrics["timing_count/ref_outer/nested"] == 1 and "timing_s/nested" not in actor.metrics
