"""Tests for `profdsl.Profiler` on the real torch profiler (CPU): what lands on disk."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profdsl import FinishHook, Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl._runtime.profiler import State
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName
from profdsl.schedule import recorded_windows

from .profiling import config, work
from .strategies import schedules
from .traces import load, names, parsed, trace_files

torch = pytest.importorskip("torch")


def run_update(n: int) -> None:
    with profile_stage("update_actor", scheduled=True):
        for _ in mini_batch_window(range(n)):
            with profile_stage("forward_backward"):
                work()


class TestDiscreteScheduled:
    """A scheduled stage writes one trace per recorded window, holding exactly its mini-batches."""

    @settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(schedules, st.integers(min_value=0, max_value=12))
    def test_files_match_recorded_windows(
        self, tmp_path_factory: pytest.TempPathFactory, schedule: Schedule, n: int
    ) -> None:
        """For any schedule and mini-batch count, the files are exactly recorded_windows, each
        holding precisely the mini-batch regions its name claims."""
        out = tmp_path_factory.mktemp("sched")
        cfg = config(out, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=schedule))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            run_update(n)
        found = sorted((name.window, names(trace, "mini_batch")) for name, trace in parsed(out))
        expected = [(w, [f"mini_batch{i}" for i in range(w[0], w[1] + 1)]) for w in recorded_windows(schedule, n)]
        assert found == expected

    @pytest.mark.parametrize(
        ("schedule", "n", "windows"),
        [
            (Schedule(active=2), 4, [(0, 1), (2, 3)]),  # verl B1: mb2-3 written twice
            (Schedule(skip_first=1, wait=1, warmup=1, active=2), 3, []),  # verl B2: empty mb2
        ],
    )
    def test_verl_b1_b2(self, tmp_path: Path, schedule: Schedule, n: int, windows: list[tuple[int, int]]) -> None:
        """No duplicate, no empty and no mislabelled window file."""
        cfg = config(tmp_path, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=schedule))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            run_update(n)
        assert [name.window for name, _ in parsed(tmp_path)] == windows
        for name, trace in parsed(tmp_path):
            assert names(trace, "mini_batch")  # never an empty file
            assert trace["profdsl"]["window"] == list(name.window)


class TestDiscrete:
    """Discrete mode: each outermost stage of a profiled step writes its own trace."""

    def test_one_trace_per_outermost_stage(self, tmp_path: Path) -> None:
        """Two stages give two traces; a nested stage is a region inside its parent's trace."""
        cfg = config(tmp_path, discrete=True, ranks=[3])
        with Profiler(cfg, role="actor", rank=3, world_size=4) as profiler, profiler.step(1):
            with profile_stage("compute_log_prob"):
                with profile_stage("inner"):
                    work()
            with profile_stage("update_actor"):
                work()
        files = parsed(tmp_path)
        assert sorted(name.stage for name, _ in files) == ["compute-log-prob", "update-actor"]
        by_stage = {name.stage: trace for name, trace in files}
        assert names(by_stage["compute-log-prob"], "inner") == ["inner"]
        assert names(by_stage["update-actor"], "inner") == []
        for name, trace in files:
            assert (name.rank, name.world_size, name.step, name.role) == (3, 4, 1, "actor")
            assert trace["distributedInfo"] == {"rank": 3, "world_size": 4, "backend": None}
            assert trace["profdsl"]["role"] == "actor" and trace["profdsl"]["step"] == 1

    def test_same_millisecond_stages_get_unique_names(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Unscheduled stages starting in the same millisecond never share a name (verl B8)."""
        from profdsl._capture import torch_traces

        monkeypatch.setattr(torch_traces, "now_ms", lambda: 1_795_000_000_000)
        cfg = config(tmp_path, discrete=True)
        with Profiler(cfg, role="critic", rank=0, world_size=1) as profiler, profiler.step(1):
            for _ in range(3):
                with profile_stage("train_batch"):
                    work()
        files = trace_files(tmp_path)
        assert len(files) == 3
        assert sorted(TraceName.parse(f.name).part or 0 for f in files) == [0, 1, 2]
        assert len(read_manifest(tmp_path)) == 3

    def test_stage_exception_propagates_and_trace_is_written(self, tmp_path: Path) -> None:
        """The body's exception passes through unchanged; the stage's trace is still written."""
        cfg = config(tmp_path, discrete=True)
        error = ValueError("boom")
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            with pytest.raises(ValueError) as info, profiler.step(1), profile_stage("update_actor"):
                work()
                raise error
        assert info.value is error
        assert [names(t, "update_actor") for _, t in parsed(tmp_path)] == [["update_actor"]]


class TestContinuous:
    """Continuous mode: one trace per profiled step (or run of steps)."""

    def test_one_trace_per_profiled_step(self, tmp_path: Path) -> None:
        """Steps 2 and 4 of 0..4 are profiled: two traces, each holding its step's stages."""
        cfg = config(tmp_path, steps=[2, 4])
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in range(5):
                with profiler.step(step), profile_stage(f"gen_step{step}"):
                    work()
        files = parsed(tmp_path)
        assert [(n.step, n.stage) for n, _ in files] == [(2, None), (4, None)]
        assert [names(t, "gen_step") for _, t in files] == [["gen_step2"], ["gen_step4"]]

    def test_continuous_steps_share_one_trace(self, tmp_path: Path) -> None:
        """continuous_steps: steps 1-3 in one trace, step 5 in another."""
        cfg = config(tmp_path, steps=[1, 2, 3, 5], continuous_steps=True)
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in range(6):
                with profiler.step(step), profile_stage(f"s{step}"):
                    work()
        files = parsed(tmp_path)
        assert [n.step for n, _ in files] == [1, 5]
        assert [names(t, "s") for _, t in files] == [["s1", "s2", "s3"], ["s5"]]

    def test_schedule_restarts_every_step(self, tmp_path: Path) -> None:
        """With a schedule, every profiled step of a continuous run records its own windows (verl
        R6 recorded only the first step's): the mini-batch count restarts each step."""
        cfg = config(
            tmp_path,
            steps=[1, 2],
            continuous_steps=True,
            torch=TorchOptions(contents=["cpu"], schedule=Schedule(wait=1, active=1, repeat=1)),
        )
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in (1, 2):
                with profiler.step(step):
                    for _ in mini_batch_window(range(3)):
                        work()
        [(name, trace)] = parsed(tmp_path)  # steps 1-2 run together: one session
        assert (name.step, name.window) == (1, None)
        assert names(trace, "mini_batch") == ["mini_batch1", "mini_batch1"]
        assert trace["profdsl"]["windows"] == [
            {"role": "actor", "step": 1, "window": [1, 1]},
            {"role": "actor", "step": 2, "window": [1, 1]},
        ]

    def test_default_session_records_only_its_own_thread(self, tmp_path: Path) -> None:
        """all_threads is off by default (it crashed the process): a region on another thread is
        not in the trace, the starting thread's is."""
        cfg = config(tmp_path)
        assert cfg.torch.all_threads is False
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            thread = threading.Thread(target=lambda: profile_stage("on_thread")(work)())
            thread.start()
            thread.join(timeout=60)
            profile_stage("here")(work)()
        [(_, trace)] = parsed(tmp_path)
        assert names(trace, "on_thread") == [] and names(trace, "here") == ["here"]

    def test_stage_on_another_thread_is_captured(self, tmp_path: Path) -> None:
        """With all_threads, a stage run on a worker thread lands in the step's trace."""
        cfg = config(tmp_path, torch=TorchOptions(contents=["cpu"], all_threads=True))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            thread = threading.Thread(target=lambda: profile_stage("on_thread")(work)())
            thread.start()
            thread.join(timeout=60)
        assert [names(t, "on_thread") for _, t in parsed(tmp_path)] == [["on_thread"]]


class TestSelection:
    """Unselected ranks, steps and disabled configs write nothing and register nothing."""

    @pytest.mark.parametrize(
        ("kwargs", "rank"),
        [({"enable": False}, 0), ({"ranks": [1]}, 0), ({}, 1), ({"steps": [7]}, 0)],
    )
    def test_writes_nothing(self, tmp_path: Path, kwargs: dict[str, object], rank: int) -> None:
        """Nothing is written and no profiler is registered."""
        cfg = config(tmp_path, discrete=True, **kwargs)
        with Profiler(cfg, role="actor", rank=rank, world_size=2) as profiler, profiler.step(1):
            assert not any(s.recorder for s in PROCESS.registry.steps)
            with profile_stage("update_actor"):
                work()
        assert not tmp_path.exists() or trace_files(tmp_path) == []

    def test_all_ranks(self, tmp_path: Path) -> None:
        """all_ranks profiles rank 5 of 8."""
        cfg = config(tmp_path, all_ranks=True)
        with Profiler(cfg, role="actor", rank=5, world_size=8) as profiler, profiler.step(1):
            work()
        assert [n.rank for n, _ in parsed(tmp_path)] == [5]


class TestRegistry:
    """Stages find their profiler across threads, and by role."""

    def test_inline_session_stopped_from_another_thread_is_not_crashed(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Without all_threads, a continuous session started on one thread and stopped from
        another is left running with one clear error (torch crashes otherwise), never a crash."""
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        profiler.start(1)
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            thread = threading.Thread(target=profiler.stop)
            thread.start()
            thread.join(timeout=60)
        assert "started on another thread; it cannot be stopped from this one" in caplog.text
        segment = PROCESS.slot.current
        assert segment is not None and segment.capture is not None
        PROCESS.slot.reset()  # from the owner thread: stops and writes the trace
        profiler.close()
        assert len(trace_files(tmp_path)) == 1

    def test_start_stage_stop_on_three_threads(self, tmp_path: Path) -> None:
        """start on one thread, the stage on a second and stop on a third: one trace written."""
        cfg = config(tmp_path, discrete=True)
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        for target in (lambda: profiler.start(1), lambda: profile_stage("update")(work)(), profiler.stop):
            thread = threading.Thread(target=target)
            thread.start()
            thread.join(timeout=60)
        profiler.close()
        assert [n.stage for n, _ in parsed(tmp_path)] == ["update"]

    def test_fused_roles_discrete(self, tmp_path: Path) -> None:
        """Two roles started in one process: role= picks whose trace a stage writes."""
        actor = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
        ref = Profiler(config(tmp_path, discrete=True), role="ref", rank=0, world_size=1)
        with actor.step(1), ref.step(1):
            profile_stage("update_actor", role="actor")(work)()
            profile_stage("compute_ref_log_prob", role="ref")(work)()
        actor.close()
        ref.close()
        assert sorted((n.role, n.stage) for n, _ in parsed(tmp_path)) == [
            ("actor", "update-actor"),
            ("ref", "compute-ref-log-prob"),
        ]

    def test_fused_roles_continuous_share_one_session(self, tmp_path: Path) -> None:
        """Two continuous roles in one process share one torch session (a second would crash)."""
        actor = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
        with actor.step(1), ref.step(1):
            profile_stage("a", role="actor")(work)()
            profile_stage("r", role="ref")(work)()
        # the last profiled step returns once torch's events are on disk; the writer finishes
        # the trace behind it (docs/architecture.md, "What a caller waits for")
        assert PROCESS.writer.wait(timeout=120)
        files = parsed(tmp_path)
        assert len(files) == 1
        trace = files[0][1]
        assert [n for n in names(trace) if n in ("a", "r")] == ["a", "r"]
        assert read_manifest(tmp_path)[0]["roles"] == ["actor", "ref"]
        assert trace["profdsl"]["roles"] == ["actor", "ref"]


class TestLifecycle:
    """The state machine is loud about misuse but never raises."""

    def test_states(self, tmp_path: Path) -> None:
        """idle → recording → stopped → closed in continuous mode; armed in discrete mode."""
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        assert profiler.state is State.IDLE
        profiler.start(1)
        assert profiler.state is State.RECORDING and profiler.is_profiling
        profiler.stop()
        assert profiler.state is State.STOPPED and not profiler.is_profiling
        profiler.close()
        assert profiler.state is State.CLOSED
        discrete = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
        discrete.start(1)
        assert discrete.state is State.ARMED
        discrete.close()

    def test_misuse_is_logged_not_raised(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A second stop, a start after close and a double close are logged and ignored."""
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            profiler.start(1)
            profiler.stop()
            profiler.stop()
            profiler.close()
            profiler.close()
            profiler.start(2)
        assert "stop() without start() ignored" in caplog.text
        assert "start(2) after close() ignored" in caplog.text
        assert len(trace_files(tmp_path)) == 1

    def test_close_flushes_an_open_step(self, tmp_path: Path) -> None:
        """close() in the middle of a profiled step still writes its trace."""
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        profiler.start(1)
        work()
        profiler.close()
        assert len(trace_files(tmp_path)) == 1 and not any(s.recorder for s in PROCESS.registry.steps)

    def test_manifest_records(self, tmp_path: Path) -> None:
        """Every trace is one manifest record with the contract's keys."""
        cfg = config(
            tmp_path, discrete=True, ranks=[1], torch=TorchOptions(contents=["cpu"], schedule=Schedule(active=2))
        )
        with Profiler(cfg, role="actor", rank=1, world_size=2) as profiler, profiler.step(1):
            run_update(3)
        records = read_manifest(tmp_path)
        assert [(r["kind"], r["stage"], r["window"], r["status"]) for r in records] == [
            ("trace", "update_actor", [0, 1], "ok"),
            ("trace", "update_actor", [2, 2], "ok"),
        ]
        for record in records:
            assert (tmp_path / record["path"]).stat().st_size == record["bytes"] > 0
            assert (record["rank"], record["world_size"], record["step"]) == (1, 2, 1)
            assert load(tmp_path / record["path"])["profdsl"]["config_hash"] == record["config_hash"]

    def test_unwritable_save_path_does_not_break_training(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A save_path that cannot be created is logged once; the step goes on."""
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        cfg = config(blocker / "profiles", discrete=True)
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
                result = profile_stage("update")(lambda: 42)()
        assert result == 42
        assert "could not write a actor trace" in caplog.text


def test_finish_hook_config_is_accepted(tmp_path: Path) -> None:
    """A config with a hook builds a profiler (the hook itself is tested with the finish hook)."""
    cfg = config(tmp_path, finish_hook=FinishHook(cmd="true"))
    Profiler(cfg, role="actor", rank=0, world_size=1).close()


def test_foreign_profiler_is_not_doubled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A user's own torch profiler is running: profdsl logs and starts none (a second session
    crashed the process), the user's profiler still works, training goes on."""
    cfg = config(tmp_path, discrete=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as theirs:
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
                assert profile_stage("update")(lambda: 5)() == 5
    assert "another torch profiler is already running" in caplog.text
    assert not tmp_path.exists() or trace_files(tmp_path) == []
    assert "update" in {e.name for e in theirs.events()}
