"""Ray actor classes for the metrics tests (a module of their own, so workers import them by name)."""

from __future__ import annotations

import time
from typing import Any

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


class PacedWorker(ProfiledWorker):
    """One rank of a fused actor + ref worker whose update takes ``base`` seconds, or
    ``slow[step]`` at the steps named there (a slow step, a straggler)."""

    def __init__(self, config: ProfilerConfig, rank: int, world_size: int, base: float, slow: dict[int, float]) -> None:
        for role in ("actor", "ref"):
            self.init_profiler(config, role=role, rank=rank, world_size=world_size)
        self.base, self.slow = base, slow

    def update(self, step: int) -> int:
        import torch

        with profile_stage("update_actor", role="actor"):
            torch.ones(8).mul(2).sum()
            time.sleep(self.slow.get(step, self.base))
        with profile_stage("compute_ref_log_prob", role="ref"):
            torch.ones(8).mul(3).sum()
        return step

    def metrics_port(self) -> int:
        """The port of this process's Prometheus endpoint."""
        return int(self.profiler("actor").meter.exporters[0].server.port)  # type: ignore[attr-defined]


class SilentWorker(PacedWorker):
    """A :class:`PacedWorker` whose report fails from step ``silent_from`` on (its
    ``stop_profile`` raises: the driver gets no timings of it)."""

    def __init__(
        self, config: ProfilerConfig, rank: int, world_size: int, base: float, slow: dict[int, float], silent_from: int
    ) -> None:
        super().__init__(config, rank, world_size, base, slow)
        self.silent_from, self.step = silent_from, -1

    def start_profile(self, step: Any, **kwargs: Any) -> bool:
        self.step = int(step)
        return super().start_profile(step, **kwargs)

    def stop_profile(self) -> list[Any]:
        timings = super().stop_profile()
        if self.step >= self.silent_from:
            raise RuntimeError("this rank's report is lost")
        return timings
