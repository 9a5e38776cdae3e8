"""How roles, stages and steps share a process's one capture, on the real torch profiler (CPU):
every trace holds exactly what its name and metadata claim."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.manifest import read_manifest
from profdsl.schedule import recorded_windows

from .profiling import config, work
from .strategies import schedules
from .traces import events, names, parsed

torch = pytest.importorskip("torch")


def scheduled(schedule: Schedule) -> TorchOptions:
    return TorchOptions(contents=["cpu"], schedule=schedule)


def stage_names(trace: dict[str, Any]) -> list[str]:
    """The profdsl region names of a trace, in time order, mini-batches by their full name."""
    regions = trace["profdsl"]["regions"]
    known = set(regions["stages"])
    bases = tuple(regions["mini_batches"])
    return [n for n in names(trace) if n in known or (bases and n.startswith(bases))]


def mini_batches(trace: dict[str, Any], base: str = "mini_batch") -> list[str]:
    return [n for n in names(trace, base) if n[len(base) :].isdigit()]


class TestContinuousSchedule:
    """Continuous mode with a schedule: the step's trace records everything the step ran, except
    the update mini-batches the schedule leaves out."""

    def test_stages_before_the_first_recorded_mini_batch_are_kept(self, tmp_path: Path) -> None:
        """A compute_log_prob before update_actor stays in the trace, whatever the schedule skips."""
        cfg = config(tmp_path, torch=scheduled(Schedule(skip_first=1, active=1)))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("compute_log_prob"):
                work()
            with profile_stage("update_actor"):
                for _ in mini_batch_window(range(3)):
                    work()
            with profile_stage("after_update"):
                work()
        [(name, trace)] = parsed(tmp_path)
        assert (name.step, name.stage, name.window) == (1, None, None)
        assert stage_names(trace) == ["compute_log_prob", "update_actor", "mini_batch1", "mini_batch2", "after_update"]
        assert trace["profdsl"]["windows"] == [
            {"role": "actor", "step": 1, "window": [1, 1]},
            {"role": "actor", "step": 1, "window": [2, 2]},
        ]

    @settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(schedules, st.integers(min_value=0, max_value=8))
    def test_any_schedule_records_its_windows_and_every_other_stage(
        self, tmp_path_factory: pytest.TempPathFactory, schedule: Schedule, n: int
    ) -> None:
        """For any schedule and mini-batch count: the stages around the mini-batches are in the
        trace, and the mini-batches in it are exactly those of recorded_windows, which the
        metadata lists."""
        out = tmp_path_factory.mktemp("continuous")
        cfg = config(out, torch=scheduled(schedule))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("before"):
                work()
            for _ in mini_batch_window(range(n)):
                work()
            with profile_stage("after"):
                work()
        [(_, trace)] = parsed(out)
        windows = recorded_windows(schedule, n)
        recorded = [f"mini_batch{i}" for first, last in windows for i in range(first, last + 1)]
        assert stage_names(trace) == ["before", *recorded, "after"]
        assert [w["window"] for w in trace["profdsl"]["windows"]] == [list(w) for w in windows]
        muls = [e for e in trace["traceEvents"] if e.get("name") == "aten::mul"]
        assert len(muls) == 2 + len(recorded)  # a left-out mini-batch's ops are not in the trace
        for region in events(trace, "mini_batch"):  # a recorded one holds its own
            assert any(region["ts"] <= e["ts"] <= region["ts"] + region["dur"] for e in muls)


class TestFusedContinuousRoles:
    """Two continuous roles in one process share one session; each role's mini-batches follow
    its own schedule."""

    def test_each_role_runs_its_own_schedule(self, tmp_path: Path) -> None:
        """actor and critic each record their own mini-batch 1: the trace lists exactly those."""
        cfg = config(tmp_path, torch=scheduled(Schedule(wait=1, active=1, repeat=1)))
        actor = Profiler(cfg, role="actor", rank=0, world_size=1)
        critic = Profiler(cfg, role="critic", rank=0, world_size=1)
        with actor, critic, actor.step(1), critic.step(1):
            with profile_stage("update_actor", role="actor"):
                for _ in mini_batch_window(range(3), role="actor"):
                    work()
            with profile_stage("update_critic", role="critic"):
                for _ in mini_batch_window(range(3), role="critic"):
                    work()
        [(name, trace)] = parsed(tmp_path)
        assert name.role == "actor" and trace["profdsl"]["roles"] == ["actor", "critic"]
        assert stage_names(trace) == ["update_actor", "mini_batch1", "update_critic", "mini_batch1"]
        assert trace["profdsl"]["windows"] == [
            {"role": "actor", "step": 1, "window": [1, 1]},
            {"role": "critic", "step": 1, "window": [1, 1]},
        ]
        actor_update, critic_update = (events(trace, s)[0] for s in ("update_actor", "update_critic"))
        first, second = sorted(events(trace, "mini_batch1"), key=lambda e: e["ts"])
        assert actor_update["ts"] <= first["ts"] <= actor_update["ts"] + actor_update["dur"]
        assert critic_update["ts"] <= second["ts"] <= critic_update["ts"] + critic_update["dur"]


class TestConcurrentScheduledStage:
    """A scheduled async stage called twice at once: the second call is refused its own capture
    and recorded; no trace is mislabelled."""

    def test_windows_hold_what_they_claim(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        cfg = config(tmp_path, discrete=True, torch=scheduled(Schedule(active=2)))

        @profile_stage("update", scheduled=True)
        async def update(n: int) -> int:
            for _ in mini_batch_window(range(n)):
                with profile_stage("forward"):  # the refused call's nested stages open nothing
                    work()
                await asyncio.sleep(0)
            return n

        async def both() -> list[int]:
            return list(await asyncio.gather(update(4), update(4)))

        with caplog.at_level(logging.ERROR, logger="profdsl"):
            with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
                assert asyncio.run(both()) == [4, 4]
        files = parsed(tmp_path)
        assert [name.window for name, _ in files] == [(0, 1), (2, 3)]
        for name, trace in files:
            claimed = [f"mini_batch{i}" for i in range(name.window[0], name.window[1] + 1)]
            # each mini-batch's region closes at the await inside it and reopens after (one
            # entry in two pieces, the second counted as continued)
            assert mini_batches(trace) == [m for m in claimed for _ in (0, 1)]
            assert {m: trace["profdsl"]["regions"]["continued"].get(m) for m in claimed} == dict.fromkeys(claimed, 1)
            assert trace["profdsl"]["window"] == list(name.window)
            assert names(trace, "forward") == ["forward", "forward"]  # the owner's own, one each
        skipped = [r for r in read_manifest(tmp_path) if r["status"] == "skipped"]
        assert [(r["kind"], r["stage"], r["step"]) for r in skipped] == [("trace", "update", 1)]
        assert "gets no trace of its own" in caplog.text


class TestMixedModes:
    """A continuous role and a discrete role in one process: each trace carries exactly its own
    role's and stage's name."""

    def test_discrete_stage_cuts_the_continuous_step(self, tmp_path: Path) -> None:
        ref = Profiler(config(tmp_path), role="ref", rank=0, world_size=1)
        actor = Profiler(config(tmp_path, discrete=True), role="actor", rank=0, world_size=1)
        with ref, actor, ref.step(1), actor.step(1):
            with profile_stage("compute_ref_log_prob", role="ref"):
                work()
            with profile_stage("update_actor", role="actor"):
                work()
            with profile_stage("ref_after", role="ref"):
                work()
        found = sorted(
            (
                n.role,
                n.stage or "",
                -1 if n.part is None else n.part,
                t["profdsl"]["role"],
                t["profdsl"]["stage"] or "",
                tuple(stage_names(t)),
            )
            for n, t in parsed(tmp_path)
        )
        assert found == [
            ("actor", "update-actor", -1, "actor", "update_actor", ("update_actor",)),
            ("ref", "", 0, "ref", "", ("compute_ref_log_prob",)),
            ("ref", "", 1, "ref", "", ("ref_after",)),
        ]
        for record in read_manifest(tmp_path):
            assert record["status"] == "ok"
