"""A tiny GRPO (and plain Trainer) run on CPU, for tests/test_trl.py: a random Llama built
offline (examples/tiny_llama.py), a prompt data set made in memory, a length reward."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PROMPTS = ["the policy samples", "a reward model", "the actor updates", "profile the steps"]


def build_model(folder: Path) -> Path:
    """The tiny float32 Llama and its byte-level BPE tokenizer, written into ``folder``."""
    spec = importlib.util.spec_from_file_location("tiny_llama", ROOT / "examples" / "tiny_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tiny_llama", module)
    spec.loader.exec_module(module)
    module.build_tiny_llama(str(folder), hidden_size=64, num_layers=1, dtype="float32")
    return folder


def length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(c)) for c in completions]


def grpo_trainer(
    model_path: Path, out: Path, *, rounds: int, rloo: bool = False, reward: Any = None, **grpo: Any
) -> Any:
    """A GRPOTrainer (an RLOOTrainer with ``rloo``) that runs ``rounds`` generation rounds
    (``max_steps`` from the shape)."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config_class, trainer_class = (trl.RLOOConfig, trl.RLOOTrainer) if rloo else (trl.GRPOConfig, trl.GRPOTrainer)

    accumulation = grpo.get("gradient_accumulation_steps", 1)
    per_generation = grpo.setdefault("steps_per_generation", accumulation)
    per_round = per_generation * grpo.get("num_iterations", 1) // accumulation
    args = config_class(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=3,
        max_steps=rounds * per_round,
        logging_steps=1000,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        bf16=False,
        seed=0,
        **grpo,
    )
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    return trainer_class(
        model=model,
        reward_funcs=length_reward if reward is None else reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 16}),
        processing_class=AutoTokenizer.from_pretrained(str(model_path)),
    )


def plain_trainer(model_path: Path, out: Path, *, max_steps: int, accumulation: int) -> Any:
    """transformers' own Trainer, causal-LM loss on sequences of four token ids."""
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    data = [{"input_ids": [i, i + 1, i + 2, i + 3], "labels": [i, i + 1, i + 2, i + 3]} for i in range(2, 34)]
    args = TrainingArguments(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=accumulation,
        max_steps=max_steps,
        logging_steps=1000,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        bf16=False,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    return Trainer(model=model, args=args, train_dataset=data)
