"""verl integration: verl's profiler configuration mapped to profdsl's, and verl's profiler
surface (``DistProfiler``, ``annotate``, ``DistProfilerExtension``) over profdsl.

Importing it imports neither verl nor torch. See ``docs/from-verl.md`` for the migration guide.

Examples:
    >>> roles = profiler_configs({"global_profiler": {"tool": "torch", "steps": [1]},
    ...                           "critic": {"profiler": {"enable": True, "all_ranks": True}}})
    >>> roles["critic"].all_ranks, roles["actor"].enable
    (True, False)
"""

from profdsl.integrations.verl._facade import DistProfiler, DistProfilerExtension, annotate
from profdsl.integrations.verl._keys import KEYS, key_table
from profdsl.integrations.verl.config import ROLES, map_block, nsight_options, profiler_configs

__all__ = [
    "KEYS",
    "ROLES",
    "DistProfiler",
    "DistProfilerExtension",
    "annotate",
    "key_table",
    "map_block",
    "nsight_options",
    "profiler_configs",
]
