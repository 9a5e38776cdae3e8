"""The one resolver: `Selection` against an oracle written from the contract, and "plan =
runtime": for generated configs and layouts, `profdsl plan`'s preview names the ranks and hook
ranks that the runtime's own plan (`Profiler`'s resolve) decides, rank by rank."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from profdsl._runtime.plan import resolve
from profdsl.config import FinishHook, ProfilerConfig
from profdsl.core._decide import decide
from profdsl.core._selection import Selection
from profdsl.core._topology import GridLayout, Topology
from profdsl.core.preview import preview

SELECTORS = (
    None,
    "tp == 0",
    "pp in {0, last}",
    "tp == 0 and pp == last",
    "every(2)",
    "rank in {1, 3}",
    "one_per_dp_group",
    "dp == 0",
)


@st.composite
def layouts(draw: Any) -> GridLayout:
    tp, pp, dp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2])), draw(st.integers(1, 3))
    return GridLayout(world_size=tp * pp * dp, tp=tp, pp=pp)


@st.composite
def configs(draw: Any, world: int = 12) -> ProfilerConfig:
    ranks = draw(st.lists(st.integers(0, world), max_size=3, unique=True))
    hook_ranks = draw(st.lists(st.integers(0, world), max_size=3, unique=True))
    cmd = draw(st.sampled_from([None, "true"]))
    select = draw(st.sampled_from(SELECTORS))
    return ProfilerConfig(
        enable=draw(st.booleans()),
        ranks=ranks if select is None else [],
        all_ranks=select is None and draw(st.booleans()),
        select=select,
        steps=[1],
        finish_hook=FinishHook(cmd=cmd, ranks=hook_ranks, all_ranks=draw(st.booleans())),
    )


def oracle_traced(config: ProfilerConfig, top: Topology) -> bool:
    """The contract, written out: a selector alone decides; else all_ranks, ranks, or rank 0."""
    if not config.enable:
        return False
    if config.select is None:
        return config.all_ranks or (top.rank in config.ranks if config.ranks else top.rank == 0)
    p = top.parallel
    answers = {
        "tp == 0": p.tp == 0,
        "pp in {0, last}": p.pp in (0, (p.pp_size or 1) - 1),
        "tp == 0 and pp == last": p.tp == 0 and p.pp == (p.pp_size or 1) - 1,
        "every(2)": top.rank % 2 == 0,
        "rank in {1, 3}": top.rank in (1, 3),
        "one_per_dp_group": p.tp == 0 and p.pp == 0 and (p.cp or 0) == 0 and (p.ep or 0) == 0,
        "dp == 0": p.dp == 0,
    }
    return answers[config.select]


@given(configs(), layouts())
def test_decide_against_the_oracle(config: ProfilerConfig, layout: GridLayout) -> None:
    selection = Selection.of(config)
    for r in range(layout.world_size):
        top = layout.topology(r)
        d = decide(config, top, selection=selection)
        traced = oracle_traced(config, top)
        hook = config.finish_hook
        runs = (
            config.enable and hook.cmd is not None and (hook.all_ranks or (r in hook.ranks if hook.ranks else traced))
        )
        assert (d.member, d.traced, d.runs_hook) == (config.enable, traced, runs)
        assert not decide(config, top, capture=False).member


@given(configs(), layouts())
def test_preview_equals_the_runtime_per_rank(config: ProfilerConfig, layout: GridLayout) -> None:
    """The preview (`profdsl plan`) and the runtime's resolve agree on every rank."""
    shown = preview(config, world_size=layout.world_size, layout=layout)
    traced, hooks = [], []
    for r in range(layout.world_size):
        plan = resolve(config, role="actor", rank=r, world_size=layout.world_size, parallel=layout.topology(r).parallel)
        if plan.traced:
            traced.append(r)
        if plan.hook is not None:
            hooks.append(r)
    assert list(shown.ranks) == traced
    assert list(shown.hook_ranks) == hooks


@given(
    st.lists(st.integers(0, 11), max_size=4, unique=True),
    st.booleans(),
    st.booleans(),
    st.integers(1, 4),
    st.integers(0, 4),
)
def test_replicas_and_their_gpus(ranks: list[int], all_ranks: bool, enable: bool, width: int, count: int) -> None:
    """Replicas: all, replica 0 for empty ranks, else the owners of the named ranks; GPUs kept:
    the named ranks, else every GPU of each selected replica."""
    s = Selection.of(ProfilerConfig(enable=enable, ranks=ranks, all_ranks=all_ranks))
    if not enable or count == 0:
        want: set[int] = set()
    elif all_ranks:
        want = set(range(count))
    elif not ranks:
        want = {0}
    else:
        want = {r // width for r in ranks if r // width < count}
    assert s.replicas(width, count) == want
    gpus = {g for g in range(width * count) if g // width in want}
    if enable and ranks and not all_ranks:
        gpus = {r for r in ranks if r // width < count}
    assert s.replica_gpus(width, count) == gpus


def test_requests_name_ranks_by_list_all_or_selector() -> None:
    s = Selection.of(ProfilerConfig(enable=True))
    layout = GridLayout(world_size=4, tp=2)
    top = layout.topology(1)
    assert s.asks(None, top, traced=True) and not s.asks(None, top, traced=False)
    assert s.asks("all", top, traced=False)
    assert s.asks((1, 3), top, traced=False) and not s.asks((0,), top, traced=True)
    assert s.asks("tp == 1", top, traced=False) and not s.asks("tp == 0", top, traced=True)
