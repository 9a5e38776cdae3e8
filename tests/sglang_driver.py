"""A trainer process around a real in-process ``sglang.Engine`` on CPU (tests/test_sglang_engine.py
runs it in the SGLang environment, ``.sglang-venv``, in its own process group): one engine, then
each scenario in turn, each with its own save_path under ``--out``.

    python -m tests.sglang_driver --model DIR --out DIR --report FILE

Scenarios (docs/rollout.md, "SGLang on CPU"; the fake's versions are in tests/test_rollout_faults.py):

- ``until_stop``, ``bounded``: profiled rollout windows through ``SGLangEngine`` (profile until the
  window's stop; or ``max_iterations`` below the rollout's engine steps, so SGLang ends it).
- ``raw_replace`` (a), ``raw_pending`` (b): SGLang's own behaviour, the engine driven directly.
- ``left_running``: a window's stop fails (a transport fault), its profile runs on; the next window
  must end it first (its files stray) and get a trace of its own.
- ``disarmed``: a window ends before its delayed start; the refused stop leaves the start armed in
  SGLang; the handle disarms it, so unprofiled traffic after it profiles nothing.
- ``armed_stray``: as ``disarmed``, but disarming fails: the pending start fires in the unprofiled
  traffic, and what it writes is recorded stray.

The report (JSON) says what the driver saw: per scenario, the exceptions SGLang raised, the files it
wrote, and any error of the scenario itself (the others still run).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profdsl import Profiler, ProfilerConfig, RolloutOptions, TorchOptions, profile_stage, rollout_window
from profdsl.rollout.sglang import SGLangEngine, sglang_profile_request

PROMPTS = ["the policy samples a batch", "a reward model scores"]
#: Tokens per prompt: one prefill and 11 decode engine steps, more than ``BOUNDED``.
TOKENS = 12
#: The bounded windows' engine steps (``max_iterations``).
BOUNDED = 4
STAGE = "update_actor"
#: What the tiny model needs of the engine: CPU, small memory, no warm-up request.
ENGINE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "dtype": "bfloat16",
    "mem_fraction_static": 0.05,
    "max_total_tokens": 2048,
    "disable_cuda_graph": True,
    "random_seed": 0,
    "skip_server_warmup": True,
    "log_level": "warning",
}


class FaultyTransport:
    """The engine as a handle reaches it, whose next ``call`` (``"start"`` or ``"stop"``, after
    ``skip`` others of that kind) fails as a transport would, without reaching SGLang (a request
    that timed out). Wrapping the engine, not the handle, works for any handle version."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.faults: dict[str, int] = {}

    def fail_next(self, call: str, skip: int = 0) -> None:
        self.faults[call] = skip

    def _fault(self, call: str) -> None:
        if call in self.faults:
            if self.faults[call] == 0:
                del self.faults[call]
                raise ConnectionError(f"engine busy ({call})")
            self.faults[call] -= 1

    def start_profile(self, **fields: Any) -> Any:
        self._fault("start")
        return self.engine.start_profile(**fields)

    def stop_profile(self) -> Any:
        self._fault("stop")
        return self.engine.stop_profile()


def config(
    save_path: Path, steps: tuple[int, ...], *, max_iterations: int, delay_iterations: int = 0
) -> ProfilerConfig:
    return ProfilerConfig(
        enable=True,
        steps=steps,
        save_path=str(save_path),
        torch=TorchOptions(contents=["cpu"]),
        rollout=RolloutOptions(
            max_iterations=max_iterations,
            delay_iterations=delay_iterations,
            start_timeout_s=120,
            stop_timeout_s=120,
            flush_wait_s=60,
        ),
    )


def trace_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.trace.json.gz")) if folder.is_dir() else []


def wait_for_traces(folder: Path, timeout_s: float = 60.0) -> list[str]:
    """The traces in ``folder``, once one is there (the scheduler writes them on its own)."""
    deadline = time.monotonic() + timeout_s
    while not trace_names(folder) and time.monotonic() < deadline:
        time.sleep(0.5)
    return trace_names(folder)


class Driver:
    def __init__(self, engine: Any, out: Path) -> None:
        self.engine, self.out = engine, out

    def generate(self) -> None:
        self.engine.generate(PROMPTS, {"max_new_tokens": TOKENS, "temperature": 0.0, "ignore_eos": True})

    def steps(
        self,
        cfg: ProfilerConfig,
        handle: Any,
        traffic: dict[int, bool],
        before: Callable[[int], None] | None = None,
        *,
        capture: bool = False,
    ) -> None:
        """Steps ``traffic`` in order, each a trainer stage and a rollout window around
        generation (none where ``traffic[step]`` is false)."""
        with Profiler(cfg, role="trainer", rank=0, world_size=1, capture=capture) as profiler:
            for step, generates in traffic.items():
                if before is not None:
                    before(step)
                with profiler.step(step):
                    with profile_stage(STAGE):
                        sum(i * 0.5 for i in range(20_000))
                    with rollout_window([handle]):
                        if generates:
                            self.generate()

    def until_stop(self, report: dict[str, Any]) -> None:
        cfg = config(self.out / "until_stop", (2, 3), max_iterations=0)
        handle = SGLangEngine(self.engine, sglang_profile_request(cfg, 0) or {})
        self.steps(cfg, handle, {1: True, 2: True, 3: True, 4: True}, capture=True)

    def bounded(self, report: dict[str, Any]) -> None:
        cfg = config(self.out / "bounded", (2, 3), max_iterations=BOUNDED)
        handle = SGLangEngine(self.engine, sglang_profile_request(cfg, 0) or {})
        self.steps(cfg, handle, {1: True, 2: True, 3: True, 4: True})

    def raw_replace(self, report: dict[str, Any]) -> None:
        """(a) A second plain start while one runs: accepted? Whose name does the trace get?"""
        first, second = self.out / "raw_replace" / "first", self.out / "raw_replace" / "second"
        self.engine.start_profile(output_dir=str(first), activities=["CPU"], profile_prefix="first")
        self.generate()
        try:
            self.engine.start_profile(output_dir=str(second), activities=["CPU"], profile_prefix="second")
            report["second_start"] = "accepted"
        except Exception as exc:
            report["second_start"] = f"{type(exc).__name__}: {exc}"
        self.generate()
        self.engine.stop_profile()
        report["first"], report["second"] = trace_names(first), trace_names(second)

    def raw_pending(self, report: dict[str, Any]) -> None:
        """(b) A pending start_step, a stop refused before it came: does later traffic start it?"""
        folder = self.out / "raw_pending"
        self.engine.start_profile(
            output_dir=str(folder), activities=["CPU"], start_step=1, num_steps=2, profile_prefix="pending"
        )
        try:
            self.engine.stop_profile()
            report["stop"] = "accepted"
        except Exception as exc:
            report["stop"] = f"{type(exc).__name__}: {exc}"
        report["before_traffic"] = trace_names(folder)
        self.generate()
        report["after_traffic"] = wait_for_traces(folder)

    def left_running(self, report: dict[str, Any]) -> None:
        cfg = config(self.out / "left_running", (1, 3), max_iterations=0)
        transport = FaultyTransport(self.engine)
        handle = SGLangEngine(transport, sglang_profile_request(cfg, 0) or {})

        def before(step: int) -> None:
            if step == 1:
                transport.fail_next("stop")

        self.steps(cfg, handle, {1: True, 2: True, 3: True}, before)

    def disarmed(self, report: dict[str, Any]) -> None:
        # start_step is an absolute engine step in SGLang: 1 starts at the next one. Step 1's
        # window runs no engine step, so it ends before its start.
        cfg = config(self.out / "disarmed", (1, 3), max_iterations=BOUNDED, delay_iterations=1)
        handle = SGLangEngine(self.engine, sglang_profile_request(cfg, 0) or {})
        seen: dict[int, list[str]] = {}

        def before(step: int) -> None:
            seen[step] = trace_names(Path(cfg.save_path) / "rollout_replica_0")

        self.steps(cfg, handle, {1: False, 2: True, 3: True}, before)
        report["replica_folder_before_step"] = seen

    def armed_stray(self, report: dict[str, Any]) -> None:
        cfg = config(self.out / "armed_stray", (1, 3), max_iterations=BOUNDED, delay_iterations=1)
        transport = FaultyTransport(self.engine)
        handle = SGLangEngine(transport, sglang_profile_request(cfg, 0) or {})
        seen: dict[int, list[str]] = {}

        def before(step: int) -> None:
            seen[step] = trace_names(Path(cfg.save_path) / "rollout_replica_0")
            if step == 1:  # the window's own start goes through, the disarming one after it not
                transport.fail_next("start", skip=1)

        self.steps(cfg, handle, {1: False, 2: True, 3: True}, before)
        report["replica_folder_before_step"] = seen


SCENARIOS = ("until_stop", "bounded", "raw_replace", "raw_pending", "left_running", "disarmed", "armed_stray")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args()
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sglang: Any = importlib.import_module("sglang")  # only in SGLang's environment
    report: dict[str, Any] = {"version": sglang.__version__, "pid": os.getpid(), "scenarios": {}}
    started = time.monotonic()
    engine = sglang.Engine(model_path=args.model, **ENGINE_ARGS)
    report["engine_start_s"] = round(time.monotonic() - started, 1)
    try:
        driver = Driver(engine, Path(args.out))
        for name in args.only:
            entry: dict[str, Any] = {}
            report["scenarios"][name] = entry
            try:
                getattr(driver, name)(entry)
            except Exception:
                entry["error"] = traceback.format_exc()
            with open(args.report, "w") as f:  # written as it goes: a killed driver still tells
                json.dump(report, f, indent=1)
    finally:
        engine.shutdown()
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":  # the engine's processes are spawned: they import this module
    main()
