"""Ray integration: profiled worker actors, and the trainer's side that drives them.

``import profdsl.ray`` does not import Ray; the functions that need it import it when called.
See :mod:`profdsl.integrations._ray` for the implementation and ``docs/ray.md`` for a guide.
"""

from profdsl.integrations._ray import (
    DEFAULT_NSIGHT_OPTIONS,
    ProfiledWorker,
    RayStepProfiler,
    WorkerCallError,
    current_node,
    node_of,
    run_on_node,
    runtime_env,
)

__all__ = [
    "DEFAULT_NSIGHT_OPTIONS",
    "ProfiledWorker",
    "RayStepProfiler",
    "WorkerCallError",
    "current_node",
    "node_of",
    "run_on_node",
    "runtime_env",
]
