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
    rollout=st.builds(RolloutOptions, max_iterations=st.sampled_from([0, 64]),
                      stop_timeout_s=st.sampled_from([900.0, 60.0])),
)
