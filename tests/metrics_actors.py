"""Ray actor classes for the metrics tests (a module of their own, so workers import them by name)."""

from __future__ import annotations

import time

from profdsl import ProfilerConfig, mini_batch_window, profile_stage
from profdsl.ray import ProfiledWorker


class MeteredWorker(ProfiledWorker):
    """One rank of a fused actor + ref worker; ``delay`` seconds make it a straggler."""

    def __init__(self, config: ProfilerConfig, rank: int, world_size: int, delay: float) -> None:
        for role in ("actor", "ref"):
            self.init_profiler(config, role=role, rank=rank, world_size=world_size)
        self.delay = delay

    @profile_stage("update_actor", role="actor")
    def update(self) -> int:
        for _ in mini_batch_window(range(2), role="actor"):
            time.sleep(self.delay)
        return 1

    @profile_stage("compute_ref_log_prob", role="ref")
    def ref_log_prob(self) -> int:
        return 2
