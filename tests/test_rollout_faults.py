"""Rollout engine faults: an SGLang profile that outlives its window.

SGLang records ``num_steps`` engine steps (``rollout.max_iterations``, 64 by default) and then
stops by itself; a rollout of fewer steps leaves the profile running, and SGLang refuses the next
``start_profile`` while one is in progress. The fakes follow SGLang's scheduler rules
(``tests/fake_engines.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, ProfilerConfig, RolloutOptions, rollout_window
from profdsl.manifest import read_manifest
from profdsl.rollout.sglang import SGLangEngine, SGLangHttpEngine, sglang_profile_request

from .fake_engines import SGLANG_ALREADY_IN_PROGRESS, SGLANG_NOT_IN_PROGRESS, FakeSGLangEngine, FakeSGLangServer
from .profiling import config
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
    with handle(cfg) as (engine, fake), \
            Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as profiler:
        for step, count in enumerate(engine_steps, start=1):
            with profiler.step(step), rollout_window([engine], replica_world_size=TP):
                fake.generate(count)
    assert isinstance(fake, FakeSGLangEngine)
    return fake


def collected(cfg: ProfilerConfig) -> list[tuple[int, int]]:
    """(step, rank) of every rollout trace recorded ok; each file exists in save_path and parses."""
    found = []
    for record in read_manifest(cfg.save_path):
        if record["kind"] == "rollout" and record["status"] == "ok":
            assert load(Path(cfg.save_path) / record["path"])["traceEvents"]
            found.append((record["step"], record["rank"]))
    return sorted(found)


def problems(cfg: ProfilerConfig) -> list[dict[str, Any]]:
    return [r for r in read_manifest(cfg.save_path) if r.get("status") != "ok"]


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
        with handle(cfg) as (engine, fake), \
                Profiler(cfg, role="trainer", rank=0, world_size=1, capture=False) as profiler:
            with profiler.step(1), rollout_window([engine], replica_world_size=TP):
                fake.stop_profile()  # someone else stopped it meanwhile
        [record] = problems(cfg)
        assert record["call"] == "stop_profile" and record["status"] == "failed"
        assert "not in progress" in record["error"] or "500" in record["error"]


class TestFakeFollowsSGLang:
    """The fake's profiler rules (SGLang's scheduler profiler mixin)."""

    def test_start_refused_while_in_progress(self, tmp_path: Path) -> None:
        fake = FakeSGLangEngine()
        fake.start_profile(output_dir=str(tmp_path), num_steps=4)
        with pytest.raises(RuntimeError, match=SGLANG_ALREADY_IN_PROGRESS.split(".")[0]):
            fake.start_profile(output_dir=str(tmp_path), num_steps=4)

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
