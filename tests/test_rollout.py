"""Tests for `rollout_window` and the engine adapters (vLLM and SGLang through fakes that follow
their documented APIs; the torch sampler with a real tiny model)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import (
    ConfigError,
    FinishHook,
    Profiler,
    ProfilerConfig,
    RolloutOptions,
    TorchOptions,
    profile_stage,
    rollout_window,
)
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout.sglang import SGLangEngine, SGLangHttpEngine, sglang_profile_request
from profdsl.rollout.torch_sampler import TorchSamplerEngine
from profdsl.rollout.vllm import VllmEngine, vllm_launch

from .fake_engines import (
    SGLANG_PROFILE_REQ_FIELDS,
    VLLM_PROFILER_CONFIG_FIELDS,
    FakeAsyncLLM,
    FakeSGLangEngine,
    FakeSGLangServer,
    FakeVllmLLM,
)
from .profiling import config
from .traces import load

torch = pytest.importorskip("torch")


def vllm_replicas(cfg: ProfilerConfig, n: int, tp: int, cls: type = FakeVllmLLM, **kw: Any) -> list[Any]:
    """What a trainer does: launch each replica with vllm_launch's arguments, wrap it (GPU
    replicas by default: no op tables beside the traces)."""
    kw.setdefault("platform", "cuda")
    engines = []
    for r in range(n):
        launch = vllm_launch(cfg, r, replica_world_size=tp, num_replicas=n, version="0.33.0")
        engines.append(VllmEngine(cls(launch.engine_args.get("profiler_config"), tp=tp, **kw)))
    return engines


def rollout_records(cfg: ProfilerConfig) -> list[dict[str, Any]]:
    return [r for r in read_manifest(cfg.save_path) if r["kind"] == "rollout"]


def driver(cfg: ProfilerConfig) -> Profiler:
    """The trainer's profiler on the driver (rank 0 of 1: not necessarily a profiled rank)."""
    return Profiler(cfg, role="trainer", rank=0, world_size=1)


class TestSelectionAndRelocation:
    """Which replicas are profiled, and which files move where."""

    def test_selected_replicas_and_ranks(self, tmp_path: Path) -> None:
        """ranks [3, 6] with W=2 over 4 replicas: replicas 1 and 3 run; only global ranks 3 and 6
        move (named by step, replica and rank); their tp peers stay where the engine wrote them."""
        cfg = config(tmp_path / "p", ranks=[3, 6], steps=[5])
        engines = vllm_replicas(cfg, 4, tp=2)
        with driver(cfg) as profiler, profiler.step(5), rollout_window(engines, replica_world_size=2):
            pass
        assert [bool(e.llm.calls) for e in engines] == [False, True, False, True]
        assert engines[1].llm.calls[0] == ("start", "step5-replica1")
        records = rollout_records(cfg)
        assert sorted((r["replica"], r["rank"], r["step"], r["status"]) for r in records) == [
            (1, 3, 5, "ok"),
            (3, 6, 5, "ok"),
        ]
        for record in records:
            name = TraceName.parse(record["path"])
            assert (name.role, name.step, name.replica, name.rank, name.world_size) == (
                "rollout",
                5,
                record["replica"],
                record["rank"],
                8,
            )
            assert load(Path(cfg.save_path) / record["path"])["traceEvents"]
        left = sorted(os.listdir(rollout_trace_dir(cfg.save_path, 1)))
        assert len(left) == 1 and "rank0." in left[0]

    def test_empty_ranks_mean_replica_zero_and_all_ranks_all(self, tmp_path: Path) -> None:
        """Empty ranks profile replica 0 and keep every GPU of it, as verl does (a tp=2 replica's
        GPU 1 trace is not left behind); all_ranks profiles every replica and keeps every file."""
        for kwargs, expected in (({}, [True, False, False]), ({"all_ranks": True}, [True, True, True])):
            cfg = config(tmp_path / str(len(expected) + len(kwargs)) / "p", **kwargs)
            engines = vllm_replicas(cfg, 3, tp=2)
            with driver(cfg) as profiler, profiler.step(1), rollout_window(engines, replica_world_size=2):
                pass
            assert [bool(e.llm.calls) for e in engines] == expected
            assert len(rollout_records(cfg)) == 2 * sum(expected)
            assert sorted(r["rank"] for r in rollout_records(cfg) if r["replica"] == 0) == [0, 1]
            assert not os.path.exists(rollout_trace_dir(cfg.save_path, 0))  # nothing stayed behind: it went

    def test_empty_ranks_keep_every_gpu_of_the_selected_replica(self, tmp_path: Path) -> None:
        """Empty ranks with tp=2: replica 0 runs and both of its GPUs' traces move (global ranks
        0 and 1, as in verl); nothing of replica 0 stays behind."""
        cfg = config(tmp_path / "p", steps=[1])
        engines = vllm_replicas(cfg, 2, tp=2)
        with driver(cfg) as profiler, profiler.step(1), rollout_window(engines, replica_world_size=2):
            pass
        records = rollout_records(cfg)
        assert sorted((r["replica"], r["rank"], r["status"]) for r in records) == [(0, 0, "ok"), (0, 1, "ok")]
        assert not os.path.exists(rollout_trace_dir(cfg.save_path, 0))  # nothing left in it: it went

    @pytest.mark.parametrize("case", ["unprofiled step", "disabled", "no profiler"])
    def test_touches_no_engine(self, tmp_path: Path, case: str) -> None:
        """An unprofiled step, a disabled config or no started profiler touches no engine."""
        cfg = config(tmp_path / "p", enable=case != "disabled", all_ranks=True)
        engines = [FakeVllmLLM(None)]  # an engine launched without profiling raises if touched
        if case == "no profiler":
            with rollout_window(engines):
                pass
        else:
            with driver(cfg) as profiler, profiler.step(2 if case == "unprofiled step" else 1):
                with rollout_window(engines):
                    pass
        assert engines[0].calls == []

    def test_same_engine_name_in_two_steps_never_overwrites(self, tmp_path: Path) -> None:
        """Old vLLM names files by host and pid only: two steps still give two files."""

        class OldVllm:
            def start_profile(self) -> None:
                pass

            def stop_profile(self) -> None:
                folder = rollout_trace_dir(cfg.save_path, 0)
                os.makedirs(folder, exist_ok=True)
                from .fake_engines import write_trace

                write_trace(os.path.join(folder, "gpu-node_4242.1000.pt.trace.json.gz"))

        cfg = config(tmp_path / "p", steps=[1, 2])
        with driver(cfg) as profiler:
            for step in (1, 2):
                with profiler.step(step), rollout_window([OldVllm()], replica_world_size=4):
                    pass
        records = rollout_records(cfg)
        assert [(r["step"], r["rank"]) for r in records] == [(1, None), (2, None)]
        assert len({r["path"] for r in records}) == 2

    def test_finish_hook_sees_the_rollout_traces(self, tmp_path: Path) -> None:
        """The last step's rollout traces are in save_path before the hook runs (verl B3)."""
        cmd = 'ls "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../listing.txt"'
        cfg = config(tmp_path / "p", finish_hook=FinishHook(cmd=cmd))
        engines = vllm_replicas(cfg, 1, tp=1)
        with driver(cfg) as profiler, profiler.step(1):
            with rollout_window(engines):
                pass
        assert "rollout_step000001_rank0-of-1_replica0" in (tmp_path / "listing.txt").read_text()


class TestFaults:
    """Engine failures are recorded, never raised; the body's exceptions pass through."""

    def test_failing_and_hanging_replicas(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """One replica fails to start, one hangs in stop: both recorded; the third is profiled."""
        cfg = config(tmp_path / "p", all_ranks=True, rollout=RolloutOptions(stop_timeout_s=0.5, flush_wait_s=1))
        engines = vllm_replicas(cfg, 3, tp=1)
        engines[0].llm.fail_start = True
        engines[1].llm.stop_delay_s = 30
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            with driver(cfg) as profiler, profiler.step(1), rollout_window(engines):
                pass
        statuses = sorted((r["replica"], r["status"], r.get("call")) for r in rollout_records(cfg))
        assert statuses == [(0, "failed", "start_profile"), (1, "timeout", "stop_profile"), (2, "ok", None)]
        assert engines[0].llm.calls == [("start", "step1-replica0")]  # never stopped
        assert "engine crashed" in caplog.text

    def test_body_exception_after_engines_stopped(self, tmp_path: Path) -> None:
        """The generation code's exception propagates unchanged, after the engines stopped."""
        cfg = config(tmp_path / "p")
        engines = vllm_replicas(cfg, 1, tp=1)
        error = ValueError("generation failed")
        with driver(cfg) as profiler, profiler.step(1):
            with pytest.raises(ValueError) as info, rollout_window(engines):
                raise error
        assert info.value is error and engines[0].llm.calls[-1] == ("stop", None)
        assert [r["status"] for r in rollout_records(cfg)] == ["ok"]

    def test_bad_replica_world_size(self) -> None:
        """A replica_world_size below 1 is a ConfigError naming it."""
        with pytest.raises(ConfigError, match=r"replica_world_size must be an integer in 1\.\.\d+, got 0"):
            rollout_window([], replica_world_size=0)


class TestForms:
    """async with, decorators, async engines."""

    def test_async_with_async_engines(self, tmp_path: Path) -> None:
        """AsyncLLM-style engines under `async with`: started, stopped, moved."""
        cfg = config(tmp_path / "p", all_ranks=True)
        engines = vllm_replicas(cfg, 2, tp=1, cls=FakeAsyncLLM)

        async def generate() -> str:
            async with rollout_window(engines):
                await asyncio.sleep(0)
                return "out"

        with driver(cfg) as profiler, profiler.step(1):
            assert asyncio.run(generate()) == "out"
        assert sorted(r["replica"] for r in rollout_records(cfg)) == [0, 1]

    def test_decorators(self, tmp_path: Path) -> None:
        """As a decorator of plain and async functions, once per call."""
        cfg = config(tmp_path / "p", steps=[1, 2])
        engines = vllm_replicas(cfg, 1, tp=1)

        @rollout_window(engines)
        def generate(x: int) -> int:
            return x + 1

        @rollout_window(engines)
        async def agenerate(x: int) -> int:
            return x + 2

        with driver(cfg) as profiler:
            with profiler.step(1):
                assert generate(1) == 2
            with profiler.step(2):
                assert asyncio.run(agenerate(1)) == 3
        assert [r["step"] for r in rollout_records(cfg)] == [1, 2]


class TestVllmLaunch:
    """`vllm_launch`: what each replica is launched with."""

    def test_profiler_config_keys_exist_in_vllm(self, tmp_path: Path) -> None:
        """Every key is a field of vLLM's ProfilerConfig; defaults are bounded and light."""
        cfg = config(tmp_path / "p", torch=TorchOptions(contents=["cpu", "shapes"]))
        args = vllm_launch(cfg, 0, version="0.33.0").engine_args["profiler_config"]
        assert set(args) <= VLLM_PROFILER_CONFIG_FIELDS
        assert args["torch_profiler_dir"] == rollout_trace_dir(cfg.save_path, 0)
        assert os.path.isabs(args["torch_profiler_dir"])
        assert (args["max_iterations"], args["torch_profiler_with_stack"]) == (64, False)
        assert args["torch_profiler_record_shapes"] is True and args["ignore_frontend"] is True

    def test_old_vllm_gets_environment(self, tmp_path: Path) -> None:
        """vLLM < 0.13 is configured through VLLM_TORCH_PROFILER_* variables."""
        cfg = config(tmp_path / "p", torch=TorchOptions(contents=["stack"]))
        launch = vllm_launch(cfg, 0, version="0.12.1")
        assert launch.engine_args == {}
        assert launch.env == {
            "VLLM_TORCH_PROFILER_DIR": rollout_trace_dir(cfg.save_path, 0),
            "VLLM_TORCH_PROFILER_WITH_STACK": "1",
            "VLLM_TORCH_PROFILER_RECORD_SHAPES": "0",
            "VLLM_TORCH_PROFILER_WITH_PROFILE_MEMORY": "0",
        }

    def test_unprofiled_replica_gets_nothing(self, tmp_path: Path) -> None:
        """A replica that owns no selected rank, or a disabled config, gets no configuration."""
        cfg = config(tmp_path / "p", ranks=[4])
        assert vllm_launch(cfg, 0, replica_world_size=4, num_replicas=2, version="0.33.0").engine_args == {}
        assert vllm_launch(cfg, 1, replica_world_size=4, num_replicas=2, version="0.33.0").engine_args
        assert vllm_launch(config(tmp_path / "p", enable=False), 0, version="0.33.0").engine_args == {}

    def test_installed_version_decides_by_default(self, tmp_path: Path) -> None:
        """Without vLLM installed the current layout is used."""
        from profdsl.rollout.vllm import installed_version

        launch = vllm_launch(config(tmp_path / "p"), 0)
        assert installed_version() is None and "profiler_config" in launch.engine_args


class TestSGLang:
    """The SGLang request and handles."""

    def test_request_fields_and_memory(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """Fields are ProfileReq fields; memory is dropped with a warning; unprofiled: None."""
        cfg = config(tmp_path / "p", torch=TorchOptions(contents=["memory", "stack"]))
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            request = sglang_profile_request(cfg, 0)
        assert request is not None and set(request) <= SGLANG_PROFILE_REQ_FIELDS
        assert request["with_stack"] is True and request["activities"] == ["CPU"]
        assert "does not support memory profiling" in caplog.text
        assert sglang_profile_request(cfg, 1, num_replicas=2) is None

    def test_engine_with_num_steps_stopped_at_window_end(self, tmp_path: Path) -> None:
        """With num_steps and a shorter rollout SGLang is still profiling when the window ends:
        the handle stops it and the files are collected (more: tests/test_rollout_faults.py)."""
        cfg = config(tmp_path / "p", steps=[3], all_ranks=True)
        fake = FakeSGLangEngine(tp=2)
        engine = SGLangEngine(fake, sglang_profile_request(cfg, 0, replica_world_size=2) or {})
        with driver(cfg) as profiler, profiler.step(3):
            with rollout_window([engine], replica_world_size=2):
                fake.generate()
        assert fake.calls == ["start", "stop"]
        assert sorted(r["rank"] for r in rollout_records(cfg)) == [0, 1]

    def test_http_engine(self, tmp_path: Path) -> None:
        """The HTTP handle drives a server's /start_profile and /stop_profile."""
        cfg = config(tmp_path / "p", rollout=RolloutOptions(max_iterations=0))
        with FakeSGLangServer(tp=1) as server:
            engine = SGLangHttpEngine(server.url, sglang_profile_request(cfg, 0) or {})
            with driver(cfg) as profiler, profiler.step(1), rollout_window([engine]):
                pass
        assert server.engine.calls == ["start", "stop"]
        [record] = rollout_records(cfg)
        assert record["status"] == "ok" and record["rank"] == 0


class TestTorchSampler:
    """The torch sampler handle, with a real tiny model."""

    def test_sampler_trace_collected(self, tmp_path: Path) -> None:
        """In a process without an open session, the sampler's own trace is written and moved."""
        cfg = config(tmp_path / "p", discrete=True, steps=[2])
        model = torch.nn.Linear(8, 8)
        sampler = TorchSamplerEngine(cfg, replica=0)

        @profile_stage("sample")
        def sample() -> torch.Tensor:
            with torch.no_grad():
                return model(torch.randn(4, 8)).argmax(-1)

        with driver(cfg) as profiler, profiler.step(2), rollout_window([sampler]):
            sample()
        [record] = rollout_records(cfg)
        assert (record["rank"], record["replica"], record["step"]) == (0, 0, 2)
        names = {e["name"] for e in load(Path(cfg.save_path) / record["path"])["traceEvents"]}
        assert "aten::linear" in names

    def test_sampler_follows_the_compress_level(self, tmp_path: Path) -> None:
        """``TorchOptions.compress_level=0``: the sampler's trace is plain JSON too, moved and
        recorded like a gzipped one."""
        cfg = config(tmp_path / "p", discrete=True, steps=[2], torch=TorchOptions(contents=["cpu"], compress_level=0))
        sampler = TorchSamplerEngine(cfg, replica=0)
        with driver(cfg) as profiler, profiler.step(2), rollout_window([sampler]):
            torch.nn.Linear(8, 8)(torch.randn(4, 8))
        [record] = rollout_records(cfg)
        assert record["path"].endswith(".pt.trace.json")
        data = json.loads((Path(cfg.save_path) / record["path"]).read_text())
        assert "aten::linear" in {e["name"] for e in data["traceEvents"]}

    def test_sampler_in_a_reentered_window(self, tmp_path: Path) -> None:
        """A window re-entered inside itself starts the sampler once: its trace is written and
        the process's capture is free afterwards."""
        from profdsl._runtime.process import PROCESS

        cfg = config(tmp_path / "p", discrete=True, steps=[2])
        sampler = TorchSamplerEngine(cfg, replica=0)
        window = rollout_window([sampler])
        with driver(cfg) as profiler, profiler.step(2), window:
            torch.nn.Linear(4, 4)(torch.randn(2, 4))
            with window:
                torch.nn.Linear(4, 4)(torch.randn(2, 4))
        assert [(r["step"], r["replica"]) for r in rollout_records(cfg)] == [(2, 0)]
        assert PROCESS.slot.current is None

    def test_sampler_in_a_profiled_process_shares_the_session(self, tmp_path: Path) -> None:
        """With the trainer's continuous session open, the sampler starts none (a second one
        would crash the process); its work is in the trainer's trace."""
        cfg = config(tmp_path / "p")
        sampler = TorchSamplerEngine(cfg, replica=0)
        with driver(cfg) as profiler, profiler.step(1), rollout_window([sampler]):
            torch.nn.Linear(4, 4)(torch.randn(2, 4))
        assert rollout_records(cfg) == []
        traces = [r for r in read_manifest(cfg.save_path) if r["kind"] == "trace"]
        assert len(traces) == 1

    def test_sampler_pickles_without_its_session(self, tmp_path: Path) -> None:
        """Shipped to a Ray actor mid-window (pickled), the sampler keeps its config, replica and
        GPU, not the session open in this process; the copy opens its own."""
        import pickle

        cfg = config(tmp_path / "p", discrete=True, steps=[2])
        sampler = TorchSamplerEngine(cfg, replica=1, local_rank=1, replica_world_size=2)
        with driver(cfg) as profiler, profiler.step(2):
            sampler.start_profile()
            assert sampler._session is not None
            copy = pickle.loads(pickle.dumps(sampler))
            sampler.stop_profile()
        assert (copy.config, copy.replica, copy.local_rank, copy.replica_world_size) == (cfg, 1, 1, 2)
        assert copy._session is None


class TestPlanRollout:
    """`plan_rollout` (pure) against an oracle written from the contract."""

    @given(
        width=st.integers(min_value=1, max_value=4),
        replica=st.integers(min_value=0, max_value=3),
        files=st.lists(st.tuples(st.integers(min_value=0, max_value=5), st.booleans()), max_size=8),
        keep=st.none() | st.frozensets(st.integers(min_value=0, max_value=20)),
    )
    def test_moves_selected_and_unknown_ranks(
        self, width: int, replica: int, files: list[tuple[int, bool]], keep: frozenset[int] | None
    ) -> None:
        """A file moves iff its rank is unknown or its global rank is kept; moved names are
        distinct per file and carry the global rank."""
        from profdsl.collect._relocate import Move
        from profdsl.rollout._relocate import plan_rollout

        names = []
        for i, (tp, known) in enumerate(files):
            names.append(
                f"p_dp0_pp0_tp{tp}_dcp0_ep0_rank{tp}.{1000 + i}.pt.trace.json.gz"
                if known
                else f"host_{i}.{1000 + i}.pt.trace.json.gz"
            )
        plan = plan_rollout(
            names,
            source_dir="/src",
            replica=replica,
            replica_world_size=width,
            keep=keep,
            step=4,
            world_size=16,
            host="h",
            pid=1,
            time_ms=1_795_000_000_000,
        )
        moved = {m.source.rsplit("/", 1)[1]: m for m in plan if isinstance(m, Move)}
        for (tp, known), name in zip(files, names):
            if known:
                rank = replica * width + tp if tp < width else None
            else:  # no rank in the name: only a one-GPU replica's is known (its only GPU)
                rank = replica if width == 1 else None
            expected_move = rank is None or keep is None or rank in keep
            assert (name in moved) == expected_move, name
            if expected_move:
                assert moved[name].fields["rank"] == rank and moved[name].name.rank == rank
        assert len({(m.source) for m in moved.values()}) == len(moved)


def test_thread_affine_engines_are_called_on_the_callers_thread(tmp_path: Path) -> None:
    """An engine that profiles its caller's thread (profdsl_thread_affine) is started and stopped
    on the thread running the window, in `with` and `async with`; others on helper threads."""
    import threading

    class Affine:
        profdsl_thread_affine = True

        def __init__(self) -> None:
            self.threads: list[int] = []

        def start_profile(self) -> None:
            self.threads.append(threading.get_ident())

        def stop_profile(self) -> None:
            self.threads.append(threading.get_ident())

    class Plain(Affine):
        profdsl_thread_affine = False

    cfg = config(tmp_path / "p", all_ranks=True, steps=[1, 2])
    affine, plain = Affine(), Plain()
    with driver(cfg) as profiler:
        with profiler.step(1), rollout_window([affine, plain]):
            pass

        async def generate() -> None:
            async with rollout_window([affine, plain]):
                pass

        with profiler.step(2):
            asyncio.run(generate())
    me = threading.get_ident()
    assert affine.threads == [me] * 4
    assert len(plain.threads) == 4 and me not in plain.threads
