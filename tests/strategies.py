"""Hypothesis strategies shared by the tests."""

from __future__ import annotations

from hypothesis import strategies as st

from profdsl.config import CONTENTS, FinishHook, ProfilerConfig, RolloutOptions, Schedule, TorchOptions

small = st.integers(min_value=0, max_value=6)

schedules = st.builds(
    Schedule,
    skip_first=small,
    wait=small,
    warmup=small,
    active=st.integers(min_value=1, max_value=6),
    repeat=st.integers(min_value=0, max_value=4),
)

torch_options = st.builds(
    TorchOptions,
    contents=st.frozensets(st.sampled_from(sorted(CONTENTS))),
    schedule=st.none() | schedules,
    all_threads=st.booleans(),
)

rank_lists = st.lists(st.integers(min_value=0, max_value=7), max_size=4)

finish_hooks = st.builds(
    FinishHook,
    cmd=st.none() | st.sampled_from(["true", "echo done", 'aws s3 sync "$PROFDSL_SAVE_PATH" s3://b/']),
    ranks=rank_lists,
    all_ranks=st.booleans(),
    timeout_s=st.sampled_from([0.5, 30.0, 1800.0]),
    background=st.booleans(),
)

configs = st.builds(
    ProfilerConfig,
    enable=st.booleans(),
    tool=st.just("torch"),
    steps=st.lists(st.integers(min_value=0, max_value=9), max_size=5),
    ranks=rank_lists,
    all_ranks=st.booleans(),
    save_path=st.sampled_from(["profiles", "/tmp/p", "out/run 7"]),
    discrete=st.booleans(),
    continuous_steps=st.booleans(),
    nvtx=st.booleans(),
    torch=torch_options,
    relocate_results=st.booleans(),
    finish_hook=finish_hooks,
    nsys_report_dir=st.none() | st.just("/tmp/ray/nsight"),
    rollout=st.builds(
        RolloutOptions, max_iterations=st.sampled_from([0, 64]), stop_timeout_s=st.sampled_from([900.0, 60.0])
    ),
)


# -- nesting programs: random trees of DSL entries, awaits and yields (tests/test_dsl_nesting.py) --

#: What a program node is: a ``with`` stage, a decorated call, coroutine, generator or async
#: generator stage, a mini-batch loop, an ``await`` or a ``yield``.
NESTING_KINDS = ("with", "call", "coro", "gen", "agen", "batches", "await", "yield")
#: Seconds a node's body advances the test clock by (binary fractions: sums stay exact).
ADVANCES = st.sampled_from([0.0, 0.25, 0.5, 1.0])


def nesting_programs(depth: int = 3, *, is_async: bool = True, in_gen: bool = False) -> st.SearchStrategy[tuple]:
    """Lists of nodes ``(kind, name, advance, repeat, children)``: ``await`` only where the body
    is a coroutine's or an async generator's, ``yield`` only where it is a generator's (nested
    ``with`` blocks and mini-batch loops included), each child list valid for its own body."""
    kinds = ["with", "call", "gen", "batches"]
    if is_async:
        kinds += ["coro", "agen", "await"]
    if in_gen:
        kinds.append("yield")

    def node(kind: str) -> st.SearchStrategy[tuple]:
        if kind in ("await", "yield"):
            return st.just((kind, "", 0.0, 1, ()))
        inner = {
            "with": (is_async, in_gen),
            "batches": (is_async, in_gen),
            "call": (False, False),
            "gen": (False, True),
            "coro": (True, False),
            "agen": (True, True),
        }[kind]
        names = st.sampled_from(["mb", "micro"] if kind == "batches" else ["a", "b", "c"])
        children = (
            st.just(()) if depth == 0 else nesting_programs(depth - 1, is_async=inner[0], in_gen=inner[1]).map(tuple)
        )
        return st.tuples(st.just(kind), names, ADVANCES, st.integers(1, 2), children)

    return st.lists(st.sampled_from(kinds).flatmap(node), max_size=3)
