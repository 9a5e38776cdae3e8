"""The step ledger's arithmetic (``profdsl.core._ledger``, ``core.intervals``, ``core.kinds``)
against an independent oracle: integer ticks, each assigned to a bucket by brute force."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl.core import _intervals as intervals
from profdsl.core._kinds import STAGE_KINDS, kind_of
from profdsl.core._ledger import OUTSIDE, OVERHEAD, Stage, split

KINDS = ("generation", "update", "inference", "custom")


@st.composite
def steps(draw: Any) -> tuple[int, int, list[Stage], int]:
    """A step span in 0..60 and a forest of stages that may nest, run concurrently, overlap,
    reach past the step or lie wholly outside it; each nested stage names an earlier parent."""
    start = draw(st.integers(0, 40))
    end = draw(st.integers(start, 60))
    stages: list[Stage] = []
    for index in range(draw(st.integers(0, 8))):
        a = draw(st.integers(0, 70))
        b = draw(st.integers(a, 75))
        parent = draw(st.none() | st.integers(0, index - 1)) if index else None
        stages.append(Stage(a, b, draw(st.sampled_from(KINDS)), parent, f"t{draw(st.integers(0, 2))}"))
    return start, end, stages, draw(st.integers(0, 80))


def oracle(start: int, end: int, stages: list[Stage], overhead: int) -> dict[str, Any]:
    """Tick by tick: the outermost stages covering tick t are those with start <= t < end; the
    one that began last takes it (then the one ending first, then the first listed)."""
    outer = [i for i, s in enumerate(stages) if s.parent is None]

    def root(i: int) -> int:
        return i if stages[i].parent is None else root(stages[i].parent)  # type: ignore[arg-type]

    buckets: Counter[str] = Counter()
    beside: Counter[str] = Counter()
    charged = [0] * len(stages)
    uncovered = 0
    for tick in range(start, end):
        running = [i for i in outer if stages[i].start <= tick < stages[i].end]
        if not running:
            uncovered += 1
            continue
        winner = min(running, key=lambda i: (-stages[i].start, stages[i].end, i))
        charged[winner] += 1
        buckets[stages[winner].kind] += 1
        for other in running:
            if other != winner:
                beside[stages[other].kind] += 1
    beyond = sum(1 for i in outer for tick in range(stages[i].start, stages[i].end) if not start <= tick < end)
    placed = min(overhead, uncovered)
    buckets[OVERHEAD], buckets[OUTSIDE] = placed, uncovered - placed
    return {
        "buckets": {k: v for k, v in buckets.items() if v},
        "beside": dict(beside),
        "charged": charged,
        "bucket_of": [stages[root(i)].kind for i in range(len(stages))],
        "beyond": beyond,
        "unplaced": overhead - placed,
    }


@settings(deadline=None, max_examples=400)
@given(steps())
def test_the_split_equals_the_tick_oracle(case: tuple[int, int, list[Stage], int]) -> None:
    start, end, stages, overhead = case
    ledger = split(start, end, stages, overhead)
    expected = oracle(start, end, stages, overhead)
    assert {k: v for k, v in ledger.buckets.items() if v} == expected["buckets"]
    assert dict(ledger.beside) == expected["beside"]
    assert list(ledger.charged) == expected["charged"]
    assert list(ledger.bucket_of) == expected["bucket_of"]
    assert (ledger.beyond, ledger.overhead_unplaced) == (expected["beyond"], expected["unplaced"])


@settings(deadline=None, max_examples=400)
@given(steps())
def test_buckets_are_non_negative_add_up_and_hold_each_stage_once(case: tuple[int, int, list[Stage], int]) -> None:
    start, end, stages, overhead = case
    ledger = split(start, end, stages, overhead)
    assert all(v >= 0 for v in ledger.buckets.values())
    assert sum(ledger.buckets.values()) == ledger.wall == end - start
    assert set(STAGE_KINDS) | {OVERHEAD, OUTSIDE} <= set(ledger.buckets)
    assert len(ledger.bucket_of) == len(ledger.charged) == len(stages)  # each stage: one bucket
    per_bucket: Counter[str] = Counter()
    for stage, bucket, charged in zip(stages, ledger.bucket_of, ledger.charged):
        per_bucket[bucket] += charged
        if stage.parent is not None:
            assert charged == 0 and bucket == ledger.bucket_of[stage.parent]
        else:
            assert bucket == stage.kind
            inside = max(0, min(stage.end, end) - max(stage.start, start))
            assert 0 <= charged <= inside
    for kind in set(per_bucket) | {k for k in ledger.buckets if k not in (OVERHEAD, OUTSIDE)}:
        assert per_bucket[kind] == ledger.buckets[kind]
    assert ledger.concurrent >= 0 and ledger.buckets[OVERHEAD] <= overhead


waits_lists = st.lists(st.tuples(st.integers(0, 75), st.integers(0, 75)).map(lambda t: (min(t), max(t))), max_size=4)


def waits_oracle(
    start: int, end: int, stages: list[Stage], overhead: int, waits: list[tuple[int, int]]
) -> dict[str, Any]:
    """Tick by tick, with placed waits: a tick inside any wait is overhead, whichever stage runs
    (the stage that began last would have won it, and is not charged it; the others running are
    beside); any other tick goes as in :func:`oracle`; the unplaced ``overhead`` fills the ticks
    no stage covers and no wait holds, and its excess is unplaced."""
    outer = [i for i, s in enumerate(stages) if s.parent is None]
    buckets: Counter[str] = Counter()
    beside: Counter[str] = Counter()
    charged = [0] * len(stages)
    free = 0
    for tick in range(start, end):
        running = [i for i in outer if stages[i].start <= tick < stages[i].end]
        held = any(a <= tick < b for a, b in waits)
        if running:
            winner = min(running, key=lambda i: (-stages[i].start, stages[i].end, i))
            for other in running:
                if other != winner:
                    beside[stages[other].kind] += 1
        if held:
            buckets[OVERHEAD] += 1
        elif running:
            charged[winner] += 1
            buckets[stages[winner].kind] += 1
        else:
            free += 1
    placed = min(overhead, free)
    buckets[OVERHEAD] += placed
    buckets[OUTSIDE] += free - placed
    return {
        "buckets": {k: v for k, v in buckets.items() if v},
        "beside": dict(beside),
        "charged": charged,
        "unplaced": overhead - placed,
    }


@settings(deadline=None, max_examples=500)
@given(steps(), waits_lists)
def test_placed_waits_are_overhead_whatever_runs_then(
    case: tuple[int, int, list[Stage], int], waits: list[tuple[int, int]]
) -> None:
    """Placed waits (some inside stages, nested ones' too, some overlapping, some outside the
    step) against the tick oracle: each tick inside one is overhead; the buckets add up."""
    start, end, stages, overhead = case
    ledger = split(start, end, stages, overhead, waits)
    expected = waits_oracle(start, end, stages, overhead, waits)
    assert {k: v for k, v in ledger.buckets.items() if v} == expected["buckets"]
    assert dict(ledger.beside) == expected["beside"]
    assert list(ledger.charged) == expected["charged"]
    assert ledger.overhead_unplaced == expected["unplaced"]
    assert sum(ledger.buckets.values()) == ledger.wall == end - start
    assert all(v >= 0 for v in ledger.buckets.values())


def test_a_wait_inside_a_stage_is_overhead_not_the_stage() -> None:
    """A scheduled stage's schedule step (4 ticks) between two mini-batches of an update: not
    update; the same length unplaced goes to the time outside the update instead."""
    placed = split(0, 100, [Stage(10, 60, "update"), Stage(12, 30, "update", parent=0)], waits=[(30, 34)])
    assert (placed.buckets["update"], placed.buckets[OVERHEAD], placed.buckets[OUTSIDE]) == (46, 4, 50)
    assert placed.beside == {} and placed.overhead_unplaced == 0
    unplaced = split(0, 100, [Stage(10, 60, "update")], overhead=4)
    assert (unplaced.buckets["update"], unplaced.buckets[OVERHEAD], unplaced.buckets[OUTSIDE]) == (50, 4, 46)


def test_concurrent_work_is_beside_not_added() -> None:
    """Update and generation both run through a 100-tick step, on two threads: the step is 100
    ticks, not 200. They begin and end together, so the first listed takes every tick and the
    other's 100 ticks are beside the buckets."""
    ledger = split(0, 100, [Stage(0, 100, "update", track="main"), Stage(0, 100, "generation", track="bg")])
    assert ledger.buckets["update"] == 100 and ledger.buckets["generation"] == 0
    assert dict(ledger.beside) == {"generation": 100} and ledger.concurrent == 100


@pytest.mark.parametrize(
    "bad",
    [
        lambda: split(5, 4, []),
        lambda: split(0, 4, [], overhead=-1),
        lambda: split(0, 4, [Stage(3, 2, "update")]),
        lambda: split(0, 4, [Stage(0, 2, OUTSIDE)]),
        lambda: split(0, 4, [Stage(0, 2, "update", parent=1)]),
        lambda: split(0, 4, [Stage(0, 2, "update", parent=1), Stage(0, 2, "update", parent=0)]),
        lambda: split(0, 4, [], waits=[(3, 2)]),
    ],
)
def test_bad_input_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        bad()


spans = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)).map(lambda t: (min(t), max(t))), max_size=6)


@settings(deadline=None, max_examples=300)
@given(spans, spans)
def test_interval_sets_equal_tick_sets(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    def ticks(spans: list[tuple[int, int]]) -> set[int]:
        return {t for s, e in spans for t in range(s, e)}

    ua, ub = intervals.union(a), intervals.union(b)
    assert ticks(ua) == ticks(a) and intervals.length(ua) == len(ticks(a))
    assert all(x[1] < y[0] for x, y in zip(ua, ua[1:]))  # sorted, disjoint, not touching
    assert ticks(intervals.subtract(ua, ub)) == ticks(a) - ticks(b)
    assert intervals.length(intervals.subtract(ua, ub)) == len(ticks(a) - ticks(b))


@pytest.mark.parametrize(
    ("label", "kind"),
    [
        ("generate_sequences", "generation"),
        ("generate (engine)", "generation"),
        ("rollout", "generation"),
        ("gen", "generation"),
        ("compute_log_prob", "inference"),
        ("compute_ref_log_prob", "inference"),
        ("ref", "inference"),
        ("reference_pass", "inference"),
        ("compute_values", "inference"),
        ("refresh", "other"),
        ("update_actor", "update"),
        ("train_step", "update"),
        ("mini_batch", "update"),
        ("sync_weights", "weight_sync"),
        ("weight_sync", "weight_sync"),
        ("update_weights_from_tensor", "weight_sync"),
        ("reward_fn", "reward"),
        ("compute_rm_score", "reward"),
        ("load_batch", "data"),
        ("dataloader", "data"),
        ("checkpoint", "other"),
        ("whole trace", "other"),
    ],
)
def test_default_kinds_by_name(label: str, kind: str) -> None:
    assert kind_of(label) == kind
    assert kind_of(label.upper()) == kind  # names are compared lower-cased


def test_a_declared_kind_wins_and_an_unknown_one_is_other() -> None:
    assert kind_of("update_actor", "reward") == "reward"
    assert kind_of("update_actor", "teleport") == "other"
