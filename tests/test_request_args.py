"""``Profiler.request`` and ``RayStepProfiler.request`` take what ``start()`` takes (NumPy
integers, NumPy arrays of ranks: ``np.where(times > limit)[0]``) and never raise, whatever they
are given."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, profile_stage
from profdsl.integrations._ray import RayStepProfiler

from .profiling import config, records, work

np = pytest.importorskip("numpy")
pytest.importorskip("torch")


def _traced(folder: Path) -> set[tuple[int, int]]:
    return {(r["step"], r["rank"]) for r in records(folder, "trace") if r["status"] == "ok"}


def _run(profiler: Profiler, steps: range, asked: dict[int, Any]) -> None:
    for step in steps:
        if step in asked:
            asked[step] = asked[step]()
        with profiler.step(step), profile_stage("update_actor", profiler=profiler):
            work()


def test_numpy_ranks_and_steps_trace_what_they_say(tmp_path: Path) -> None:
    """A slow-rank list from NumPy names rank 1; two steps asked as ``np.int64``."""
    times = np.array([1.0, 5.0, 1.2])
    profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=1, world_size=3)
    asked: dict[int, Any] = {1: lambda: profiler.request(np.int64(2), ranks=np.where(times > 2)[0])}
    _run(profiler, range(5), asked)
    profiler.close()
    assert isinstance(asked[1], str)
    assert _traced(tmp_path) == {(1, 1), (2, 1)}


def test_numpy_at_step_and_roles(tmp_path: Path) -> None:
    profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)
    asked: dict[int, Any] = {
        0: lambda: profiler.request(np.int32(1), at_step=np.int64(3), roles=np.array(["actor"]), ranks=np.arange(1))
    }
    _run(profiler, range(5), asked)
    profiler.close()
    assert isinstance(asked[0], str)
    assert _traced(tmp_path) == {(3, 0)}


class _Hostile:
    def __iter__(self) -> Any:
        raise RuntimeError("no")

    def __len__(self) -> int:
        raise RuntimeError("no")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": np.array([1, 2])},
        {"steps": np.float64(2.0)},
        {"steps": np.bool_(True)},
        {"steps": 1, "ranks": _Hostile()},
        {"steps": 1, "roles": _Hostile()},
        {"steps": 1, "ranks": np.array([[0, 1]])},
        {"steps": 1, "ranks": np.array([0.5])},
        {"steps": 1, "reason": np.array(["x"])},
        {"steps": 1, "at_step": np.array([2])},
    ],
    ids=repr,
)
def test_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture, kwargs: dict[str, Any]) -> None:
    """Each of these is no request: None, one WARNING naming the call, nothing traced."""
    profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)
    trainer = RayStepProfiler(config(tmp_path / "driver", steps=[]), workers=[])
    steps = kwargs.pop("steps")
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        assert profiler.request(steps, **kwargs) is None
        if "at_step" not in kwargs:  # the driver's request has none
            assert trainer.request(steps, **kwargs) is None
    _run(profiler, range(3), {})
    profiler.close()
    trainer.close()
    assert "request(...) is no capture request" in caplog.text
    assert _traced(tmp_path) == set()


def test_ray_driver_takes_numpy_ranks(tmp_path: Path) -> None:
    """The driver's request is delivered with plain integers (what workers are sent)."""
    trainer = RayStepProfiler(config(tmp_path, steps=[]), workers=[])
    heard: list[Any] = []
    trainer._hear = heard.append  # type: ignore[method-assign]
    from profdsl._runtime.process import PROCESS

    PROCESS.inbox.listen(heard.append)
    assert isinstance(trainer.request(np.int64(2), ranks=np.array([0, 2], dtype=np.int64)), str)
    trainer.close()
    assert heard and heard[-1].steps == 2 and list(heard[-1].ranks) == [0, 2]
    assert all(type(r) is int for r in heard[-1].ranks) and type(heard[-1].steps) is int
