"""DSL edges a user meets at decoration and construction time: a stage above ``@property`` or
``@functools.cached_property`` keeps the attribute an attribute, and a stage bound to a role or
profiler that cannot be one is refused (or, a role no profiler has, said once)."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import pytest

from profdsl import ConfigError, Profiler, mini_batch_window, profile_stage, rollout_window

from .profiling import config, work
from .traces import names, parsed

torch = pytest.importorskip("torch")


class Model:
    def __init__(self) -> None:
        self.computed = 0
        self._size = 3

    @profile_stage("size_getter")
    @property
    def size(self) -> int:
        work()
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        self._size = value

    @profile_stage("cached_getter")
    @functools.cached_property
    def table(self) -> list[int]:
        self.computed += 1
        work()
        return [1, 2, 3]


def _stage_names(folder: Path) -> list[str]:
    return [n for _, trace in parsed(folder) for n in names(trace) if n.endswith("_getter")]


class TestAboveDescriptors:
    def test_property_stays_an_attribute_when_nothing_is_profiled(self) -> None:
        model = Model()
        assert model.size == 3
        model.size = 5
        assert model.size == 5
        assert isinstance(Model.__dict__["size"], property)

    def test_property_getter_is_the_stage(self, tmp_path: Path) -> None:
        model = Model()
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1):
            assert model.size == 3
            assert model.size == 3
        assert _stage_names(tmp_path) == ["size_getter", "size_getter"]

    def test_cached_property_computes_once_in_one_region(self, tmp_path: Path) -> None:
        model = Model()
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with profiler, profiler.step(1):
            assert model.table == [1, 2, 3]
            assert model.table == [1, 2, 3]
        assert model.computed == 1
        assert _stage_names(tmp_path) == ["cached_getter"]
        assert isinstance(Model.__dict__["table"], functools.cached_property)

    def test_cached_property_off(self) -> None:
        model = Model()
        assert model.table == [1, 2, 3] and model.table == [1, 2, 3]
        assert model.computed == 1


WORDS = [
    lambda **kw: profile_stage("s", **kw),
    lambda **kw: mini_batch_window(**kw),
    lambda **kw: rollout_window([], **kw),
]


class TestBindingChecked:
    @pytest.mark.parametrize("word", WORDS)
    @pytest.mark.parametrize("role", [5, "", b"actor", ["actor"]])
    def test_role_must_be_a_name(self, word: object, role: object) -> None:
        with pytest.raises(ConfigError, match=r"role must be a non-empty string, got"):
            word(role=role)  # type: ignore[operator]

    @pytest.mark.parametrize("word", WORDS)
    @pytest.mark.parametrize("profiler", ["actor", 1, object()])
    def test_profiler_must_be_a_profiler(self, word: object, profiler: object) -> None:
        with pytest.raises(ConfigError, match=r"profiler must be a Profiler, got"):
            word(profiler=profiler)  # type: ignore[operator]

    def test_a_real_profiler_and_role_are_taken(self, tmp_path: Path) -> None:
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        assert profile_stage("s", role="actor", profiler=profiler).profiler is profiler
        profiler.close()


class TestStrayRole:
    def test_typo_role_is_said_once(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.WARNING, logger="profdsl"), profiler, profiler.step(1):
            for _ in range(3):
                with profile_stage("update", role="actr"):
                    work()
        lines = [r.getMessage() for r in caplog.records if "'actr'" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "'update'" in lines[0] and "'actor'" in lines[0]

    def test_typo_role_with_metrics_only_is_said(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        from profdsl import Metrics

        cfg = config(tmp_path, enable=False, metrics=Metrics(enabled=True))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.WARNING, logger="profdsl"), profiler, profiler.step(1):
            with profile_stage("update", role="actr"):
                work()
        assert sum("'actr'" in r.getMessage() for r in caplog.records) == 1

    def test_a_role_of_another_live_profiler_is_not_a_typo(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        actor = Profiler(config(tmp_path / "a"), role="actor", rank=0, world_size=1)
        ref = Profiler(config(tmp_path / "r", steps=[2]), role="ref", rank=0, world_size=1)
        with caplog.at_level(logging.WARNING, logger="profdsl"), actor, ref, actor.step(1), ref.step(1):
            with profile_stage("ref_pass", role="ref"):
                work()
        assert not [r for r in caplog.records if "'ref'" in r.getMessage()]


def test_a_str_enum_role_is_a_role(tmp_path: Path) -> None:
    """A role given as a ``StrEnum`` member is its string: the stage finds its profiler."""
    import enum

    class Role(enum.StrEnum):
        ACTOR = "actor"

    profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
    with profiler, profiler.step(1):
        with profile_stage("enum_getter", role=Role.ACTOR):
            work()
    assert _stage_names(tmp_path) == ["enum_getter"]
