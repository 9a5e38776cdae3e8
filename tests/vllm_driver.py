"""A trainer process around a real vLLM ``AsyncLLM`` on CPU (tests/test_vllm_engine.py runs it
in the engine's environment, in its own process group): the scenario of tests/vllm_scenario.py
(examples/vllm_rollout.py runs it with ``vllm.LLM``).

    python -m tests.vllm_driver --model DIR --out DIR --report FILE [--max-iterations N] [--frontend]

``--frontend`` launches the engine as a user might without ``vllm_launch``: its profiler config
with ``ignore_frontend`` false, so an ``AsyncLLM`` runs vLLM's front-end profiler in this process.
Then the driver is not profiled itself (a driver's step clock), VllmEngine must refuse the
engine, and the engine is given to ``rollout_window`` as it is. The report (JSON) says what the
driver saw: the installed version, that refusal, the tokens generated per window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

PROMPTS = ["the policy samples a batch", "a reward model scores"]
#: Tokens per prompt: 16 decode iterations, more than the bounded window records.
TOKENS = 16
#: What the tiny model needs of the engine (the CPU backend, no compilation, small batches).
ENGINE_ARGS: dict[str, Any] = {
    "dtype": "bfloat16",
    "enforce_eager": True,
    "max_model_len": 256,
    "max_num_seqs": 4,
    "seed": 0,
}


def _profiler_config(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    from profdsl.rollout.vllm import vllm_launch
    from tests.vllm_scenario import scenario_config

    config = scenario_config(args.out, max_iterations=args.max_iterations)
    fields = dict(vllm_launch(config, 0).engine_args["profiler_config"])
    if args.frontend:
        fields["ignore_frontend"] = False
    return config, fields


def _wrap(llm: Any, report: dict[str, Any], frontend: bool) -> Any:
    from profdsl import ConfigError
    from profdsl.rollout.vllm import VllmEngine

    try:
        engine = VllmEngine(llm)
    except ConfigError as exc:
        report["refused"] = str(exc)
        return llm  # as a user would then: the engine itself, in a process profdsl does not profile
    report["refused"] = None
    return engine


async def run_async_llm(args: argparse.Namespace, report: dict[str, Any]) -> None:
    import vllm
    from vllm.config import ProfilerConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from tests.vllm_scenario import run_async

    config, fields = _profiler_config(args)
    llm = AsyncLLM.from_engine_args(
        AsyncEngineArgs(model=args.model, profiler_config=ProfilerConfig(**fields), **ENGINE_ARGS)
    )
    params = vllm.SamplingParams(max_tokens=TOKENS, ignore_eos=True, temperature=0.0)
    counter = iter(range(1_000_000))

    async def one(prompt: str) -> int:
        final = None
        async for output in llm.generate(prompt, params, request_id=f"r{next(counter)}"):
            final = output
        assert final is not None
        return len(final.outputs[0].token_ids)

    async def generate() -> None:
        report["tokens"].append(list(await asyncio.gather(*(one(p) for p in PROMPTS))))

    try:
        await run_async(config, _wrap(llm, report, args.frontend), generate, capture=not args.frontend)
    finally:
        llm.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--max-iterations", type=int, default=0)
    parser.add_argument("--frontend", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default asks for most of memory
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")  # the engine's sockets on loopback
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from profdsl.rollout.vllm import installed_version

    report: dict[str, Any] = {"installed_version": installed_version(), "tokens": [], "pid": os.getpid()}
    asyncio.run(run_async_llm(args, report))
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":  # the engine's processes are spawned: they import this module
    main()
