"""Every timed step's ledger from the always-on metrics (``profdsl.metrics._ledger``), and
``profile_stage(kind=...)``: the DSL's entries, run in several contexts at once through the real
profiler, against an independent tick oracle; the flat keys, the metrics log's lines, the
bound on kept stretches, profiling's waits, and the kinds written into a trace."""

from __future__ import annotations

import contextvars
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl import Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage, rollout_window
from profdsl.collect.metrics_log import read_log
from profdsl.core._kinds import STAGE_KINDS, kind_of
from profdsl.errors import ConfigError
from profdsl.metrics import NAMES
from profdsl.metrics import _tree as tree

from .metrics_support import FakeClock, metered, totals
from .profiling import config
from .traces import trace_files

BASES = ("generate", "update", "reward", "misc")
STEP_END = 40  # ticks (seconds of the fake clock) from the step's start


@st.composite
def schedules(draw: Any) -> list[tuple[int, int, int, str, str | None, tuple[int, int] | None]]:
    """Up to three contexts (threads or tasks), each with disjoint outermost stages on integer
    ticks (some still open when the step ends at tick 40), some with one nested stage inside:
    ``(context, start, end, name, declared kind, nested (start, end) or None)``."""
    out = []
    index = 0
    for ctx in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, 10))
        for _ in range(draw(st.integers(0, 3))):
            start = at + draw(st.integers(0, 8))
            end = start + draw(st.integers(1, 15))
            if start >= STEP_END + 5:
                break
            nested = None
            if end - start >= 3 and draw(st.booleans()):
                a = draw(st.integers(start + 1, end - 2))
                nested = (a, draw(st.integers(a + 1, end - 1)))
            base = draw(st.sampled_from(BASES))
            declared = draw(st.none() | st.sampled_from(STAGE_KINDS))
            out.append((ctx, start, end, f"{base}_{index}", declared, nested))
            index += 1
            at = end
    return out


def oracle(stages: list[tuple[int, int, str]]) -> tuple[dict[str, int], int]:
    """Tick by tick over the step [0, 40): of the outermost stages running, the one that began
    last takes the tick (then the one ending first, then the first listed); the ticks no stage
    covers are ``outside``. Returns the buckets with time and the concurrent ticks."""
    buckets: Counter[str] = Counter()
    concurrent = 0
    for tick in range(STEP_END):
        running = [i for i, (a, b, _) in enumerate(stages) if a <= tick < b]
        if not running:
            buckets["outside"] += 1
            continue
        winner = min(running, key=lambda i: (-stages[i][0], stages[i][1], i))
        buckets[stages[winner][2]] += 1
        concurrent += len(running) - 1
    return dict(buckets), concurrent


def run_schedule(
    clock: FakeClock, schedule: list[tuple[int, int, int, str, str | None, tuple[int, int] | None]]
) -> tuple[Any, list[tuple[int, int, str]]]:
    """Run ``schedule`` as one timed step (each context a ``contextvars`` context of its own,
    as a thread or task has), the clock moved tick by tick; returns the step's timings and the
    outermost stages that ended inside the step, in the order they ended, with their kinds."""
    contexts = {ctx: contextvars.copy_context() for ctx, *_ in schedule}
    events: list[tuple[int, int, int, Any, str]] = []  # (tick, 0: exit / 1: enter, order, stage, what)
    ended: dict[int, tuple[int, int, str]] = {}
    for order, (ctx, start, end, name, declared, nested) in enumerate(schedule):
        outer = profile_stage(name, kind=declared)
        events += [(start, 1, order * 4, (ctx, outer), "enter"), (end, 0, order * 4 + 3, (ctx, outer), "exit")]
        if nested is not None:
            inner = profile_stage("inner", kind="reward")
            events += [
                (nested[0], 1, order * 4 + 1, (ctx, inner), "enter"),
                (nested[1], 0, order * 4 + 2, (ctx, inner), "exit"),
            ]
        if end <= STEP_END:
            ended[order * 4 + 3] = (start, end, kind_of(name, declared))
    events.sort(key=lambda e: (e[0], e[1], -e[2] if e[1] == 0 else e[2]))
    profiler = metered()
    began = clock.now
    profiler.start(1)
    listed: list[tuple[int, int, str]] = []
    stopped = False
    timings = None
    for tick, _, order, (ctx, stage), what in events:
        if tick > STEP_END and not stopped:
            clock.now = began + STEP_END
            timings, stopped = profiler.stop(), True
        clock.now = began + tick
        if what == "enter":
            contexts[ctx].run(stage.__enter__)
        else:
            contexts[ctx].run(stage.__exit__, None, None, None)
            if order in ended:
                listed.append(ended[order])
    if not stopped:
        clock.now = began + STEP_END
        timings = profiler.stop()
    profiler.close()
    return timings, listed


@settings(deadline=None, max_examples=150)
@given(schedules())
def test_the_metrics_ledger_equals_the_tick_oracle(schedule: list[Any]) -> None:
    """Concurrent contexts, nested stages (charged to their outermost stage), declared and
    default kinds, stages still open at the step's end (not counted): each bucket of the step's
    ledger is the oracle's, they add up to the wall time, and ``concurrent`` is the ticks that
    ran beside the one charged."""
    with pytest.MonkeyPatch.context() as patch:
        clock = FakeClock()
        patch.setattr(tree, "clock", clock)
        timings, listed = run_schedule(clock, schedule)
    expected, concurrent = oracle(listed)
    assert timings is not None and timings.ledger is not None
    assert {k: v for k, v in timings.ledger.items() if v} == expected
    assert sum(timings.ledger.values()) == timings.wall_s == STEP_END
    assert timings.concurrent_s == concurrent == sum((timings.ledger_beside or {}).values())
    flat = timings.flat()
    assert totals(flat, NAMES.ledger) == dict(timings.ledger)
    assert set(totals(flat, NAMES.ledger)) == {*STAGE_KINDS, "overhead", "outside"}


def test_a_kind_must_be_one_of_the_documented_kinds() -> None:
    """kind= is checked when the stage is made, with a suggestion on a typo."""
    with pytest.raises(ConfigError, match=r"profile_stage kind must be one of 'generation'.*got 'updat'.*'update'"):
        profile_stage("x", kind="updat")
    with pytest.raises(ConfigError, match="profile_stage kind"):
        profile_stage("x", kind=3)  # type: ignore[arg-type]
    assert [profile_stage("x", kind=k).kind for k in STAGE_KINDS] == list(STAGE_KINDS)
    assert profile_stage("x").kind is None and rollout_window([]).kind == "generation"


def test_the_metrics_log_and_flat_keys_carry_kinds_and_the_ledger(tmp_path: Path) -> None:
    """A declared kind beats the name's default, rollout_window is generation whatever its name,
    a mini-batch window nests: each stage line says its kind, the line's ledger adds up to its
    wall time, and on_step gets the same buckets as ``ledger_s/<bucket>``."""
    seen: list[dict[str, float]] = []
    cfg = ProfilerConfig(save_path=str(tmp_path), metrics=Metrics(enabled=True, log=True))
    with Profiler(cfg, role="actor", rank=0, world_size=1, on_step=lambda _, m: seen.append(m)) as profiler:
        for step in (1, 2):
            with profiler.step(step):
                with rollout_window([], name="sample"):
                    pass
                with profile_stage("update_actor", kind="inference"):
                    for _ in mini_batch_window(range(2)):
                        pass
                with profile_stage("save_ckpt"):
                    pass
    lines, problems = read_log(tmp_path)
    assert not problems and [line.step for line in lines] == [1, 2]
    for line, flat in zip(lines, seen):
        assert line.stages is not None and line.ledger is not None and line.wall_s is not None
        kinds = {path: stage.kind for path, stage in line.stages.items()}
        assert kinds == {
            "sample": "generation",
            "update_actor": "inference",
            "update_actor/mini_batch": "update",
            "save_ckpt": "other",
        }
        assert sum(round(v * 1e9) for v in line.ledger.values()) == round(line.wall_s * 1e9)  # to the ns
        assert line.ledger["generation"] > 0 and line.ledger["inference"] > 0 and line.ledger["update"] == 0
        assert totals(flat, NAMES.ledger) == dict(line.ledger)
        assert flat[NAMES.concurrent] == 0.0 and line.ledger_beside is None


def test_past_the_bound_a_step_has_no_ledger_and_says_why() -> None:
    """One stretch more than a step keeps: no ledger (and no ledger keys), the reason names the
    count and the bound; the next step, within it, has its ledger."""
    stage = profile_stage("update")
    with metered() as profiler:
        with profiler.step(1):
            for _ in range(tree.MAX_SPANS + 1):
                with stage:
                    pass
        first = profiler.meter.timings
        with profiler.step(2):
            with stage:
                pass
        second = profiler.meter.timings
    assert first is not None and first.ledger is None and first.stages["update"].count == tree.MAX_SPANS + 1
    assert first.ledger_why is not None
    assert f"{tree.MAX_SPANS + 1} stretches" in first.ledger_why and f"the {tree.MAX_SPANS} a step" in first.ledger_why
    assert not totals(first.flat(), NAMES.ledger) and NAMES.concurrent not in first.flat()
    assert second is not None and second.ledger is not None and second.ledger_why is None


def test_the_bound_is_the_one_the_step_began_with_for_every_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tree.MAX_SPANS`` as it is when a step begins bounds that step's stretches, whichever form
    the top-level entries take (a ``with`` block, a decorated call): three stretches past a bound
    of two, no ledger, and the reason names both."""
    monkeypatch.setattr(tree, "MAX_SPANS", 2)
    stage = profile_stage("update")

    @profile_stage("generate")
    def generate() -> None:
        return None

    with metered() as profiler:
        with profiler.step(1):
            with stage:
                pass
            generate()
            with stage:
                pass
        first = profiler.meter.timings
    assert first is not None and first.ledger is None and first.ledger_why is not None
    assert "3 stretches" in first.ledger_why and "the 2 a step" in first.ledger_why
    assert first.stages["update"].count == 2 and first.stages["generate"].count == 1


def test_a_generator_stage_leaves_each_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decorated generator stage is suspended at each ``yield``: its stretches, not the time
    the consumer spent between them, are its bucket's."""
    clock = FakeClock()
    monkeypatch.setattr(tree, "clock", clock)

    @profile_stage("generate_samples")
    def samples() -> Any:
        for _ in range(3):
            clock.advance(1.0)
            yield None

    with metered() as profiler:
        with profiler.step(1):
            for _ in samples():
                clock.advance(2.0)  # the consumer, outside the stage
        timings = profiler.meter.timings
    assert timings is not None and timings.ledger is not None
    assert timings.ledger["generation"] == 3.0 and timings.ledger["outside"] == 6.0


def test_a_generator_stage_still_open_at_the_steps_end_leaves_no_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decorated generator stage suspended at a ``yield`` when its step ends is still open: it
    is not in the step's timings, and the stretches it ran are not in its ledger either (its time
    there is ``outside``, as for any entry open across the boundary); nor in the next step's, where
    it ends. One that ends inside its step keeps them all, with its count."""
    clock = FakeClock()
    monkeypatch.setattr(tree, "clock", clock)

    @profile_stage("generate_samples")
    def samples() -> Any:
        for _ in range(3):
            clock.advance(1.0)
            yield None

    with metered() as profiler:
        profiler.start(1)
        batches = samples()
        for _ in range(2):
            next(batches)
            clock.advance(2.0)  # the consumer, outside the stage
        first = profiler.stop()
        profiler.start(2)
        for _ in batches:
            clock.advance(2.0)
        second = profiler.stop()
        profiler.start(3)
        for _ in samples():
            pass
        third = profiler.stop()
    assert first is not None and first.ledger is not None and second is not None and second.ledger is not None
    assert "generate_samples" not in first.stages and "generate_samples" not in second.stages
    assert first.ledger["generation"] == 0.0 and first.ledger["outside"] == first.wall_s == 6.0
    assert second.ledger["generation"] == 0.0 and second.ledger["outside"] == second.wall_s == 3.0
    assert third is not None and third.ledger is not None and third.stages["generate_samples"].count == 1
    assert third.ledger["generation"] == third.stages["generate_samples"].total_s == 3.0


def test_a_discrete_stage_capture_is_the_steps_overhead(tmp_path: Path) -> None:
    """A profiled discrete stage starts and stops its own capture inside the step, outside the
    stage's time: that wait is the ledger's overhead (real torch profiler), the buckets still
    add up, and the trace says the stage's declared kind."""
    pytest.importorskip("torch")
    cfg = config(tmp_path, discrete=True, metrics=Metrics(enabled=True, log=True))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            with profile_stage("score", kind="reward"):
                pass
        timings = profiler.meter.timings
    assert timings is not None and timings.ledger is not None
    assert timings.ledger["overhead"] > 0 and timings.ledger["reward"] > 0
    assert sum(round(v * 1e9) for v in timings.ledger.values()) == round(timings.wall_s * 1e9)
    from profdsl.analysis._reader import header

    (trace,) = trace_files(tmp_path)
    meta = header(trace)["profdsl"]
    assert meta["regions"]["kinds"] == {"score": "reward"}


def test_a_continuous_trace_lists_declared_kinds_only(tmp_path: Path) -> None:
    """A continuous step's trace metadata lists each stage's declared kind (rollout_window's is
    generation), and none for a stage that declared none (its kind is by name when read)."""
    pytest.importorskip("torch")
    with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            with rollout_window([], name="sample"):
                pass
            with profile_stage("judge", kind="reward"):
                with profile_stage("inner", kind="data"):
                    pass
            with profile_stage("update_actor"):
                pass
    from profdsl.analysis._reader import header

    (trace,) = trace_files(tmp_path)
    kinds = header(trace)["profdsl"]["regions"]["kinds"]
    assert kinds == {"sample": "generation", "judge": "reward", "inner": "data"}
    assert json.dumps(kinds)  # plain JSON
