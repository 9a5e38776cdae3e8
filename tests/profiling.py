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


def records(folder: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The manifest records of ``folder`` (of one ``kind``: ``trace``, ``hook``, ...), as written."""
    from profdsl.manifest import read_manifest

    return [r for r in read_manifest(folder) if kind is None or r["kind"] == kind]


def hooks(folder: str | Path) -> list[dict[str, Any]]:
    """The finish hook's records of ``folder``."""
    return records(folder, "hook")


def profile_two_ranks(folder: str | Path) -> None:
    """A small real run: actor ranks 0 and 1 of 2, step 1, discrete: ``update_actor`` over two
    mini-batches, then ``compute_log_prob`` (four traces and their manifest records)."""
    from profdsl import Profiler, mini_batch_window, profile_stage
    from profdsl.testing import reset

    cfg = config(folder, discrete=True, all_ranks=True)
    try:
        for rank in (0, 1):
            with Profiler(cfg, role="actor", rank=rank, world_size=2) as profiler, profiler.step(1):
                with profile_stage("update_actor"):
                    for _ in mini_batch_window(range(2)):
                        work()
                with profile_stage("compute_log_prob"):
                    work()
    finally:
        reset()
