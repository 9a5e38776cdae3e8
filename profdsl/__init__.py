"""profdsl: say what to profile in a distributed RL / LLM training job; profdsl does the how.

``import profdsl`` stays light: it imports neither torch, ray, nvtx, vllm nor sglang.
"""

from profdsl._version import __version__
from profdsl.config import FinishHook, Metrics, ProfilerConfig, RolloutOptions, Schedule, TorchOptions
from profdsl.config.parallel import Parallel
from profdsl.dsl import mini_batch_window, profile_stage
from profdsl.errors import ConfigError, ProfdslError
from profdsl.rollout.window import rollout_window
from profdsl.runtime.profiler import Profiler

__all__ = [
    "ConfigError",
    "FinishHook",
    "Metrics",
    "Parallel",
    "ProfdslError",
    "Profiler",
    "ProfilerConfig",
    "RolloutOptions",
    "Schedule",
    "TorchOptions",
    "__version__",
    "mini_batch_window",
    "profile_stage",
    "rollout_window",
]
