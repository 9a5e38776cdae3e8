"""Rollout engine faults: an SGLang profile that outlives its window.

SGLang records ``num_steps`` engine steps (``rollout.max_iterations``, 64 by default) and then
stops by itself; a rollout of fewer steps leaves the profile running. A second plain
``start_profile`` while one runs is accepted and replaces it; a pending ``start_step`` survives a
refused stop. The fakes follow SGLang's scheduler rules (``tests/fake_engines.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from profdsl import Profiler, ProfilerConfig, RolloutOptions, rollout_window
from profdsl.rollout.sglang import SGLangEngine, SGLangHttpEngine, sglang_profile_request

from .engine_checks import check_output, stage_counts
from .fake_engines import SGLANG_ALREADY_IN_PROGRESS, SGLANG_NOT_IN_PROGRESS, FakeSGLangEngine, FakeSGLangServer
from .profiling import config, records
from .traces import load

TP = 2


def rollout_config(tmp_path: Path, **rollout: Any) -> ProfilerConfig:
    """Every rank profiled at steps 1 and 2, with these rollout options."""
    return config(tmp_path / "p", steps=[1, 2], all_ranks=True, rollout=RolloutOptions(**rollout))


@contextmanager
def in_process(cfg: ProfilerConfig) -> Iterator[tuple[Any, FakeSGLangEngine]]:
    fake = FakeSGLangEngine(tp=TP)
    yield SGLangEngine(fake, sglang_profile_request(cfg, 0, replica_world_size=TP) or {}), fake


@contextmanager
def over_http(cfg: ProfilerConfig) -> Iterator[tuple[Any, FakeSGLangEngine]]:
    with FakeSGLangServer(tp=TP) as server:
        request = sglang_profile_request(cfg, 0, replica_world_size=TP) or {}
        yield SGLangHttpEngine(server.url, request, timeout_s=30), server.engine


Handle = Callable[[ProfilerConfig], Any]
HANDLES = [pytest.param(in_process, id="engine"), pytest.param(over_http, id="http")]


def rollouts(cfg: ProfilerConfig, handle: Handle, engine_steps: list[int]) -> FakeSGLangEngine:
    """Profiled steps 1, 2, ... of a trainer, each rolling out ``engine_steps[i]`` engine steps."""
    with handle(cfg) as (engine, fake), Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as profiler:
        for step, count in enumerate(engine_steps, start=1):
            with profiler.step(step), rollout_window([engine], replica_world_size=TP):
                fake.generate(count)
    assert isinstance(fake, FakeSGLangEngine)
    return fake


def collected(cfg: ProfilerConfig) -> list[tuple[int, int]]:
    """(step, rank) of every rollout trace recorded ok; each file exists in save_path and parses."""
    found = []
    for record in records(cfg.save_path, "rollout"):
        if record["status"] == "ok":
            assert load(Path(cfg.save_path) / record["path"])["traceEvents"]
            found.append((record["step"], record["rank"]))
    return sorted(found)


def problems(cfg: ProfilerConfig) -> list[dict[str, Any]]:
    return [r for r in records(cfg.save_path) if r["status"] != "ok"]


def forward_events(cfg: ProfilerConfig, step: int) -> list[int]:
    """How many engine steps each trace recorded ok for ``step`` holds (one per TP rank)."""
    return [
        sum(e["name"] == "forward" for e in load(Path(cfg.save_path) / r["path"])["traceEvents"])
        for r in records(cfg.save_path, "rollout")
        if r["status"] == "ok" and r["step"] == step
    ]


def strays(cfg: ProfilerConfig) -> list[tuple[int, int]]:
    """(step, rank) of every rollout file recorded stray; each file is in save_path."""
    found = []
    for record in records(cfg.save_path, "rollout"):
        if record["status"] == "stray":
            assert (Path(cfg.save_path) / record["path"]).is_file()
            found.append((record["step"], record["rank"]))
    return sorted(found)


def steps_with_traffic(
    cfg: ProfilerConfig,
    handle: Handle,
    engine_steps: dict[int, int],
    before: Callable[[int, FakeSGLangEngine], None] | None = None,
) -> FakeSGLangEngine:
    """Trainer steps 1, 2, ... each rolling out ``engine_steps[step]`` engine steps in its
    window; steps the config does not profile generate too (traffic the engine sees)."""
    with handle(cfg) as (engine, fake), Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as profiler:
        for step, count in sorted(engine_steps.items()):
            if before is not None:
                before(step, fake)
            with profiler.step(step), rollout_window([engine], replica_world_size=TP):
                fake.generate(count)
    assert isinstance(fake, FakeSGLangEngine)
    return fake


@pytest.mark.parametrize("handle", HANDLES)
class TestSGLangWindowEnds:
    """Whatever the number of engine steps, the window ends the engine's profile and collects it."""

    def test_short_rollouts_in_a_row(self, tmp_path: Path, handle: Handle) -> None:
        """Two profiled windows of 3 engine steps each (num_steps=64): both windows' traces land
        in save_path, recorded ok, and the second start is not refused."""
        cfg = rollout_config(tmp_path)
        fake = rollouts(cfg, handle, [3, 3])
        assert collected(cfg) == [(1, 0), (1, 1), (2, 0), (2, 1)]
        assert problems(cfg) == []
        assert fake.calls == ["start", "stop", "start", "stop"] and not fake.in_progress

    def test_auto_stopped_window_is_not_an_error(self, tmp_path: Path, handle: Handle) -> None:
        """A window longer than num_steps (SGLang stopped by itself: its stop says "not in
        progress") records no error, and a short window after it is still collected."""
        cfg = rollout_config(tmp_path, max_iterations=4)
        fake = rollouts(cfg, handle, [10, 2])
        assert collected(cfg) == [(1, 0), (1, 1), (2, 0), (2, 1)]
        assert problems(cfg) == []
        assert not fake.in_progress

    def test_window_ending_before_a_delayed_start(self, tmp_path: Path, handle: Handle) -> None:
        """delay_iterations longer than the rollout: SGLang never started, so there is nothing to
        stop and nothing to record as failed."""
        cfg = rollout_config(tmp_path, delay_iterations=50, max_iterations=4)
        rollouts(cfg, handle, [2])
        assert problems(cfg) == []


@pytest.mark.parametrize("handle", HANDLES)
class TestUnexpectedStopRefusal:
    """Without num_steps or start_step, SGLang cannot have ended the profile itself: a refused
    stop is a real failure and is recorded (over HTTP too, where SGLang answers a bare 500)."""

    def test_refused_stop_without_num_steps_is_recorded(self, tmp_path: Path, handle: Handle) -> None:
        cfg = rollout_config(tmp_path, max_iterations=0)
        with (
            handle(cfg) as (engine, fake),
            Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as profiler,
        ):
            with profiler.step(1), rollout_window([engine], replica_world_size=TP):
                fake.stop_profile()  # someone else stopped it meanwhile
        [record] = problems(cfg)
        assert record["call"] == "stop_profile" and record["status"] == "failed"
        assert "not in progress" in record["error"] or "500" in record["error"]


@pytest.mark.parametrize("handle", HANDLES)
class TestNoStartWhileRunning:
    """SGLang accepts a plain start while a profile runs and replaces it (the first window's
    events are lost, the second window's trace is filed under the first's name): the handle
    ends a profile it may have left running before it starts another."""

    def test_a_profile_left_running_is_ended_first(self, tmp_path: Path, handle: Handle) -> None:
        """Step 1's stop fails (a transport fault): its profile runs on through the unprofiled
        step 2. Step 3's window still gets its own trace, of its own 2 engine steps; what the
        outlived profile wrote is recorded stray, not as step 1's generation."""
        cfg = rollout_config(tmp_path, max_iterations=0)
        cfg = attrs.evolve(cfg, steps=(1, 3))

        def before(step: int, fake: FakeSGLangEngine) -> None:
            if step == 1:
                fake.fail_next("stop", ConnectionError("engine busy"))

        fake = steps_with_traffic(cfg, handle, {1: 3, 2: 5, 3: 2}, before)
        assert collected(cfg) == [(3, 0), (3, 1)]
        assert forward_events(cfg, 3) == [2, 2]
        assert strays(cfg) == [(1, 0), (1, 1)]
        assert [(r["step"], r["call"]) for r in problems(cfg) if r.get("call")] == [(1, "stop_profile")]
        assert not fake.in_progress and not fake.armed
        assert [key for key in stage_counts(cfg.save_path) if key[1] == "rollout"] == [
            (3, "rollout", "generate (engine)")
        ]

    def test_start_refused_when_the_old_profile_cannot_be_ended(self, tmp_path: Path, handle: Handle) -> None:
        """When the earlier profile cannot be ended either, the handle refuses to start (no
        start reaches SGLang, which would replace it) and the failure is recorded."""
        cfg = attrs.evolve(rollout_config(tmp_path, max_iterations=0), steps=(1, 2))

        def before(step: int, fake: FakeSGLangEngine) -> None:
            fake.fail_next("stop", ConnectionError("engine busy"))

        fake = steps_with_traffic(cfg, handle, {1: 3, 2: 2}, before)
        assert fake.calls == ["start", "stop", "stop"]
        failed = [(r["step"], r["call"]) for r in problems(cfg) if r.get("call")]
        assert failed == [(1, "stop_profile"), (2, "start_profile")]
        assert "may still run" in [r for r in problems(cfg) if r.get("call") == "start_profile"][0]["error"]


@pytest.mark.parametrize("handle", HANDLES)
class TestNoPendingStartLeftArmed:
    """A ``start_step`` (``delay_iterations``) the window ended before is still armed after
    SGLang refuses the stop: the handle disarms it, so later traffic profiles nothing."""

    def test_traffic_after_a_short_window_profiles_nothing(self, tmp_path: Path, handle: Handle) -> None:
        """Step 1 ends before its delayed start; 60 unprofiled engine steps follow; step 3's
        window is long enough. Only step 3 has traces, and nothing is armed in between."""
        cfg = attrs.evolve(rollout_config(tmp_path, delay_iterations=50, max_iterations=4), steps=(1, 3))
        seen: list[bool] = []

        def before(step: int, fake: FakeSGLangEngine) -> None:
            seen.append(fake.armed)

        fake = steps_with_traffic(cfg, handle, {1: 2, 2: 60, 3: 60}, before)
        assert seen == [False, False, False]
        assert collected(cfg) == [(3, 0), (3, 1)]
        assert forward_events(cfg, 3) == [4, 4]
        assert problems(cfg) == [] and strays(cfg) == []
        assert not fake.armed and not fake.in_progress
        assert not (Path(cfg.save_path) / "rollout_replica_0" / ".profdsl-disarm").exists()

    def test_a_trace_the_armed_start_wrote_is_recorded_stray(self, tmp_path: Path, handle: Handle) -> None:
        """When disarming fails (a transport fault), the pending start fires in the unprofiled
        traffic and writes a trace under step 1's name: it is recorded stray, not as step 1's."""
        cfg = attrs.evolve(rollout_config(tmp_path, delay_iterations=50, max_iterations=4), steps=(1, 3))

        def before(step: int, fake: FakeSGLangEngine) -> None:
            if step == 1:  # the window's own start goes through, the disarming one after it not
                fake.fail_next("start", ConnectionError("engine busy"), skip=1)

        fake = steps_with_traffic(cfg, handle, {1: 2, 2: 60, 3: 60}, before)
        assert strays(cfg) == [(1, 0), (1, 1)]
        assert collected(cfg) == [(3, 0), (3, 1)]
        code, text = check_output(cfg.save_path)
        assert code == 1 and text.count("rollout stray written by an engine profile") == 2, text
        assert [(r["step"], r["call"]) for r in problems(cfg) if r.get("call")] == [(1, "stop_profile")]
        assert not fake.armed and not fake.in_progress


class TestFakeFollowsSGLang:
    """The fake's profiler rules (SGLang 0.5.23's scheduler profiler manager)."""

    def test_plain_start_while_in_progress_replaces_the_profile(self, tmp_path: Path) -> None:
        """(a) Accepted: the trace is written under the first request's name and holds only the
        engine steps after the second start."""
        fake = FakeSGLangEngine()
        fake.start_profile(output_dir=str(tmp_path), profile_prefix="first")
        fake.generate(3)
        fake.start_profile(output_dir=str(tmp_path / "other"), profile_prefix="second")
        fake.generate(2)
        fake.stop_profile()
        [trace] = tmp_path.glob("*.trace.json.gz")
        assert trace.name.startswith("first-")
        assert sum(e["name"] == "forward" for e in load(trace)["traceEvents"]) == 2

    def test_start_with_start_step_refused_while_in_progress(self, tmp_path: Path) -> None:
        fake = FakeSGLangEngine()
        fake.start_profile(output_dir=str(tmp_path), num_steps=4)
        with pytest.raises(RuntimeError, match=SGLANG_ALREADY_IN_PROGRESS.split(".")[0]):
            fake.start_profile(output_dir=str(tmp_path), start_step=1, num_steps=4)

    def test_pending_start_survives_a_refused_stop(self, tmp_path: Path) -> None:
        """(b) The stop is refused, the start stays armed, later steps start and end it."""
        fake = FakeSGLangEngine()
        fake.start_profile(output_dir=str(tmp_path), start_step=5, num_steps=2)
        fake.generate(2)
        with pytest.raises(RuntimeError, match=SGLANG_NOT_IN_PROGRESS.split(".")[0]):
            fake.stop_profile()
        assert fake.armed
        fake.generate(10)
        assert not fake.armed and len(list(tmp_path.glob("*.trace.json.gz"))) == 1

    def test_stops_itself_on_the_step_after_num_steps(self, tmp_path: Path) -> None:
        fake = FakeSGLangEngine()
        fake.start_profile(output_dir=str(tmp_path), num_steps=4)
        fake.generate(4)
        assert fake.in_progress and not list(tmp_path.iterdir())
        fake.generate(1)
        assert not fake.in_progress and len(list(tmp_path.iterdir())) == 1
        with pytest.raises(RuntimeError, match=SGLANG_NOT_IN_PROGRESS.split(".")[0]):
            fake.stop_profile()

    def test_delayed_start(self, tmp_path: Path) -> None:
        fake = FakeSGLangEngine()
        fake.start_profile(output_dir=str(tmp_path), start_step=3, num_steps=2)
        fake.generate(2)
        assert not fake.in_progress
        fake.generate(1)
        assert fake.in_progress
        fake.generate(2)
        assert not fake.in_progress and len(list(tmp_path.iterdir())) == 1


def test_http_handle_pickles(tmp_path: Path) -> None:
    """An HTTP handle can be shipped (to a Ray actor, say) and still drives the server."""
    import pickle

    cfg = rollout_config(tmp_path, max_iterations=0)
    with FakeSGLangServer(tp=1) as server:
        handle = SGLangHttpEngine(server.url, sglang_profile_request(cfg, 0) or {}, timeout_s=30)
        copy = pickle.loads(pickle.dumps(handle))
        copy.start_profile("step1-replica0")
        copy.stop_profile()
        assert server.engine.calls == ["start", "stop"]
