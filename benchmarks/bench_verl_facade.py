"""Cost of verl's facade (``profdsl.integrations.verl``), as ratios against baselines measured in
the same run.

    python benchmarks/bench_verl_facade.py [--quick]

A method decorated with ``@DistProfiler.annotate`` against the same method with
``@profile_stage`` and with a minimal pass-through wrapper, when nothing is profiled; and, under
a profiled continuous step (torch, CPU), an annotated method against ``@profile_stage``, and a
``DistProfiler.step()`` against a ``mini_batch_window`` item. Prints ns per call (the minimum
over repeats) and the ratios.
"""

from __future__ import annotations

import functools
import sys
import tempfile
import timeit
from collections.abc import Callable
from typing import Any

import profdsl
from profdsl import ProfilerConfig, TorchOptions, mini_batch_window, profile_stage
from profdsl.integrations.verl import DistProfiler, DistProfilerExtension


def ns_per_call(stmt: Callable[[], object], number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e9


def passthrough(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class Worker(DistProfilerExtension):
    def __init__(self, config: ProfilerConfig | None) -> None:
        DistProfilerExtension.__init__(
            self, DistProfiler(rank=0, config=config, save_file_prefix="actor", world_size=1)
        )

    @DistProfiler.annotate(color="red", role="bench")
    def facade(self) -> None:
        return None

    @profile_stage("bench")
    def dsl(self) -> None:
        return None

    @passthrough
    def wrapped(self) -> None:
        return None

    def bare(self) -> None:
        return None


def main(quick: bool) -> int:
    import torch

    n = 20_000 if quick else 200_000
    n_slow = 2_000 if quick else 20_000
    rows: dict[str, float] = {}
    idle = Worker(None)
    rows["bare method"] = ns_per_call(idle.bare, n)
    rows["pass-through wrapper"] = ns_per_call(idle.wrapped, n)
    rows["@profile_stage, not profiled"] = ns_per_call(idle.dsl, n)
    rows["@DistProfiler.annotate, not profiled"] = ns_per_call(idle.facade, n)
    with tempfile.TemporaryDirectory() as folder:
        config = ProfilerConfig(enable=True, steps=[1], save_path=folder, torch=TorchOptions(contents=["cpu"]))
        busy = Worker(config)
        busy.start_profile(profile_step=1)
        rows["@profile_stage, profiled"] = ns_per_call(busy.dsl, n_slow)
        rows["@DistProfiler.annotate, profiled"] = ns_per_call(busy.facade, n_slow)
        rows["DistProfiler.step(), profiled"] = ns_per_call(busy.profiler.step, n_slow)
        items = list(range(n_slow))

        def window() -> None:
            for _ in mini_batch_window(items):
                pass

        rows["mini_batch_window item, profiled"] = ns_per_call(window, 1, repeat=3) / n_slow
        busy.stop_profile()
        busy.profiler.close()
    print(f"profdsl {profdsl.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    width = max(map(len, rows))
    for name, value in rows.items():
        print(f"  {name:<{width}}  {value:10.1f} ns")
    print("ratios:")
    for name, over, base in (
        (
            "annotate / pass-through wrapper, not profiled",
            "@DistProfiler.annotate, not profiled",
            "pass-through wrapper",
        ),
        (
            "annotate / @profile_stage, not profiled",
            "@DistProfiler.annotate, not profiled",
            "@profile_stage, not profiled",
        ),
        ("annotate / @profile_stage, profiled", "@DistProfiler.annotate, profiled", "@profile_stage, profiled"),
        (
            "step() / mini_batch_window item, profiled",
            "DistProfiler.step(), profiled",
            "mini_batch_window item, profiled",
        ),
    ):
        print(f"  {name:<48} {rows[over] / rows[base]:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main("--quick" in sys.argv))
