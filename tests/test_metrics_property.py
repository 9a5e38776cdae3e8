"""The metrics of random nested programs through the real DSL, against an oracle that adds up
the program's own durations (self time = what each entry spent outside its nested entries)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl import Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage

from .metrics_support import FakeClock, fake_clock

DURATIONS = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])


@dataclass
class Entry:
    """One DSL use: ``form`` entered ``repeat`` times (a loop of mini-batches for "iter")."""

    name: str
    form: str
    before: float
    after: float
    repeat: int
    children: list[Entry] = field(default_factory=list)


def entries(depth: int) -> st.SearchStrategy[Entry]:
    children = st.lists(entries(depth - 1), max_size=3) if depth > 0 else st.just([])
    return st.builds(
        Entry,
        name=st.sampled_from(["a", "b", "c/d", "e%"]),
        form=st.sampled_from(["with", "call", "iter", "gen"]),
        before=DURATIONS,
        after=DURATIONS,
        repeat=st.integers(1, 3),
        children=children,
    )


programs = st.lists(entries(3), min_size=1, max_size=4)


def run(program: list[Entry], clock: FakeClock) -> None:
    for entry in program:
        run_entry(entry, clock)


def body(entry: Entry, clock: FakeClock) -> None:
    clock.advance(entry.before)
    run(entry.children, clock)
    clock.advance(entry.after)


def run_entry(entry: Entry, clock: FakeClock) -> None:
    if entry.form == "iter":
        for _ in mini_batch_window(range(entry.repeat), name=entry.name):
            body(entry, clock)
        return
    for _ in range(entry.repeat):
        if entry.form == "with":
            with profile_stage(entry.name):
                body(entry, clock)
        elif entry.form == "call":
            profile_stage(entry.name)(body)(entry, clock)
        else:  # a generator: the consumer's time between items is not the stage's

            @profile_stage(entry.name)
            def produce() -> Iterator[None]:
                clock.advance(entry.before)
                yield
                run(entry.children, clock)
                yield
                clock.advance(entry.after)

            for _ in produce():
                clock.advance(8.0)


def segment(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F")


def oracle(program: list[Entry], prefix: str = "") -> tuple[dict[str, list[float]], float, float]:
    """Per path [total, self, count]; the program's elapsed time (generators' consumers
    included); and the part of it inside its own top-level entries."""
    stats: dict[str, list[float]] = {}
    elapsed = inside = 0.0
    for entry in program:
        path = f"{prefix}/{segment(entry.name)}" if prefix else segment(entry.name)
        nested, nested_elapsed, nested_inside = oracle(entry.children, path)
        own = entry.before + entry.after
        stat = stats.setdefault(path, [0.0, 0.0, 0])
        stat[0] += entry.repeat * (own + nested_elapsed)
        # its own work, and nested generators' consumers: time in no nested entry
        stat[1] += entry.repeat * (own + nested_elapsed - nested_inside)
        stat[2] += entry.repeat
        for key, (total, self_s, count) in nested.items():
            merged = stats.setdefault(key, [0.0, 0.0, 0])
            merged[0] += entry.repeat * total
            merged[1] += entry.repeat * self_s
            merged[2] += entry.repeat * count
        consumer = 16.0 if entry.form == "gen" else 0.0
        inside += entry.repeat * (own + nested_elapsed)
        elapsed += entry.repeat * (own + nested_elapsed + consumer)
    return stats, elapsed, inside


@pytest.fixture(scope="module")
def save(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nsys")


@settings(max_examples=60)
@given(program=programs, traced=st.booleans())
def test_random_programs(save: Path, program: list[Entry], traced: bool) -> None:
    """Totals, self times and counts by path equal the oracle's, timed only and also traced (a
    profiled nsys step: no torch session, so it is quick)."""
    with pytest.MonkeyPatch.context() as patch, fake_clock(patch) as clock:
        extra = {"enable": True, "tool": "nsys", "steps": [1], "save_path": str(save)} if traced else {}
        config = ProfilerConfig(metrics=Metrics(enabled=True), **extra)  # type: ignore[arg-type]
        with Profiler(config, role="actor", rank=0, world_size=1) as profiler:
            profiler.start(1)
            run(program, clock)
            timings = profiler.stop()
    assert timings is not None
    expected, elapsed, _ = oracle(program)
    got = {path: [t.total_s, t.self_s, t.count] for path, t in timings.stages.items()}
    assert got == expected
    assert timings.wall_s == elapsed
