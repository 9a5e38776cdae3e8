"""Cost of the DSL, as ratios against baselines measured in the same run.

    python benchmarks/bench_dsl.py [--quick]

Prints ns per call (the minimum over repeats, the least noisy estimate on a shared machine), the
ratios against a bare call and against NVTX's own ``annotate``, and each target ratio:
nothing profiled, a decorated call at most 1.5x a minimal pass-through wrapper and a ``with
profile_stage`` block at most 1.5x ``with nullcontext()``; under an active torch profiler, a
stage at most 1.25x raw ``record_function``; a mini-batch at most 300 ns more than a plain loop's
item when nothing is profiled.

And the bars of the always-on stage metrics (on, with no trace being written): a ``with
profile_stage`` block at most 1.0 us more than ``with nullcontext()`` and a decorated call at most
1.0 us more than the pass-through wrapper (the baselines and the metered forms take turns, each
keeping its best); 10,000 metered steps in flat memory (traced Python memory after step 10,000
within 64 KiB of what it was after step 1,000).

And the cost of the step ledger's recording (issue 32): with metrics on, each top-level entry
keeps its stretch of time for the step's ledger. Within one metered step, the same forms run with
their node keeping stretches (``ledger on``) and with it keeping none (``ledger off``, the node's
``spans`` set to None), taking turns; the difference is the ledger's cost per entry (goal: at most
200 ns). Also the split at the step's end (``stop()``) for a step of 16 and of 4,096 top-level
stretches.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import tempfile
import timeit
from collections.abc import Callable

import profdsl
from profdsl import Metrics, Profiler, ProfilerConfig, TorchOptions, mini_batch_window, profile_stage
from profdsl.metrics import _tree as tree


def ns_per_call(stmt: Callable[[], object], number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e9


def main(quick: bool) -> int:
    import nvtx
    import torch
    from torch.profiler import record_function

    n = 20_000 if quick else 200_000
    n_slow = 2_000 if quick else 20_000

    def f() -> None:
        return None

    def passthrough(*a: object, **k: object) -> None:
        return f(*a, **k)

    staged = profile_stage("bench")(f)
    rows: dict[str, float] = {}
    rows["bare call"] = ns_per_call(f, n)
    rows["pass-through wrapper"] = ns_per_call(passthrough, n)
    rows["@profile_stage, not profiled"] = ns_per_call(staged, n)

    def with_null() -> None:
        with contextlib.nullcontext():
            pass

    def with_stage() -> None:
        with profile_stage("bench"):
            pass

    def with_nvtx() -> None:
        with nvtx.annotate("bench"):
            pass

    def raw_rf() -> None:
        with record_function("bench"):
            pass

    rows["with nullcontext()"] = ns_per_call(with_null, n)
    rows["with profile_stage, not profiled"] = ns_per_call(with_stage, n)
    rows["with nvtx.annotate"] = ns_per_call(with_nvtx, n)
    rows["raw record_function, no profiler"] = ns_per_call(raw_rf, n_slow)

    items = list(range(1000))

    def plain_loop() -> None:
        for _ in items:
            pass

    def window_loop() -> None:
        for _ in mini_batch_window(items):
            pass

    def with_window() -> None:
        with mini_batch_window():
            pass

    rows["with mini_batch_window(), not profiled"] = ns_per_call(with_window, n)
    loops = max(n // 1000, 20)
    rows["plain loop, per item"] = ns_per_call(plain_loop, loops) / len(items)
    rows["mini_batch_window, not profiled, per item"] = ns_per_call(window_loop, loops) / len(items)

    with tempfile.TemporaryDirectory() as out:
        cfg = ProfilerConfig(enable=True, steps=[1], save_path=out, torch=TorchOptions(contents=["cpu"]))
        with Profiler(cfg, role="bench", rank=0, world_size=1) as profiler, profiler.step(1):
            # Inside one running session the cost of a region grows with the events already
            # recorded, so the baseline and the DSL forms take turns, each keeping its minimum.
            active = {
                "raw record_function, active profiler": raw_rf,
                "with profile_stage, active profiler": with_stage,
                "@profile_stage, active profiler": staged,
            }
            for name in active:
                rows[name] = float("inf")
            turns = list(active.items())
            for turn in range(5 if quick else 15):
                for name, stmt in turns[turn % 3 :] + turns[: turn % 3]:  # each goes first in turn
                    rows[name] = min(rows[name], ns_per_call(stmt, n_slow, repeat=1))

    metered_rows(rows, staged, passthrough, with_null, with_stage, with_window, quick)
    ledger_rows(rows, f, quick)
    memory = metered_memory(2_000 if quick else 10_000)

    width = max(map(len, rows))
    print(f"profdsl {profdsl.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    for name, value in rows.items():
        print(f"  {name:<{width}}  {value:10.1f} ns")
    checks = [
        (
            "@profile_stage / pass-through wrapper (not profiled)",
            rows["@profile_stage, not profiled"] / rows["pass-through wrapper"],
            1.5,
        ),
        (
            "with profile_stage / with nullcontext (not profiled)",
            rows["with profile_stage, not profiled"] / rows["with nullcontext()"],
            1.5,
        ),
        (
            "with profile_stage / raw record_function (active)",
            rows["with profile_stage, active profiler"] / rows["raw record_function, active profiler"],
            1.25,
        ),
        (
            "@profile_stage / raw record_function (active)",
            rows["@profile_stage, active profiler"] / rows["raw record_function, active profiler"],
            1.25,
        ),
    ]
    print("ratios (target):")
    for name, ratio, target in checks:
        print(f"  {name:<56} {ratio:5.2f}x  (<= {target}x) {'ok' if ratio <= target else 'OVER'}")
    extra = rows["mini_batch_window, not profiled, per item"] - rows["plain loop, per item"]
    print(
        f"  {'mini_batch_window extra ns per item (not profiled)':<56} {extra:5.1f} ns (<= 300 ns) "
        f"{'ok' if extra <= 300 else 'OVER'}"
    )
    print("ratios against a bare call and NVTX (for reference):")
    for name, form, base in (
        ("@profile_stage, not profiled / bare call", "@profile_stage, not profiled", "bare call"),
        ("pass-through wrapper / bare call", "pass-through wrapper", "bare call"),
        (
            "with profile_stage, not profiled / with nvtx.annotate",
            "with profile_stage, not profiled",
            "with nvtx.annotate",
        ),
        (
            "with profile_stage, active / with nvtx.annotate",
            "with profile_stage, active profiler",
            "with nvtx.annotate",
        ),
    ):
        print(f"  {name:<56} {rows[form] / rows[base]:5.2f}x")
    print("metrics on, no trace (target):")
    for name, form, base in (
        (
            "with profile_stage - with nullcontext (metrics on)",
            "with profile_stage, metrics on",
            "with nullcontext(), metrics run",
        ),
        (
            "@profile_stage - pass-through wrapper (metrics on)",
            "@profile_stage, metrics on",
            "pass-through wrapper, metrics run",
        ),
    ):
        extra = rows[form] - rows[base]
        print(f"  {name:<56} {extra:6.1f} ns (<= 1000 ns) {'ok' if extra <= 1000 else 'OVER'}")
    print("the step ledger's recording, metrics on (goal):")
    for name, form in (
        ("with profile_stage: ledger on - ledger off", "with profile_stage"),
        ("@profile_stage call: ledger on - ledger off", "@profile_stage call"),
    ):
        on, off = rows[f"{form}, ledger on"], rows[f"{form}, ledger off"]
        extra = on - off
        print(f"  {name:<56} {extra:6.1f} ns, {on / off:5.3f}x (goal 200 ns) {'ok' if extra <= 200 else 'OVER'}")
    for count in (16, 4096):
        print(f"  {f'the split at stop(), {count:,} stretches':<56} {rows[f'split, {count} stretches'] / 1e3:8.1f} us")
    early, late, steps = memory
    growth = late - early
    print(
        f"  {f'traced memory, metered steps 1,000 -> {steps:,}':<56} {growth / 1024:+6.1f} KiB "
        f"(<= 64 KiB) {'ok' if growth <= 64 * 1024 else 'OVER'}"
    )
    return 0


def metered_rows(
    rows: dict[str, float],
    staged: Callable[[], object],
    passthrough: Callable[[], object],
    with_null: Callable[[], object],
    with_stage: Callable[[], object],
    with_window: Callable[[], object],
    quick: bool,
) -> None:
    """The DSL forms while a step is timed (Metrics on, nothing profiled), taking turns with
    their baselines: each keeps its best of the rounds."""
    n = 20_000 if quick else 100_000
    cfg = ProfilerConfig(metrics=Metrics(enabled=True))
    outer = profile_stage("outer")
    with Profiler(cfg, role="bench", rank=0, world_size=1) as profiler, profiler.step(1):

        def nested() -> None:
            with outer:
                with_stage()

        def outer_only() -> None:
            with outer:
                pass

        forms = {
            "with nullcontext(), metrics run": with_null,
            "with profile_stage, metrics on": with_stage,
            "pass-through wrapper, metrics run": passthrough,
            "@profile_stage, metrics on": staged,
            "with mini_batch_window(), metrics on": with_window,
            "with outer: with profile_stage, metrics on": nested,
            "with outer: pass, metrics on": outer_only,
        }
        for name in forms:
            rows[name] = float("inf")
        turns = list(forms.items())
        for turn in range(5 if quick else 15):
            for name, stmt in turns[turn % len(turns) :] + turns[: turn % len(turns)]:
                rows[name] = min(rows[name], ns_per_call(stmt, n, repeat=1))


def ledger_rows(rows: dict[str, float], f: Callable[[], None], quick: bool) -> None:
    """A top-level ``with profile_stage`` and decorated call in one metered step, with their nodes
    keeping their stretches for the ledger (on) and keeping none (off), taking turns; and the
    ledger's split of a step of 16 and of 4,096 stretches."""
    from profdsl.metrics._ledger import step_ledger
    from profdsl.metrics._tree import Paths, Root, child

    n = 20_000 if quick else 100_000
    stage = profile_stage("bench_ledger")
    staged = profile_stage("bench_ledger_call")(f)

    def with_stage() -> None:
        with stage:
            pass

    saved = tree.MAX_SPANS
    tree.MAX_SPANS = 10**9  # every entry keeps its stretch (the list is emptied between rounds)
    try:
        with Profiler(ProfilerConfig(metrics=Metrics(enabled=True)), role="bench", rank=0, world_size=1) as profiler:
            with profiler.step(1):
                with_stage()
                staged()
                root = profiler.meter.root
                assert root is not None
                nodes = {
                    "with profile_stage": root.children["bench_ledger"],
                    "@profile_stage call": root.children["bench_ledger_call"],
                }
                forms = [
                    (f"{form}, ledger {state}", stmt, nodes[form], state == "on")
                    for form, stmt in (("with profile_stage", with_stage), ("@profile_stage call", staged))
                    for state in ("on", "off")
                ]
                for name, *_ in forms:
                    rows[name] = float("inf")
                for turn in range(5 if quick else 15):
                    for name, stmt, node, on in forms[turn % len(forms) :] + forms[: turn % len(forms)]:
                        node.spans = root.stretches if on else None
                        root.stretches.clear()
                        rows[name] = min(rows[name], ns_per_call(stmt, n, repeat=1))
                root.stretches.clear()
    finally:
        tree.MAX_SPANS = saved
    for count in (16, 4096):
        step = Root("bench", 1, Paths(16))
        kinds = [child(step, name) for name in ("generate", "update_actor", "compute_log_prob", "sync_weights")]
        for i in range(count):  # each overlaps the next
            step.stretches += (i * 1e-3, i * 1e-3 + 1.5e-3, kinds[i % 4])
        split = functools.partial(step_ledger, step, began=0.0, wall_s=count * 1e-3 + 1.0)
        rows[f"split, {count} stretches"] = ns_per_call(split, 3 if count > 100 else 300, repeat=3)


def metered_memory(steps: int) -> tuple[int, int, int]:
    """Traced Python memory after step 1,000 and after the last of ``steps`` metered steps (a
    stage, four mini-batches with a nested stage each, a decorated call per step)."""
    import gc
    import tracemalloc

    cfg = ProfilerConfig(metrics=Metrics(enabled=True))
    update = profile_stage("update_actor")
    inner = profile_stage("forward_backward")

    @profile_stage("compute_log_prob")
    def log_prob() -> None:
        return None

    tracemalloc.start()
    early = 0
    with Profiler(cfg, role="bench", rank=0, world_size=1) as profiler:
        for step in range(steps):
            with profiler.step(step):
                log_prob()
                with update:
                    for _ in mini_batch_window(range(4)):
                        with inner:
                            pass
            if step == 999:  # the baseline: after 1,000 steps
                gc.collect()
                early = tracemalloc.get_traced_memory()[0]
        gc.collect()
        late = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return early, late, steps


if __name__ == "__main__":
    raise SystemExit(main("--quick" in sys.argv))
