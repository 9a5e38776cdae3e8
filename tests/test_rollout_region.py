"""In-process generation is not lost: a ``rollout_window`` inside the trainer's continuous step
leaves a region in the trainer's trace (nested where it ran), which ``summary`` shows, whether or
not its engines are profiled themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

import profdsl._cli
from profdsl import Profiler, profile_stage, rollout_window
from profdsl.rollout.torch_sampler import TorchSamplerEngine

from .profiling import config, work
from .traces import names, parsed

pytest.importorskip("torch")


def _run(folder: Path, rank: int = 0, world_size: int = 1, **kwargs: object) -> None:
    cfg = config(folder, **kwargs)
    profiler = Profiler(cfg, role="actor", rank=rank, world_size=world_size)
    with profiler, profiler.step(1):
        with profile_stage("make_experience"):
            with rollout_window([TorchSamplerEngine(cfg, replica=0)]):
                work()
            work()
        with profile_stage("update_actor"):
            work()


def _actor_names(folder: Path) -> list[str]:
    return [
        n for name, trace in parsed(folder) if name.role == "actor" for n in names(trace) if not n.startswith("aten")
    ]


def test_generation_has_a_region_in_the_trainer_s_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    _run(folder)
    seen = _actor_names(folder)
    assert "rollout" in seen and "make_experience" in seen, seen
    capsys.readouterr()
    assert profdsl._cli.main(["summary", str(folder), "--by", "stage"]) == 0
    out = capsys.readouterr().out
    assert "rollout" in out, out


def test_no_engine_replica_selected_still_leaves_the_region(tmp_path: Path) -> None:
    """The config's ranks select no replica of the window (rank 3 profiled, one replica of one
    GPU: replica 3 does not exist): the engines are not profiled, and the trainer's trace still
    shows where generation ran."""
    folder = tmp_path / "run"
    _run(folder, rank=3, world_size=4, ranks=[3])
    assert "rollout" in _actor_names(folder)
    assert not (folder / "rollout_replica_0").exists() or not any((folder / "rollout_replica_0").iterdir())


def test_a_discrete_trainer_opens_no_capture_for_it(tmp_path: Path) -> None:
    """Discrete mode: the window nested in a stage is a region of that stage's trace; outermost,
    it is no trainer capture of its own (the engines record it)."""
    folder = tmp_path / "run"
    cfg = config(folder, discrete=True)
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    with profiler, profiler.step(1):
        with profile_stage("make_experience"), rollout_window([TorchSamplerEngine(cfg, replica=0)]):
            work()
        with rollout_window([TorchSamplerEngine(cfg, replica=0)], name="gen_outer"):
            work()
    stages = sorted(name.stage for name, _ in parsed(folder) if name.role == "actor")
    assert stages == ["make-experience"] or stages == ["make_experience"], stages
    assert "rollout" in _actor_names(folder)
