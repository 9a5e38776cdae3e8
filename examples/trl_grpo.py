"""Profile TRL's GRPOTrainer with one call: rounds 2 and 3 of four, on CPU, in under a minute.

A tiny random Llama and its tokenizer are built offline (examples/tiny_llama.py); the reward is a
completion's length. Each profiled round's trace shows its generation, the reference model's
log-prob pass, the reward, and the update with one mini-batch window per optimizer step.

    python examples/trl_grpo.py --out profiles

Needs TRL 1.x and transformers 5.x (CI tests ``pip install transformers==5.24.0 trl==1.16.0``;
TRL brings ``datasets`` and ``accelerate``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def reward_length(completions: list[str], **kwargs: object) -> list[float]:
    return [float(len(c)) for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="profiles", help="where the traces go")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from tiny_llama import build_tiny_llama
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from profdsl import ProfilerConfig
    from profdsl.integrations.transformers import profile_trainer

    with tempfile.TemporaryDirectory() as folder:
        path = build_tiny_llama(os.path.join(folder, "model"), hidden_size=64, num_layers=1, dtype="float32")
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
            reward_funcs=reward_length,
            args=GRPOConfig(
                output_dir=os.path.join(folder, "run"),
                per_device_train_batch_size=2,
                num_generations=2,
                max_completion_length=3,
                gradient_accumulation_steps=2,
                max_steps=4,
                beta=0.1,
                use_cpu=True,
                bf16=False,
                report_to="none",
                save_strategy="no",
                logging_steps=1000,
            ),
            train_dataset=Dataset.from_dict({"prompt": ["the policy samples", "a reward model"] * 16}),
            processing_class=AutoTokenizer.from_pretrained(path),
        )
        # The one line profdsl adds: GRPO rounds 2 and 3 are profiled.
        profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2, 3), save_path=args.out))
        trainer.train()
    print(f"traces in {os.path.abspath(args.out)}:")
    for name in sorted(os.listdir(args.out)):
        print("  " + name)


if __name__ == "__main__":
    main()
