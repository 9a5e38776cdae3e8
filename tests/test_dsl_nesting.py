"""Hostile nesting: random trees of stages (``with`` blocks, decorated calls, coroutines,
generators and async generators), mini-batch loops, awaits and yields, run under a real torch
session with the metrics on. ``profdsl summary`` and the metrics must both give, path by path,
the entries an independent count of the program gives (and the metrics its time, to the bit):
the regions never cross, whatever is open when a body awaits or yields."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import given, settings

import profdsl._cli
from profdsl import Metrics, Profiler, mini_batch_window, profile_stage

from .metrics_support import FakeClock, fake_clock
from .profiling import config
from .strategies import nesting_programs

torch = pytest.importorskip("torch")

#: What the consumer of a generator stage does with each item: a stage of its own.
BETWEEN, BETWEEN_S = "between", 8.0

Node = tuple[str, str, float, int, tuple[Any, ...]]
Stats = dict[tuple[str, ...], list[float]]


def count(nodes: tuple[Node, ...] | list[Node], path: tuple[str, ...], stats: Stats) -> tuple[float, int]:
    """The independent count: adds each entry's path, count and seconds to ``stats``; returns the
    seconds the nodes take in their own body (a generator's consumer excluded) and the items
    they yield to the body's consumer."""
    elapsed, items = 0.0, 0
    for kind, name, advance, repeat, children in nodes:
        if kind == "yield":
            items += 1
            continue
        if kind == "await":
            continue
        here = (*path, name)
        for _ in range(repeat):
            inner, yielded = count(children, here, stats)
            stat = stats.setdefault(here, [0, 0.0])
            stat[0] += 1
            stat[1] += advance + inner
            elapsed += advance + inner
            if kind in ("gen", "agen") and yielded:  # consumed here: a `between` stage per item
                between = stats.setdefault((*path, BETWEEN), [0, 0.0])
                between[0] += yielded
                between[1] += yielded * BETWEEN_S
                elapsed += yielded * BETWEEN_S
            else:
                items += yielded
    return elapsed, items


class Runner:
    """Runs a program through the real DSL, advancing the fake clock as it goes."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def sync(self, nodes: tuple[Node, ...]) -> None:
        for _ in self.generator(nodes):
            raise AssertionError("a yield in a plain body")

    def generator(self, nodes: tuple[Node, ...]) -> Iterator[None]:
        for kind, name, advance, repeat, children in nodes:
            if kind == "yield":
                yield
            elif kind in ("with", "batches"):
                for _ in range(1 if kind == "batches" else repeat):
                    for _ in self.entries(kind, name, repeat):
                        self.clock.advance(advance)
                        yield from self.generator(children)
            else:
                self.call(kind, name, advance, repeat, children)

    def entries(self, kind: str, name: str, repeat: int) -> Iterator[object]:
        if kind == "batches":
            yield from mini_batch_window(range(repeat), name=name)
        else:
            with profile_stage(name):
                yield None

    def call(self, kind: str, name: str, advance: float, repeat: int, children: tuple[Node, ...]) -> None:
        for _ in range(repeat):
            if kind == "call":
                profile_stage(name)(self.body)(advance, children)
            elif kind == "gen":
                for _ in profile_stage(name)(self.items)(advance, children):
                    self.consume()
            else:
                raise AssertionError(f"{kind} in a plain body")

    def body(self, advance: float, children: tuple[Node, ...]) -> None:
        self.clock.advance(advance)
        self.sync(children)

    def items(self, advance: float, children: tuple[Node, ...]) -> Iterator[None]:
        self.clock.advance(advance)
        yield from self.generator(children)

    def consume(self) -> None:
        with profile_stage(BETWEEN):
            self.clock.advance(BETWEEN_S)

    async def asynchronous(self, nodes: tuple[Node, ...]) -> None:
        async for _ in self.async_generator(nodes):
            raise AssertionError("a yield in a coroutine's body")

    async def async_generator(self, nodes: tuple[Node, ...]) -> AsyncIterator[None]:
        for kind, name, advance, repeat, children in nodes:
            if kind == "yield":
                yield
            elif kind == "await":
                await asyncio.sleep(0)
            elif kind in ("with", "batches"):
                for _ in range(1 if kind == "batches" else repeat):
                    for _ in self.entries(kind, name, repeat):
                        self.clock.advance(advance)
                        async for _ in self.async_generator(children):
                            yield
            elif kind in ("coro", "agen"):
                for _ in range(repeat):
                    await self.async_call(kind, name, advance, children)
            else:
                self.call(kind, name, advance, repeat, children)

    async def async_call(self, kind: str, name: str, advance: float, children: tuple[Node, ...]) -> None:
        if kind == "coro":
            await profile_stage(name)(self.async_body)(advance, children)
            return
        async for _ in profile_stage(name)(self.async_items)(advance, children):
            self.consume()

    async def async_body(self, advance: float, children: tuple[Node, ...]) -> None:
        self.clock.advance(advance)
        await self.asynchronous(children)

    async def async_items(self, advance: float, children: tuple[Node, ...]) -> AsyncIterator[None]:
        self.clock.advance(advance)
        async for _ in self.async_generator(children):
            yield


def summary(folder: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert profdsl._cli.main(["summary", folder, "--json"]) == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@settings(max_examples=25)
@given(program=nesting_programs())
def test_summary_and_metrics_match_an_independent_count(program: list[Node]) -> None:
    expected: Stats = {}
    count(tuple(program), (), expected)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        with fake_clock(patch) as clock:
            cfg = config(folder, metrics=Metrics(enabled=True))
            with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
                profiler.start(1)
                asyncio.run(Runner(clock).asynchronous(tuple(program)))
                timings = profiler.stop()
        rows = summary(folder) if expected else []
    assert timings is not None
    assert {tuple(p.split("/")): [t.count, t.total_s] for p, t in timings.stages.items()} == expected
    found: dict[tuple[str, ...], int] = {}
    for row in rows:
        found[tuple(row["path"])] = found.get(tuple(row["path"]), 0) + row["count"]
        assert row["self_ms"] >= 0 and not row["interleaved"], row
    assert found == {path: stat[0] for path, stat in expected.items()}
