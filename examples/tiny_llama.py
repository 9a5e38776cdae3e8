"""Build a tiny Llama model folder offline, in seconds, for running a real engine on CPU.

Random bfloat16 weights (2 layers, hidden size 128, 4 heads: vLLM's CPU attention needs a head
size of at least 32) and a byte-level BPE tokenizer trained on a few lines of text. What it
generates is noise, but an engine loads, schedules and profiles it like any Llama.

    python examples/tiny_llama.py /tmp/tiny-llama

Needs ``torch``, ``transformers`` and ``tokenizers`` (vLLM brings them).
"""

from __future__ import annotations

import os
import sys

#: Lines the tokenizer learns its merges from.
_TEXT = [
    "the policy samples a batch of prompts and the engine generates their completions",
    "a reward model scores each completion, the critic estimates values",
    "the actor updates its weights from the advantages, one mini-batch at a time",
    "profile the steps that matter, with the engine's trace beside the trainer's",
] * 8


def build_tiny_llama(
    path: str,
    *,
    vocab_size: int = 512,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    dtype: str = "bfloat16",
) -> str:
    """Write a loadable Llama model and its tokenizer into ``path`` (created); return ``path``.

    Args:
        path: the folder to write (``config.json``, ``model.safetensors``, tokenizer files).
        vocab_size: the tokenizer's and the model's vocabulary size.
        seed: the seed of the random weights.
        hidden_size: the model's width (4 heads of ``hidden_size // 4``).
        num_layers: the number of decoder layers.
        dtype: the weights' torch dtype (``"float32"`` to train on CPU).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(path, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        _TEXT,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="</s>"
    ).save_pretrained(path)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(path)
    return path


if __name__ == "__main__":
    print(build_tiny_llama(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"))
