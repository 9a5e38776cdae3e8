"""Configuration: what to profile, where, and what to run when it is over.

All classes are frozen, keyword-only ``attrs`` classes validated at construction; any invalid value
raises :class:`~profdsl.errors.ConfigError` naming the field and the value. Lists are accepted
where tuples or frozensets are stored, and nested plain mappings where a nested class is stored, so
YAML, JSON and ``OmegaConf.to_container`` output can be passed straight in.

Examples:
    >>> config = ProfilerConfig(enable=True, steps=[2, 5], ranks=[0],
    ...                         torch=TorchOptions(schedule=Schedule(wait=1, active=2)))
    >>> config.steps
    (2, 5)
"""

from profdsl.config import _options, _profiler_config
from profdsl.config._options import *  # noqa: F403  (the public names; their one home is profdsl.config._options)
from profdsl.config._profiler_config import *  # noqa: F403  (ProfilerConfig: profdsl.config._profiler_config)

__all__ = [*_options.__all__, *_profiler_config.__all__]
