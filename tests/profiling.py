"""Helpers shared by the tests that run the real torch profiler (CPU)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
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


def in_forked_child(report: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Fork, run ``report`` in the child and return what it returned (JSON through a pipe); the
    child leaves with ``os._exit``, without running the parent's atexit hooks."""
    import json
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, json.dumps(report()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        state: dict[str, Any] = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return state


@contextlib.contextmanager
def ray_cluster(namespace: str) -> Iterator[None]:
    """A local Ray cluster of 2 CPUs for the block, always shut down after it."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=namespace)
    try:
        yield
    finally:
        ray.shutdown()
