"""What a profiled step and a mini-batch window cost, all in: against unprofiled steps of the same
loop in the same run, and where the records say the time went (issue 29 item 6).

    python benchmarks/bench_cost.py [--quick] [--steps 20] [--repeat 3] [--mini-batches 8] [--iterations 25]

One loop, four ways, the order rotating from repeat to repeat after a warm-up run: ``--steps``
steps, each ``profile_stage("update_actor", scheduled=True)`` over ``mini_batch_window`` of
``--mini-batches`` mini-batches, each ``--iterations`` x ``torch.ones(8).mul(2).sum()`` (12 torch
ops), a ``Profiler`` (role actor, rank 0 of 1, CPU) around each step:

* baseline: the same ``Profiler``, no step profiled (``steps`` names none of the loop's);
* continuous: every step profiled, one trace each;
* discrete: every step's stage profiled (a session of its own), one trace each;
* windows: discrete, ``Schedule(active=1)``: every mini-batch a window, a trace each.

Each way runs at two sizes, 1 and ``--iterations`` iterations per mini-batch. The time of a way is
the whole loop's, ``close()`` included (it waits for the exports still running): what the
profiled run paid beyond the baseline, the background export competing with the loop for the
cores included. Its extra time per profiled step (per window for windows), (loop - baseline loop)
/ steps, is a line in the ops of a step (of a window): where it meets no op is the fixed cost,
its slope the cost per 1000 ops. Medians over ``--repeat``, the order rotating.

The records' parts (``docs/records.md``): for each profiled way, the medians over its trace
records of ``blocked_ms`` and its parts (``start_ms``, ``stop_ms``, ``wait_ms``), of ``export_ms``
and of ``export_cpu_ms``. The process's first session's start (``init_ms``: torch's one-time
set-up) is measured in a fresh child process (this script with ``--child-first``), three
profiled steps, against its later sessions' ``start_ms``.

Nothing is asserted: the script prints the table and exits 0 (``tests/test_benchmarks.py`` runs
``--quick`` and checks the rows are there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _args import count

import profdsl
from profdsl import Profiler, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.testing import reset

MANIFEST = "profdsl-manifest.jsonl"
CHILD_TAG = "BENCH_COST_FIRST "
BASELINE = "baseline: no step profiled"
CONTINUOUS = "continuous: every step profiled"
DISCRETE = "discrete: every step's stage profiled"
WINDOWS = "windows: every mini-batch a window (discrete, active=1)"
PARTS = ("blocked_ms", "start_ms", "stop_ms", "wait_ms", "export_ms", "export_cpu_ms")


def work(iterations: int) -> None:
    for _ in range(iterations):
        torch.ones(8).mul(2).sum()


def config(folder: Path, mode: str, steps: int) -> ProfilerConfig:
    profiled = list(range(1, steps + 1)) if mode != BASELINE else [steps + 1]
    schedule = Schedule(active=1) if mode == WINDOWS else None
    return ProfilerConfig(
        enable=True,
        steps=profiled,
        discrete=mode in (DISCRETE, WINDOWS),
        save_path=str(folder),
        torch=TorchOptions(contents=["cpu"], schedule=schedule),
    )


def loop(folder: Path, mode: str, steps: int, mini_batches: int, iterations: int) -> float:
    """Seconds for the whole loop of ``mode``, ``close()`` included."""
    reset()
    began = time.perf_counter()
    profiler = Profiler(config(folder, mode, steps), role="actor", rank=0, world_size=1)
    for step in range(1, steps + 1):
        with profiler.step(step), profile_stage("update_actor", scheduled=True):
            for _ in mini_batch_window(range(mini_batches)):
                work(iterations)
    profiler.close()
    return time.perf_counter() - began


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / MANIFEST
    if not path.exists():
        return []
    lines = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return [r for r in lines if r.get("kind") == "trace"]


def medians(found: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for part in PARTS:
        values = [r[part] for r in found if r.get(part) is not None]
        out[part] = statistics.median(values) if values else None
    return out


def child_first(folder: Path, iterations: int) -> None:
    """In a fresh process: three profiled steps; print the records' init_ms and start_ms."""
    cfg = ProfilerConfig(enable=True, steps=[1, 2, 3], save_path=str(folder), torch=TorchOptions(contents=["cpu"]))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        for step in range(1, 4):
            with profiler.step(step), profile_stage("update_actor"):
                work(iterations)
    found = sorted(records(folder), key=lambda r: r["step"])
    print(CHILD_TAG + json.dumps([{k: r.get(k) for k in ("step", "init_ms", "start_ms", "blocked_ms")} for r in found]))


def first_session(iterations: int, scratch: Path) -> list[dict[str, Any]]:
    folder = scratch / "first"
    done = subprocess.run(
        [sys.executable, __file__, "--child-first", str(folder), "--iterations", str(iterations)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KINETO_LOG_LEVEL": os.environ.get("KINETO_LOG_LEVEL", "6")},
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(CHILD_TAG)), None)
    if done.returncode != 0 or line is None:
        print(f"first-session child failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return []
    return list(json.loads(line[len(CHILD_TAG) :]))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fixed_and_slope(extra: dict[int, float], ops: dict[int, int]) -> tuple[float, float]:
    """The line through the two (ops, extra seconds) points: (seconds at no op, seconds per op)."""
    (n1, e1), (n2, e2) = sorted(extra.items())
    slope = (e2 - e1) / (ops[n2] - ops[n1])
    return e1 - slope * ops[n1], slope


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 steps, 1 repeat")
    parser.add_argument("--steps", type=count, default=20)
    parser.add_argument("--repeat", type=count, default=3)
    parser.add_argument("--mini-batches", type=count, default=8)
    parser.add_argument("--iterations", type=count, default=25, help="iterations per mini-batch, larger size")
    parser.add_argument("--child-first", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_first:
        child_first(Path(args.child_first), args.iterations * args.mini_batches)
        return 0
    if args.quick:
        args.steps, args.repeat = 4, 1
    steps, batches = args.steps, args.mini_batches
    sizes = (1, max(args.iterations, 2))
    ops = {n: batches * n * 12 for n in sizes}
    print(f"date:      {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"machine:   {platform.platform()}, {os.cpu_count()} cpus, Python {platform.python_version()}")
    print(f"versions:  torch {torch.__version__}, profdsl {profdsl.__version__}")
    print(
        f"workload:  {steps} steps x {batches} mini-batches x N x torch.ones(8).mul(2).sum() (12 torch ops), "
        f"N = {sizes[0]} and {sizes[1]} ({ops[sizes[0]]} and {ops[sizes[1]]} ops per step), "
        f"{args.repeat} repeat(s), medians"
    )
    modes: list[str] = [BASELINE, CONTINUOUS, DISCRETE, WINDOWS]
    runs = [(mode, n) for n in sizes for mode in modes]
    times: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    found: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        scratch = Path(tmp)
        loop(scratch / "warm-up", CONTINUOUS, 2, batches, sizes[1])  # torch's one-time set-up, here
        for repeat in range(args.repeat):
            shift = repeat % len(runs)
            for i, (mode, n) in enumerate(runs[shift:] + runs[:shift]):
                folder = scratch / f"{repeat}-{i}"
                times[(mode, n)].append(loop(folder, mode, steps, batches, n))
                if n == sizes[1]:
                    found[mode] += records(folder)
                shutil.rmtree(folder, ignore_errors=True)
        first = first_session(batches * sizes[1], scratch)
    reset()
    median = {run: statistics.median(values) for run, values in times.items()}
    print()
    head = (
        f"{'loop (close() included)':<56}  {'s, N=' + str(sizes[0]):>9}  {'s, N=' + str(sizes[1]):>9}  "
        f"{'x baseline':>10}  {'fixed cost':>20}  {'per 1000 ops':>12}"
    )
    print(head)
    print("-" * len(head))
    for mode in modes:
        small, large = median[(mode, sizes[0])], median[(mode, sizes[1])]
        ratio = large / median[(BASELINE, sizes[1])]
        cells = ["", ""]
        if mode != BASELINE:
            per = steps * (batches if mode == WINDOWS else 1)
            extra = {n: (median[(mode, n)] - median[(BASELINE, n)]) / per for n in sizes}
            unit = {n: ops[n] // (batches if mode == WINDOWS else 1) for n in sizes}
            fixed, slope = fixed_and_slope(extra, unit)
            what = "window" if mode == WINDOWS else "step"
            cells = [f"{fixed * 1000:.2f} ms per {what}", f"{slope * 1e6:.2f} ms"]
        print(f"{mode:<56}  {small:>9.3f}  {large:>9.3f}  {ratio:>9.2f}x  {cells[0]:>20}  {cells[1]:>12}")
    print()
    print(f"the records at N={sizes[1]}, median per trace (ms):")
    print(f"  {'':<12}  " + "  ".join(f"{p:>13}" for p in PARTS))
    for mode, short in ((CONTINUOUS, "continuous"), (DISCRETE, "discrete"), (WINDOWS, "windows")):
        values = medians(found[mode])
        print(f"  {short:<12}  " + "  ".join(f"{_ms(values[p]):>13}" for p in PARTS))
    print()
    if first:
        init = first[0].get("init_ms")
        later = [r["start_ms"] for r in first[1:] if r.get("start_ms") is not None]
        print(
            f"first session in a fresh process: init_ms {_ms(init)} (step {first[0]['step']}); "
            f"the later sessions' start_ms: {', '.join(_ms(v) for v in later)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
