"""Helpers shared by the tests that run the real torch profiler (CPU)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profdsl import ProfilerConfig, TorchOptions


def config(save_path: str | Path, **kwargs: Any) -> ProfilerConfig:
    """An enabled config profiling step 1 on rank 0, CPU only, into ``save_path``."""
    kwargs.setdefault("enable", True)
    kwargs.setdefault("steps", [1])
    kwargs.setdefault("torch", TorchOptions(contents=["cpu"]))
    return ProfilerConfig(save_path=str(save_path), **kwargs)


def work() -> None:
    """A few torch ops (one ``aten::mul`` each call)."""
    import torch

    torch.ones(8).mul(2).sum()


def torch_profiler_running() -> bool:
    """Whether any torch profiler runs in this process."""
    import torch.autograd.profiler as autograd_profiler

    return bool(autograd_profiler._is_profiler_enabled)


def run_threads(*targets: Callable[[], object]) -> None:
    """Run each target on its own thread and wait for all (bounded)."""
    threads = [threading.Thread(target=t) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
