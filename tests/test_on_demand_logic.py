"""The pure logic of on-demand and automatic captures, each against an independent oracle: request
parsing, requested steps in the step tracker, the rolling-median trigger, the slow-rank trigger,
straggler episodes, and the diff's arithmetic."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from profdsl.analysis._diff import METHOD, Sample, compare
from profdsl.config import AutoCapture, Stragglers
from profdsl.core.step_plan import Event, StepPlan, StepTracker
from profdsl.errors import ConfigError
from profdsl.metrics._slow import SlowRanks, SlowSteps, StragglerWatch, watched
from profdsl.records.fields import RecordError, to_json
from profdsl.records.requests import SOURCES, parse_request

# -- request parsing ----------------------------------------------------------------------------

ids = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,79}", fullmatch=True), st.text(max_size=90), st.integers(), st.none()
)
steps_values = st.one_of(
    st.integers(-3, 20_000), st.booleans(), st.floats(allow_nan=True), st.text(max_size=3), st.none()
)
rank_values = st.one_of(
    st.none(),
    st.just("all"),
    st.lists(st.integers(-2, 50), max_size=4),
    st.lists(st.one_of(st.integers(0, 5), st.booleans(), st.text(max_size=2)), max_size=3),
    st.sampled_from(["rank in {0, 3}", "tp == 0", "tp = 0", "first_per_node", "", "bogus"]),
    st.integers(0, 3),
)
role_values = st.one_of(st.none(), st.lists(st.text(max_size=6), max_size=3), st.text(max_size=4), st.integers())
at_values = st.one_of(st.none(), st.integers(-2, 10**13), st.floats(allow_nan=True), st.booleans())
reasons = st.one_of(st.none(), st.text(max_size=1100), st.integers())
sources = st.one_of(st.none(), st.sampled_from([*SOURCES, "cron"]))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def oracle_valid(m: dict[str, Any]) -> bool:
    """Whether a request object is valid, written from the docs' table, not from the schema."""
    import re

    if not (isinstance(m.get("id"), str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,79}", m["id"])):
        return False
    if not (_is_int(m.get("steps")) and 1 <= m["steps"] <= 10_000):
        return False
    ranks = m.get("ranks")
    if ranks is not None and ranks != "all":
        if isinstance(ranks, list):
            if not ranks or not all(_is_int(r) and r >= 0 for r in ranks):
                return False
        elif isinstance(ranks, str):
            if ranks not in ("rank in {0, 3}", "tp == 0", "first_per_node"):
                return False
        else:
            return False
    roles = m.get("roles")
    if roles is not None and not (isinstance(roles, list) and roles and all(isinstance(r, str) and r for r in roles)):
        return False
    at = m.get("at_step")
    if at is not None and not (_is_int(at) and 0 <= at <= 999_999_999_999):
        return False
    reason = m.get("reason")
    if reason is not None and not (isinstance(reason, str) and len(reason) <= 1000):
        return False
    return m.get("source") in (None, *SOURCES)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "id": ids,
            "steps": steps_values,
            "ranks": rank_values,
            "roles": role_values,
            "at_step": at_values,
            "reason": reasons,
            "source": sources,
        },
    )
)
def test_request_parsing_matches_the_oracle(mapping: dict[str, Any]) -> None:
    """A request object parses exactly when the oracle calls it valid; a parsed one writes back
    to the same request, and a malformed one names a field."""
    try:
        request = parse_request(mapping)
    except RecordError as exc:
        assert not oracle_valid(mapping), (mapping, exc)
        assert str(exc)
        return
    assert oracle_valid(mapping), mapping
    assert parse_request(to_json(request)) == request
    if isinstance(mapping.get("ranks"), list):
        assert request.ranks == tuple(sorted(set(mapping["ranks"])))


def test_request_defaults_and_source() -> None:
    """A body without an id gets the receiver's; the receiver says what carried it."""
    request = parse_request({"steps": 2, "source": "auto"}, default_id="http-1", source="http")
    assert (request.id, request.source, request.ranks, request.roles) == ("http-1", "http", None, None)
    with pytest.raises(RecordError, match="id is required"):
        parse_request({"steps": 2})


# -- requested steps in the step tracker --------------------------------------------------------


def oracle_run(
    planned: list[int], continuous: bool, requests: dict[int, list[tuple[int, int, str]]], loop: list[int]
) -> tuple[list[tuple[int, str | None]], list[list[int]], int]:
    """(step, capture) of every profiled step, the sessions (consecutive steps of one capture in
    continuous mode), and how many plan hooks, for a loop over ``loop`` with ``requests[s]`` made
    just before step ``s`` begins."""
    asked: dict[int, str] = {}
    last_planned = max(planned) if planned else None
    profiled, sessions, hooks, hook_done, begun = [], [], 0, False, -1
    open_run: list[int] = []
    open_tag: str | None = "none"
    for step in loop:
        for first, last, tag in requests.get(step, []):
            for s in range(first, last + 1):
                if s > begun:
                    asked.setdefault(s, tag)
        planned_now = step in planned and not hook_done
        tag = None if planned_now else asked.get(step)
        is_profiled = planned_now or step in asked
        if open_run and not (continuous and is_profiled and open_run[-1] == step - 1 and tag == open_tag):
            sessions.append(open_run)
            if open_tag is None and last_planned is not None and open_run[-1] >= last_planned and not hook_done:
                hook_done, hooks = True, hooks + 1
            open_run = []
        if is_profiled:
            profiled.append((step, tag))
            if not open_run:
                open_tag = tag
            open_run.append(step)
        begun = step
        # end of the step: close unless the next step continues it
        following = step + 1
        f_tag = None if (following in planned and not hook_done) else asked.get(following)
        f_profiled = (following in planned and not hook_done) or following in asked
        if open_run and not (continuous and f_profiled and f_tag == open_tag):
            sessions.append(open_run)
            if open_tag is None and last_planned is not None and open_run[-1] >= last_planned and not hook_done:
                hook_done, hooks = True, hooks + 1
            open_run = []
    if open_run:
        sessions.append(open_run)
    ran_planned = any(tag is None for _, tag in profiled)
    if ran_planned and not hook_done:
        hooks += 1
    return profiled, sessions, hooks


@settings(deadline=None)
@example(planned=[3], continuous=True, requests={0: [(2, 1)], 1: [(4, 1)]}, skip=set())  # captures side by side
@example(planned=[2], continuous=True, requests={0: [(1, 2)]}, skip={2})  # a planned step in a request, skipped
@example(planned=[1], continuous=False, requests={3: [(0, 5)]}, skip=set())  # asked late: begun steps are not
@example(planned=[0, 1], continuous=True, requests={}, skip={1})  # a continuous run's next step skipped
@given(
    planned=st.lists(st.integers(0, 12), max_size=4, unique=True).map(sorted),
    continuous=st.booleans(),
    requests=st.dictionaries(
        st.integers(0, 12), st.lists(st.tuples(st.integers(0, 14), st.integers(0, 3)), max_size=2), max_size=3
    ),
    skip=st.sets(st.integers(0, 12), max_size=3),
)
def test_requested_steps_follow_the_oracle(
    planned: list[int], continuous: bool, requests: dict[int, list[tuple[int, int]]], skip: set[int]
) -> None:
    """Over a loop (some steps skipped) with requests made before some steps: the profiled steps
    and their capture, the sessions (each closed at the end of its last step), and the plan's
    hooks are the oracle's."""
    loop = [s for s in range(13) if s not in skip]
    made = {
        step: [(first, first + length, f"r{step}-{i}") for i, (first, length) in enumerate(items)]
        for step, items in requests.items()
    }
    tracker = StepTracker(StepPlan(steps=planned, continuous_steps=continuous))
    profiled, sessions, hooks, run = [], [], 0, []
    for step in loop:
        for first, last, tag in made.get(step, []):
            tracker.request(range(first, last + 1), tag)
        events = tracker.begin(step)
        # a continuous run whose next step the loop skipped closes when the loop walks on
        for event in events:
            if event is Event.CLOSE:
                sessions.append(run)
                run = []
            hooks += event is Event.HOOK
        if tracker.profiling:
            profiled.append((step, tracker.capture))
            run.append(step)
        for event in tracker.end():
            if event is Event.CLOSE:
                sessions.append(run)
                run = []
            hooks += event is Event.HOOK
    for event in tracker.finish():
        if event is Event.CLOSE:
            sessions.append(run)
            run = []
        hooks += event is Event.HOOK
    assert (profiled, sessions, hooks) == oracle_run(planned, continuous, made, loop)


# -- the rolling-median trigger ----------------------------------------------------------------


def oracle_slow_steps(auto: AutoCapture, run: list[tuple[dict[str, float], bool]]) -> list[tuple[int, str]]:
    """(step, stage) of each capture: the baseline of a stage is its last ``baseline_steps``
    untraced values before the step; the slowest ratio wins (then the larger name)."""
    history: dict[str, list[tuple[int, float]]] = {}
    found, quiet_until = [], 0
    for step, (stages, traced) in enumerate(run):
        if traced:
            continue
        best = None
        if len(found) < auto.max_captures and step >= quiet_until:
            for name, seconds in stages.items():
                base = history.get(name, [])[-auto.baseline_steps :]
                if len(base) < auto.baseline_steps or not watched(name, auto.stages):
                    continue
                median = statistics.median(v for _, v in base)
                if median > 0 and seconds >= auto.min_seconds and seconds > auto.slower_than * median:
                    key = (seconds / median, name)
                    best = key if best is None or key > best else best
        for name, seconds in stages.items():
            if watched(name, auto.stages):
                history.setdefault(name, []).append((step, seconds))
        if best is not None:
            found.append((step, best[1]))
            quiet_until = step + auto.cooldown_steps + 2
    return found


#: Mostly steady steps (10 ms), some spikes, some steps without a stage, a few traced.
step_times = st.lists(
    st.tuples(
        st.dictionaries(
            st.sampled_from(["update_actor", "gen"]), st.sampled_from([0.01] * 6 + [0.0, 0.011, 0.02, 0.05, 0.5])
        ),
        st.sampled_from([False] * 5 + [True]),
    ),
    min_size=3,
    max_size=40,
)


@settings(deadline=None)
@example(
    run=[({"update_actor": 0.01}, False), ({"update_actor": 0.02}, False), ({"update_actor": 0.05}, False)],
    baseline=1,
    slower=1.5,
    max_captures=2,
    cooldown=0,
    stages=(),
    min_seconds=0.0,
)  # the cooldown's edge
@example(
    run=[({"gen": 0.01, "update_actor": 0.01}, False), ({"gen": 0.05, "update_actor": 0.04}, False)],
    baseline=1,
    slower=1.5,
    max_captures=1,
    cooldown=0,
    stages=(),
    min_seconds=0.0,
)  # the largest ratio wins
@example(
    run=[({"update_actor": 0.01}, False), ({"update_actor": 0.5}, True), ({"update_actor": 0.05}, False)],
    baseline=1,
    slower=1.5,
    max_captures=1,
    cooldown=0,
    stages=(),
    min_seconds=0.0,
)  # traced: no baseline
@given(
    run=step_times,
    baseline=st.integers(1, 5),
    slower=st.sampled_from([1.5, 2.0, 3.0]),
    max_captures=st.integers(0, 4),
    cooldown=st.integers(0, 3),
    stages=st.sampled_from([(), ("update_actor",)]),
    min_seconds=st.sampled_from([0.0, 0.02]),
)
def test_slow_steps_follow_the_oracle(
    run: list[tuple[dict[str, float], bool]],
    baseline: int,
    slower: float,
    max_captures: int,
    cooldown: int,
    stages: tuple[str, ...],
    min_seconds: float,
) -> None:
    """Which steps trigger a capture, and for which stage, is the oracle's; never more than
    ``max_captures``, never two within ``cooldown_steps``."""
    auto = AutoCapture(
        stages=stages,
        slower_than=slower,
        baseline_steps=baseline,
        max_captures=max_captures,
        cooldown_steps=cooldown,
        min_seconds=min_seconds,
    )
    slow = SlowSteps(auto)
    got = []
    for step, (times, traced) in enumerate(run):
        found = slow.observe(step, times, traced=traced)
        if found is not None:
            got.append((step, found.stage))
            assert found.ratio > slower and f"steps {found.baseline[0]}-{found.baseline[1]}" in found.reason()
    assert got == oracle_slow_steps(auto, run)
    assert len(got) <= max_captures
    assert all(b - a > cooldown + 1 for (a, _), (b, _) in zip(got, got[1:]))


def test_an_injected_slow_step_is_caught_once() -> None:
    """Twenty steady steps, then one step three times slower: one capture, its reason naming the
    stage, the ratio and the baseline's steps; the same slowdown again within the cooldown is
    not caught."""
    slow = SlowSteps(AutoCapture(stages=["update_actor"], baseline_steps=20, cooldown_steps=50))
    for step in range(20):
        assert slow.observe(step, {"update_actor": 0.1, "gen": 0.2}) is None
    found = slow.observe(20, {"update_actor": 0.3, "gen": 5.0})
    assert found is not None and found.stage == "update_actor"
    assert found.reason().startswith("update_actor took 3.0x the median of steps 0-19")
    assert slow.observe(21, {"update_actor": 0.3}, traced=True) is None
    assert slow.observe(30, {"update_actor": 0.9}) is None


# -- slow ranks and stragglers ------------------------------------------------------------------


def test_slow_rank_and_a_typical_one() -> None:
    """The slow rank is compared with the median of the other ranks; the typical rank is the one
    closest to the median of all."""
    slow = SlowRanks(AutoCapture(slower_than=2.0, max_captures=1, cooldown_steps=0))
    times = {("actor", "update_actor"): {0: 1.0, 1: 1.1, 2: 3.5, 3: 0.9}}
    found = slow.observe(7, times)
    assert found is not None and (found.rank, found.typical, found.ranks()) == (2, 0, (0, 2))
    assert math.isclose(found.ratio, 3.5 / 1.0)
    assert "rank 2 took 3.5x the other ranks' median at step 7" in found.reason()
    assert slow.observe(9, times) is None  # max_captures
    # two ranks: compared with each other (the median of all could never be exceeded twofold)
    two = SlowRanks(AutoCapture(slower_than=2.0))
    assert two.observe(0, {("actor", "u"): {0: 0.1, 1: 0.5}}).ranks() == (0, 1)  # type: ignore[union-attr]


def oracle_stragglers(
    config: Stragglers, run: list[tuple[dict[int, float], bool]]
) -> list[tuple[int, int, bool | str]]:
    """(step, rank, began) of every episode start and end, and (step, rank, "silent") when a rank
    in an episode stops reporting: a rank absent from a step's times ends no episode (its streak
    is carried over, as over a traced step)."""
    events: list[tuple[int, int, bool | str]] = []
    count: dict[int, int] = {}
    alerted: set[int] = set()
    silent: set[int] = set()
    for step, (by_rank, traced) in enumerate(run):
        if traced:
            continue
        for rank in sorted(alerted - set(by_rank) - silent):
            silent.add(rank)
            events.append((step, rank, "silent"))
        silent &= alerted - set(by_rank)
        slow = set()
        for rank, seconds in by_rank.items():
            others = [s for r, s in by_rank.items() if r != rank]
            if others:
                median = statistics.median(others)
                if median > 0 and seconds >= config.min_seconds and seconds > config.factor * median:
                    slow.add(rank)
        for rank in sorted(set(count) - slow - (set(count) - set(by_rank))):
            del count[rank]
            if rank in alerted:
                alerted.discard(rank)
                events.append((step, rank, False))
        for rank in sorted(slow):
            count[rank] = count.get(rank, 0) + 1
            if count[rank] >= config.consecutive and rank not in alerted:
                alerted.add(rank)
                events.append((step, rank, True))
    return events


@settings(deadline=None)
@given(
    run=st.lists(
        st.tuples(
            st.dictionaries(st.integers(0, 3), st.sampled_from([0.01, 0.012, 0.03, 0.1]), min_size=1), st.booleans()
        ),
        max_size=30,
    ),
    factor=st.sampled_from([1.5, 2.5]),
    consecutive=st.integers(1, 4),
)
def test_straggler_episodes_follow_the_oracle(
    run: list[tuple[dict[int, float], bool]], factor: float, consecutive: int
) -> None:
    """Each episode is reported once when it reaches ``consecutive`` slow steps (traced steps
    neither count nor break it, nor do steps its rank did not report) and once when it ends;
    a rank that stops reporting is said once."""
    config = Stragglers(factor=factor, consecutive=consecutive, min_seconds=0.0)
    watch = StragglerWatch(config)
    got = []
    for step, (by_rank, traced) in enumerate(run):
        for alert in watch.observe(step, {("actor", "update_actor"): by_rank}, traced=traced):
            got.append((step, alert.rank, "silent" if alert.silent else alert.active))
            if alert.active and not alert.silent:
                assert alert.count >= consecutive and alert.factor > factor
    expected = sorted(oracle_stragglers(config, run), key=lambda e: (e[0], str(e[2]), e[1]))
    assert sorted(got, key=lambda e: (e[0], str(e[2]), e[1])) == expected


@pytest.mark.parametrize(
    ("traced_6", "said"),
    [(False, "(slow in steps 5-6)"), (True, "(slow in 1 of steps 5-6, the others traced)")],
)
def test_an_episodes_end_says_which_steps_were_slow(traced_6: bool, said: str) -> None:
    """Rank 1 is slow at step 5 and at step 6, or step 6 is traced (carried over, not slow)."""
    watch = StragglerWatch(Stragglers(factor=2.0, consecutive=1, min_seconds=0.0))
    slow, even = {0: 1.0, 1: 1.0, 2: 5.0}, {0: 1.0, 1: 1.0, 2: 1.0}
    stage = ("actor", "update_actor")
    assert [a.active for a in watch.observe(5, {stage: slow})] == [True]
    watch.observe(6, {stage: slow}, traced=traced_6)
    [ended] = watch.observe(7, {stage: even})
    assert not ended.active and ended.steps == (5, 6)
    assert said in ended.message()


def test_a_rank_that_stops_reporting_has_not_recovered() -> None:
    """Rank 2, in an episode, reports nothing at steps 3-4: said once, the episode goes on (no
    "back within the median"); slow again at step 5, it is the same episode."""
    watch = StragglerWatch(Stragglers(factor=2.0, consecutive=1, min_seconds=0.0))
    slow, gone = {0: 1.0, 1: 1.0, 2: 5.0}, {0: 1.0, 1: 1.0}
    stage = ("actor", "update_actor")
    assert [a.active for a in watch.observe(2, {stage: slow})] == [True]
    [silent] = watch.observe(3, {stage: gone})
    assert silent.silent and silent.active and silent.rank == 2
    assert "rank 2 in actor update_actor stopped reporting at step 3" in silent.message()
    assert watch.observe(4, {stage: gone}) == []
    assert [a.rank for a in watch.active()] == [2]
    assert watch.observe(5, {stage: slow}) == []
    [ended] = watch.observe(6, {stage: {0: 1.0, 1: 1.0, 2: 1.0}})
    assert not ended.active and ended.steps == (2, 5) and ended.count == 2


def test_straggler_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"Stragglers.factor must be a number > 1"):
        Stragglers(factor=1.0)
    with pytest.raises(ConfigError, match=r"AutoCapture.baseline_steps must be an integer in 1..100000"):
        AutoCapture(baseline_steps=0)


# -- the diff's arithmetic ----------------------------------------------------------------------

samples = st.lists(
    st.tuples(st.integers(0, 9), st.integers(0, 3), st.floats(0, 10), st.integers(0, 4)), max_size=12
).map(lambda items: [Sample(s, r, t, t / 2, c) for s, r, t, c in items])
runs = st.dictionaries(
    st.tuples(st.sampled_from(["actor", "ref"]), st.sampled_from(["a", "b", "a/mini_batch"])),
    samples.filter(bool),
    max_size=4,
)


@settings(deadline=None)
@given(a=runs, b=runs)
def test_diff_arithmetic_follows_the_oracle(a: dict[Any, list[Sample]], b: dict[Any, list[Sample]]) -> None:
    """Each row's means, change, ratio, noise and verdict, recomputed from the samples by hand;
    the rows sorted by the absolute change."""
    result = compare(a, b)
    assert result.method == METHOD and {(r.role, r.stage) for r in result.rows} == set(a) | set(b)
    changes = [abs(r.change_s) for r in result.rows]
    assert changes == sorted(changes, reverse=True)
    for row in result.rows:
        xs = [s.total_s for s in a.get((row.role, row.stage), [])]
        ys = [s.total_s for s in b.get((row.role, row.stage), [])]
        mean_x = sum(xs) / len(xs) if xs else 0.0
        mean_y = sum(ys) / len(ys) if ys else 0.0
        assert math.isclose(row.change_s, mean_y - mean_x, rel_tol=1e-9, abs_tol=1e-9)
        if not xs or not ys:
            assert row.verdict == ("only in B" if not xs else "only in A") and row.noise_s is None
            continue
        assert row.ratio == (pytest.approx(mean_y / mean_x) if mean_x > 0 else None)
        if len(xs) < 2 or len(ys) < 2:
            assert row.verdict == "noise unknown" and row.noise_s is None
            continue
        var = lambda v: sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1)  # noqa: E731
        noise = 2 * math.sqrt(var(xs) / len(xs) + var(ys) / len(ys))
        assert row.noise_s == pytest.approx(noise, rel=1e-6, abs=1e-12)
        inside = abs(mean_y - mean_x) <= noise
        assert row.verdict == "unchanged" or not inside or math.isclose(abs(mean_y - mean_x), noise, rel_tol=1e-9)
        if not math.isclose(abs(mean_y - mean_x), noise, rel_tol=1e-9, abs_tol=1e-12):
            assert row.verdict == ("unchanged" if inside else "slower" if mean_y > mean_x else "faster")
        by_rank: dict[int | None, list[float]] = {}
        for s in a[(row.role, row.stage)]:
            by_rank.setdefault(s.rank, []).append(s.total_s)
        means = [sum(v) / len(v) for v in by_rank.values()]
        assert row.a is not None and row.a.spread_s == pytest.approx(max(means) - min(means), abs=1e-9)
        assert row.a.total_s == pytest.approx(sum(xs))


@given(a=runs)
def test_a_run_against_itself_is_unchanged(a: dict[Any, list[Sample]]) -> None:
    for row in compare(a, a).rows:
        assert row.change_s == 0
        assert row.verdict in ("unchanged", "noise unknown")
