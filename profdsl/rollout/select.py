"""Whether a replica is profiled at all (engines that are not get no profiler configuration)."""

from __future__ import annotations

from profdsl.config import ProfilerConfig
from profdsl.core.ranks import replicas_for_ranks

__all__ = ["replica_selected"]


def replica_selected(config: ProfilerConfig, replica: int, *, replica_world_size: int, num_replicas: int) -> bool:
    """True when profiling is enabled and ``replica`` owns a selected global rank."""
    return config.enable and replica in replicas_for_ranks(
        config.ranks, replica_world_size, all_ranks=config.all_ranks, num_replicas=num_replicas
    )
