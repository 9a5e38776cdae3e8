"""Profiling rollout (inference) engines: ``rollout_window`` and engine adapters.

Each engine replica writes its traces into :func:`rollout_trace_dir`; after each profiled
rollout, ``rollout_window`` moves the selected ranks' files into ``save_path``, named by step,
replica and global rank. Adapters for vLLM, SGLang and plain torch samplers live in
``profdsl.rollout.vllm``, ``profdsl.rollout.sglang`` and ``profdsl.rollout.torch_sampler``; none
of them imports its engine until used.
"""

from __future__ import annotations

import os

__all__ = ["rollout_trace_dir", "trace_prefix"]


def rollout_trace_dir(save_path: str, replica: int) -> str:
    """The absolute folder replica ``replica`` writes its engine traces into.

    Examples:
        >>> rollout_trace_dir("/runs/7/profiles", 2)
        '/runs/7/profiles/rollout_replica_2'
    """
    return os.path.abspath(os.path.join(save_path, f"rollout_replica_{int(replica)}"))


def trace_prefix(step: int | None, replica: int) -> str:
    """The engine trace-name prefix carrying a rollout's identity (vLLM's and SGLang's rules:
    letters, digits, ``.``, ``_``, ``-``; starting with a letter or digit).

    Examples:
        >>> trace_prefix(12, 3)
        'step12-replica3'
    """
    return f"step{step}-replica{replica}" if step is not None else f"replica{replica}"
