"""profdsl: say what to profile in a distributed RL / LLM training job; profdsl does the how.

``import profdsl`` stays light: it imports neither torch, ray, nvtx, vllm nor sglang.
"""

from profdsl._dsl import mini_batch_window, profile_stage
from profdsl._runtime.profiler import Profiler
from profdsl._version import __version__
from profdsl.config import (
    AutoCapture,
    FinishHook,
    Metrics,
    OnDemand,
    ProfilerConfig,
    RolloutOptions,
    Schedule,
    Stragglers,
    TorchOptions,
)
from profdsl.config._parallel import Parallel
from profdsl.errors import ConfigError, ProfdslError
from profdsl.rollout._window import rollout_window

__all__ = [
    "AutoCapture",
    "ConfigError",
    "FinishHook",
    "Metrics",
    "OnDemand",
    "Parallel",
    "ProfdslError",
    "Profiler",
    "ProfilerConfig",
    "RolloutOptions",
    "Schedule",
    "Stragglers",
    "TorchOptions",
    "__version__",
    "mini_batch_window",
    "profile_stage",
    "rollout_window",
]
