"""Helpers for the tests of the always-on stage metrics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from profdsl import Metrics, Profiler, ProfilerConfig
from profdsl.metrics import _tree as tree


class FakeClock:
    """A clock the test moves by hand (binary fractions from 100.0: the sums stay exact)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    """The clock the metrics read (every entry's and the step's)."""
    clock = FakeClock()
    monkeypatch.setattr(tree, "clock", clock)
    yield clock


def metered(role: str = "actor", *, rank: int = 0, world_size: int = 1, **kwargs: Any) -> Profiler:
    """A profiler with metrics on and nothing profiled; ``kwargs`` go to ``Metrics``, except
    ``on_step`` and ``config`` (extra ProfilerConfig fields)."""
    on_step = kwargs.pop("on_step", None)
    extra = kwargs.pop("config", {})
    config = ProfilerConfig(metrics=Metrics(enabled=True, **kwargs), **extra)
    return Profiler(config, role=role, rank=rank, world_size=world_size, on_step=on_step)


def totals(flat: dict[str, float], prefix: str = "timing_s") -> dict[str, float]:
    """The paths and values of one statistic in a flat mapping."""
    return {k[len(prefix) + 1 :]: v for k, v in flat.items() if k.startswith(prefix + "/")}
