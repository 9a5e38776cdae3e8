"""Tests for the DSL as a whole: every word × every callable kind × {nothing on, traced, metered,
both}, checking results, exceptions, signatures and the nesting the trace and the metrics record.

Every decorated body opens an inner stage that stays open across the body's ``await`` or
``yield``, and each is called twice (once returning, once raising), so each word's path has two
entries and so has the inner stage under it, in the trace (``profdsl summary``) and in the
metrics alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli
from profdsl import Metrics, Profiler, mini_batch_window, profile_stage, rollout_window
from profdsl._capture.annotators import TorchAnnotator
from profdsl.integrations.verl import DistProfiler

from .fake_engines import CountingEngine as Engine
from .profiling import config, work

torch = pytest.importorskip("torch")

KINDS = (
    "function",
    "method",
    "static_above",
    "static_below",
    "class_above",
    "class_below",
    "coroutine",
    "generator",
    "async_generator",
)
MODES = ("nothing", "traced", "metered", "both")


class BodyError(Exception):
    """The body's own exception."""


def bodies(inner: str, error: BodyError) -> dict[str, Callable[..., Any]]:
    """The undecorated body of each kind (``owner`` is ``self``, ``cls`` or absent)."""

    def plain(x: int, *, fail: bool = False) -> int:
        """A plain body."""
        with profile_stage(inner):
            work()
        if fail:
            raise error
        return x * 2

    def bound(owner: Any, x: int, *, fail: bool = False) -> int:
        """A method body."""
        return plain(x * owner.factor, fail=fail)

    async def coroutine(owner: Any, x: int, *, fail: bool = False) -> int:
        """A coroutine body: its inner stage spans an await."""
        with profile_stage(inner):
            work()
            await asyncio.sleep(0)
            work()
        if fail:
            raise error
        return x * 2

    def generator(owner: Any, x: int, *, fail: bool = False) -> Any:
        """A generator body: its inner stage spans a yield."""
        with profile_stage(inner):
            work()
            yield x
            work()
        if fail:
            raise error
        yield x * 2
        return "done"

    async def async_generator(owner: Any, x: int, *, fail: bool = False) -> Any:
        """An async generator body: its inner stage spans an await and a yield."""
        with profile_stage(inner):
            await asyncio.sleep(0)
            work()
            yield x
            work()
        if fail:
            raise error
        yield x * 2

    return {
        "plain": plain,
        "bound": bound,
        "coroutine": coroutine,
        "generator": generator,
        "async_generator": async_generator,
    }


def build(kind: str, word: Any, body: dict[str, Callable[..., Any]]) -> tuple[Callable[..., Any], Any, Any]:
    """(how to call it, the decorated callable as reached, the undecorated one as reached)."""

    class Plain:
        factor = 1

    class Host:
        factor = 1
        profiler: Any = None

    original: Any = body["plain"] if kind == "function" else None
    if kind == "function":
        decorated: Any = word(body["plain"])
    elif kind in ("method", "coroutine", "generator", "async_generator"):
        raw = body["bound" if kind == "method" else kind]
        Host.call = word(raw)  # type: ignore[attr-defined]
        Plain.call = raw  # type: ignore[attr-defined]
        decorated, original = Host().call, Plain().call  # type: ignore[attr-defined]
    else:
        raw = body["plain"] if kind.startswith("static") else body["bound"]
        wrap = staticmethod if kind.startswith("static") else classmethod
        Host.call = word(wrap(raw)) if kind.endswith("above") else wrap(word(raw))  # type: ignore[attr-defined]
        Plain.call = wrap(raw)  # type: ignore[attr-defined]
        decorated, original = Host.call, Plain.call  # type: ignore[attr-defined]

    def call(x: int, fail: bool) -> Any:
        if kind == "coroutine":
            return asyncio.run(decorated(x, fail=fail))
        if kind == "generator":
            return list(decorated(x, fail=fail))
        if kind == "async_generator":

            async def collect() -> list[int]:
                return [item async for item in decorated(x, fail=fail)]

            return asyncio.run(collect())
        return decorated(x, fail=fail)

    return call, decorated, original


def words(engine: Engine) -> dict[str, tuple[Callable[[str], Any], bool]]:
    """Each word, made for a label: (the decorator, whether it opens a region of that label)."""
    return {
        "profile_stage": (lambda label: profile_stage(label), True),
        "mini_batch_window": (lambda label: mini_batch_window(name=label), True),
        "rollout_window": (
            lambda label: rollout_window([engine], name=label),
            True,
        ),  # a region where generation ran (issue 29)
        "annotate": (lambda label: DistProfiler.annotate(role=label), True),
    }


def cases() -> list[tuple[str, str]]:
    found = []
    for word in ("profile_stage", "mini_batch_window", "rollout_window", "annotate"):
        for kind in KINDS:
            if word != "annotate" or kind in ("method", "coroutine", "generator", "async_generator"):
                found.append((word, kind))  # verl's annotate decorates worker methods (self.profiler)
    return found


def summary_paths(folder: Path) -> dict[tuple[str, ...], int]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert profdsl._cli.main(["summary", str(folder), "--json"]) == 0
    found: dict[tuple[str, ...], int] = {}
    for row in json.loads(out.getvalue()):
        found[tuple(row["path"])] = found.get(tuple(row["path"]), 0) + row["count"]
    return found


@pytest.fixture
def refuse_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any region reaching torch fails the test (nothing on: no torch call)."""

    def refuse(*_: object) -> None:
        raise AssertionError("a region reached torch while nothing is on")

    monkeypatch.setattr(TorchAnnotator, "push", refuse)


@pytest.mark.parametrize("mode", MODES)
def test_every_word_and_kind(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    """Results and exceptions pass through unchanged, names, docs, signatures and kinds are
    kept, and each word's entries (and the inner stage's, nested in them) are recorded: in the
    trace when traced, in the metrics when metered, nowhere when nothing is on."""
    if mode == "nothing":
        request.getfixturevalue("refuse_backend")
    traced, metered = mode in ("traced", "both"), mode in ("metered", "both")
    engine = Engine()
    error = BodyError("body")
    cfg = config(tmp_path, enable=traced, relocate_results=False, metrics=Metrics(enabled=metered))
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    facade = DistProfiler(rank=0, config=None, save_file_prefix="actor", world_size=1)
    facade.profiler = profiler  # the facade over this test's profiler
    expected_trace: dict[tuple[str, ...], int] = {}
    expected_metrics: dict[str, int] = {}
    with profiler:
        profiler.start(1)
        for word, kind in cases():
            make, region = words(engine)[word]
            label, inner = f"{word}.{kind}", f"in.{word}.{kind}"
            call, decorated, original = build(kind, make(label), bodies(inner, error))
            if word == "annotate":
                decorated.__self__.profiler = facade
            assert decorated.__name__ == original.__name__ and decorated.__doc__ == original.__doc__
            assert inspect.signature(decorated) == inspect.signature(original)
            for test in (inspect.iscoroutinefunction, inspect.isgeneratorfunction, inspect.isasyncgenfunction):
                assert test(decorated) == test(original), (word, kind, test)
            value = call(3, False)
            assert value == ([3, 6] if "generator" in kind else 6), (word, kind)
            with pytest.raises(BodyError) as info:
                call(3, True)
            assert info.value is error, (word, kind)
            expected_trace[(label, inner) if region else (inner,)] = 2
            if region:
                expected_trace[(label,)] = 2
            expected_metrics[label] = expected_metrics[f"{label}/{inner}"] = 2
        timings = profiler.stop()
    rollouts = sum(1 for word, _ in cases() if word == "rollout_window")
    assert engine.calls == (["start", "stop"] * 2 * rollouts if traced else [])
    counts = {path: t.count for path, t in timings.stages.items()} if timings is not None else {}
    assert counts == (expected_metrics if metered else {})
    if traced:
        assert summary_paths(tmp_path) == expected_trace
