"""The spread of one step's timings over ranks, against a brute-force oracle."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl.metrics import Spread, StageTiming, StepTimings, aggregate

SECONDS = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 3.0])
PATHS = ["gen", "update_actor", "update_actor/mini_batch"]


@st.composite
def gathered(draw: st.DrawFn) -> list[StepTimings]:
    """Timings of distinct (role, rank) pairs; each rank entered a subset of the stages."""
    pairs = draw(st.lists(st.tuples(st.sampled_from(["actor", "ref"]), st.integers(0, 7)), unique=True, max_size=10))
    out = []
    for role, rank in pairs:
        stages = draw(st.dictionaries(st.sampled_from(PATHS), SECONDS))
        out.append(
            StepTimings(
                role=role,
                rank=rank,
                step=4,
                wall_s=draw(SECONDS),
                stages={path: StageTiming(total_s=s, self_s=s, count=1) for path, s in stages.items()},
            )
        )
    return out


def brute_force(timings: list[StepTimings]) -> dict[tuple[str, str | None], tuple[int, float, Fraction, float, int]]:
    """(ranks, min, exact mean, max, slowest rank) per role and stage, by sorting each group."""
    groups: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for t in timings:
        groups.setdefault((t.role, None), []).append((t.wall_s, t.rank))
        for path, stage in t.stages.items():
            groups.setdefault((t.role, path), []).append((stage.total_s, t.rank))
    out = {}
    for key, samples in groups.items():
        by_time = sorted(samples, key=lambda s: (-s[0], s[1]))  # slowest first, lowest rank on ties
        ascending = sorted(s for s, _ in samples)
        mean = sum((Fraction(s) for s, _ in samples), Fraction(0)) / len(samples)
        out[key] = (len(samples), ascending[0], mean, ascending[-1], by_time[0][1])
    return out


@given(gathered())
def test_spread_equals_brute_force(timings: list[StepTimings]) -> None:
    summary = aggregate(4, timings)
    expected = brute_force(timings)
    got = {(s.role, s.stage): s for s in summary.spreads}
    assert set(got) == set(expected)
    for key, (ranks, least, mean, most, slowest) in expected.items():
        spread = got[key]
        assert (spread.ranks, spread.min_s, spread.max_s, spread.slowest_rank) == (ranks, least, most, slowest)
        assert spread.mean_s == pytest.approx(float(mean))
    assert summary.timings == tuple(timings) and summary.step == 4


@given(gathered())
def test_flat_names_every_spread(timings: list[StepTimings]) -> None:
    summary = aggregate(4, timings)
    flat = summary.flat()
    assert len(flat) == 4 * len(summary.spreads)
    for spread in summary.spreads:
        if spread.stage is None:
            assert flat[f"timing_step_s_max/{spread.role}"] == spread.max_s
            assert flat[f"timing_step_slowest_rank/{spread.role}"] == spread.slowest_rank
        else:
            key = f"{spread.role}/{spread.stage}"
            assert flat[f"timing_s_min/{key}"] == spread.min_s
            assert flat[f"timing_s_mean/{key}"] == spread.mean_s
            assert flat[f"timing_s_max/{key}"] == spread.max_s
            assert flat[f"timing_slowest_rank/{key}"] == spread.slowest_rank


def test_a_straggler() -> None:
    def rank(r: int, seconds: float) -> StepTimings:
        return StepTimings(
            role="actor",
            rank=r,
            step=1,
            wall_s=seconds + 1,
            stages={"update_actor": StageTiming(total_s=seconds, self_s=seconds, count=1)},
        )

    summary = aggregate(1, [rank(0, 1.0), rank(1, 1.0), rank(2, 9.0), rank(3, 1.0)])
    assert (
        Spread(role="actor", stage="update_actor", ranks=4, min_s=1.0, mean_s=3.0, max_s=9.0, slowest_rank=2)
        in summary.spreads
    )


def test_nothing_gathered() -> None:
    assert aggregate(1, []).flat() == {}


def test_a_role_is_one_key_segment_escaped_like_a_stage() -> None:
    """Role ``a/b`` with stage ``c`` and role ``a`` with the nested stage path ``b/c`` are
    different stages, so they get different flat keys (the role is escaped as stage names are)."""

    def timing(role: str, path: str, seconds: float) -> StepTimings:
        return StepTimings(
            role=role,
            rank=0,
            step=1,
            wall_s=seconds,
            stages={path: StageTiming(total_s=seconds, self_s=seconds, count=1)},
        )

    flat = aggregate(1, [timing("a/b", "c", 1.0), timing("a", "b/c", 2.0)]).flat()
    assert flat["timing_s_max/a%2Fb/c"] == 1.0 and flat["timing_s_max/a/b/c"] == 2.0
    assert flat["timing_step_s_max/a%2Fb"] == 1.0 and flat["timing_step_s_max/a"] == 2.0
    assert len(flat) == 2 * 2 * 4  # nothing replaced: 4 figures per (role, stage) and per role's step
    assert aggregate(1, [timing("50%", "x", 1.0)]).flat()["timing_s_max/50%25/x"] == 1.0
