"""One trainer scenario around a vLLM engine: five steps, of which ``PROFILED`` are profiled, each
a trainer stage and a rollout window around generation. examples/vllm_rollout.py runs it with
``vllm.LLM`` (windows of ``BOUNDED`` engine iterations), tests/vllm_driver.py with ``AsyncLLM``
(in the engine's environment), tests/test_vllm_adapter.py on the fakes; test_vllm_engine.py
compares what lands in save_path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from profdsl import Profiler, ProfilerConfig, RolloutOptions, TorchOptions, profile_stage, rollout_window

#: The trainer's steps, and those profiled (unprofiled ones before and after).
STEPS = (1, 2, 3, 4, 5)
PROFILED = (2, 3, 4)
#: The example's window: fewer engine iterations than a rollout runs (the engine ends it).
BOUNDED = 4
#: The trainer's own stage, beside the engine's generation in the summary.
STAGE = "update_actor"


def scenario_config(save_path: str, *, max_iterations: int) -> ProfilerConfig:
    """Profile steps ``PROFILED`` on rank 0 (replica 0), CPU activity; the engine records at most
    ``max_iterations`` iterations per window (0: until the window's stop)."""
    return ProfilerConfig(
        enable=True,
        steps=PROFILED,
        save_path=save_path,
        torch=TorchOptions(contents=["cpu"]),
        rollout=RolloutOptions(
            max_iterations=max_iterations, start_timeout_s=300, stop_timeout_s=300, flush_wait_s=120
        ),
    )


def _train() -> float:
    with profile_stage(STAGE):
        return sum(i * 0.5 for i in range(50_000))


def run_sync(config: ProfilerConfig, engine: Any, generate: Callable[[], object], *, capture: bool = True) -> None:
    """The trainer with a plain engine (``vllm.LLM``): ``generate()`` inside each window."""
    with Profiler(config, role="trainer", rank=0, world_size=1, capture=capture) as profiler:
        for step in STEPS:
            with profiler.step(step):
                _train()
                with rollout_window([engine]):
                    generate()


async def run_async(
    config: ProfilerConfig, engine: Any, generate: Callable[[], Awaitable[object]], *, capture: bool = True
) -> None:
    """The trainer with an async engine (``AsyncLLM``): ``await generate()`` inside each
    ``async with`` window, on the running event loop (the one the engine lives on)."""
    with Profiler(config, role="trainer", rank=0, world_size=1, capture=capture) as profiler:
        for step in STEPS:
            with profiler.step(step):
                _train()
                async with rollout_window([engine]):
                    await generate()
