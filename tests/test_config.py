"""Tests for `profdsl.config` and the merge rules of `ProfilerConfig.union` / `intersect`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from hypothesis import given

from profdsl import ConfigError, FinishHook, ProfilerConfig, Schedule, TorchOptions

from .strategies import configs


class TestDefaults:
    """The contract's defaults."""

    def test_profiler_config_defaults(self) -> None:
        """A bare ProfilerConfig is disabled, torch, rank 0, writing to ./profiles (made absolute)."""
        c = ProfilerConfig()
        assert (c.enable, c.tool, c.steps, c.ranks, c.all_ranks) == (False, "torch", (), (), False)
        assert (c.save_path, c.discrete, c.continuous_steps, c.nvtx) == (
            str(Path.cwd() / "profiles"),
            False,
            False,
            False,
        )
        assert c.relocate_results is True
        assert c.torch == TorchOptions(contents=frozenset(), schedule=None)
        assert c.finish_hook == FinishHook(cmd=None, ranks=(), all_ranks=False, timeout_s=1800.0)

    def test_schedule_defaults(self) -> None:
        """A bare Schedule records every mini-batch, one per cycle, forever."""
        assert attrs.astuple(Schedule()) == (0, 0, 0, 1, 0)

    def test_keyword_only_and_frozen(self) -> None:
        """Positional arguments are refused and fields cannot be reassigned."""
        with pytest.raises(TypeError):
            Schedule(1)  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            ProfilerConfig().enable = True  # type: ignore[misc]

    def test_lists_become_sorted_tuples_and_frozensets(self) -> None:
        """YAML lists are stored as sorted, de-duplicated tuples and frozensets."""
        c = ProfilerConfig(steps=[5, 2, 5], ranks=[3, 1], torch={"contents": ["stack", "cpu"]})
        assert c.steps == (2, 5) and c.ranks == (1, 3)
        assert c.torch.contents == frozenset({"cpu", "stack"})

    @pytest.mark.parametrize(
        ("contents", "cuda"),
        [([], True), (["cpu"], False), (["cuda"], True), (["memory"], False), (["cpu", "cuda"], True)],
    )
    def test_cuda_rule(self, contents: list[str], cuda: bool) -> None:
        """CUDA is recorded when contents is empty or names cuda."""
        assert TorchOptions(contents=contents).cuda is cuda

    def test_blank_hook_command_means_none(self) -> None:
        """An empty or blank cmd (a common YAML default) means no hook."""
        assert FinishHook(cmd="  ").cmd is None

    def test_pathlike_save_path(self, tmp_path: Path) -> None:
        """A pathlib.Path save_path is stored as a string."""
        assert ProfilerConfig(save_path=tmp_path).save_path == str(tmp_path)

    def test_pickle_round_trip(self) -> None:
        """Configs cross process boundaries (Ray) intact."""
        c = ProfilerConfig(enable=True, steps=[1], torch={"schedule": {"wait": 1}})
        assert pickle.loads(pickle.dumps(c)) == c


BAD_VALUES: list[tuple[Any, dict[str, Any], str]] = [
    (Schedule, {"wait": -1}, "Schedule.wait must be an integer >= 0, got -1"),
    (Schedule, {"skip_first": 1.5}, "Schedule.skip_first must be an integer >= 0, got 1.5"),
    (Schedule, {"warmup": "2"}, "Schedule.warmup must be an integer >= 0, got '2'"),
    (Schedule, {"repeat": True}, "Schedule.repeat must be an integer >= 0, got True"),
    (Schedule, {"active": 0}, "Schedule.active must be an integer >= 1, got 0"),
    (ProfilerConfig, {"tool": "nsight"}, "ProfilerConfig.tool must be one of 'torch', 'nsys', got 'nsight'"),
    (ProfilerConfig, {"tool": "tourch"}, "did you mean 'torch'?"),
    (TorchOptions, {"contents": ["cpu", "gpu"]}, "TorchOptions.contents has unknown item 'gpu'"),
    (TorchOptions, {"contents": ["stak"]}, "did you mean 'stack'?"),
    (TorchOptions, {"contents": "cpu"}, "TorchOptions.contents must be a list of names"),
    (ProfilerConfig, {"steps": [1, -2]}, "ProfilerConfig.steps must contain integers >= 0, got -2"),
    (ProfilerConfig, {"steps": [1.0]}, "ProfilerConfig.steps must contain integers >= 0, got 1.0"),
    (ProfilerConfig, {"steps": 3}, "ProfilerConfig.steps must be a list of integers, got 3"),
    (ProfilerConfig, {"ranks": [-1]}, "ProfilerConfig.ranks must contain integers >= 0, got -1"),
    (ProfilerConfig, {"ranks": "0,1"}, "ProfilerConfig.ranks must be a list of integers, got '0,1'"),
    (ProfilerConfig, {"ranks": [True]}, "ProfilerConfig.ranks must contain integers >= 0, got True"),
    (FinishHook, {"ranks": "0"}, "FinishHook.ranks must be a list of integers, got '0'"),
    (FinishHook, {"cmd": 123}, "FinishHook.cmd must be a string or None, got 123"),
    (FinishHook, {"cmd": ["aws", "s3"]}, "FinishHook.cmd must be a string or None"),
    (FinishHook, {"timeout_s": 0}, "FinishHook.timeout_s must be a finite number of seconds > 0, got 0"),
    (FinishHook, {"timeout_s": -5.0}, "got -5.0"),
    (FinishHook, {"timeout_s": float("inf")}, "got inf"),
    (FinishHook, {"timeout_s": "60"}, "got '60'"),
    (
        ProfilerConfig,
        {"save_path": "s3://bucket/run"},
        "ProfilerConfig.save_path must be a local path, got the URL 's3://bucket/run'",
    ),
    (ProfilerConfig, {"save_path": "gs://b"}, "got the URL 'gs://b'"),
    (ProfilerConfig, {"save_path": ""}, "ProfilerConfig.save_path must be a non-empty local path, got ''"),
    (ProfilerConfig, {"save_path": None}, "ProfilerConfig.save_path must be a non-empty local path, got None"),
    (ProfilerConfig, {"enable": "yes"}, "ProfilerConfig.enable must be true or false, got 'yes'"),
    (ProfilerConfig, {"all_ranks": 1}, "ProfilerConfig.all_ranks must be true or false, got 1"),
    (ProfilerConfig, {"torch": 5}, "ProfilerConfig.torch must be a TorchOptions or a mapping, got 5"),
    (TorchOptions, {"schedule": [1, 2]}, "TorchOptions.schedule must be a Schedule or a mapping"),
]


class TestValidation:
    """Every invalid value raises ConfigError naming the field and the value."""

    @pytest.mark.parametrize(("cls", "kwargs", "message"), BAD_VALUES)
    def test_bad_value(self, cls: Any, kwargs: dict[str, Any], message: str) -> None:
        """The error is a ConfigError (a ValueError) whose message names field and value."""
        with pytest.raises(ConfigError) as info:
            cls(**kwargs)
        assert message in str(info.value)
        assert isinstance(info.value, ValueError)

    @pytest.mark.parametrize(("cls", "kwargs", "message"), BAD_VALUES)
    def test_bad_value_through_from_mapping(self, cls: Any, kwargs: dict[str, Any], message: str) -> None:
        """The same error comes out of a nested mapping, as a YAML file would give it."""
        mapping: dict[str, Any] = dict(kwargs)
        if cls is Schedule:
            mapping = {"torch": {"schedule": mapping}}
        elif cls is TorchOptions:
            mapping = {"torch": mapping}
        elif cls is FinishHook:
            mapping = {"finish_hook": mapping}
        with pytest.raises(ConfigError, match=None) as info:
            ProfilerConfig.from_mapping(mapping)
        assert message in str(info.value)


class TestFromMapping:
    """Tests for `from_mapping` / `to_mapping`."""

    def test_nested_plain_dicts(self) -> None:
        """Nested dicts and lists build the nested classes."""
        c = ProfilerConfig.from_mapping(
            {
                "enable": True,
                "steps": [2, 5],
                "torch": {"contents": ["cpu", "cuda"], "schedule": {"wait": 1, "warmup": 1, "active": 2}},
                "finish_hook": {"cmd": "true", "ranks": [0]},
            }
        )
        assert c.torch.schedule == Schedule(wait=1, warmup=1, active=2)
        assert c.finish_hook.ranks == (0,)

    @pytest.mark.parametrize(
        ("mapping", "message"),
        [
            ({"enabled": True}, "unknown key 'enabled' in ProfilerConfig; did you mean 'enable'?"),
            ({"torch": {"schedul": {}}}, "unknown key 'schedul' in ProfilerConfig.torch; did you mean 'schedule'?"),
            (
                {"torch": {"schedule": {"actve": 2}}},
                "unknown key 'actve' in TorchOptions.schedule; did you mean 'active'?",
            ),
            ({"finish_hook": {"command": "x"}}, "unknown key 'command' in ProfilerConfig.finish_hook"),
            ({"zzz": 1}, "unknown key 'zzz' in ProfilerConfig (known keys: enable, tool"),
        ],
    )
    def test_unknown_keys(self, mapping: dict[str, Any], message: str) -> None:
        """Unknown keys are errors, with the closest known key suggested."""
        with pytest.raises(ConfigError) as info:
            ProfilerConfig.from_mapping(mapping)
        assert message in str(info.value)

    def test_not_a_mapping(self) -> None:
        """A list where a mapping belongs is a clear error."""
        with pytest.raises(ConfigError, match="ProfilerConfig must be a mapping, got"):
            ProfilerConfig.from_mapping([1, 2])  # type: ignore[arg-type]

    @given(configs)
    def test_round_trip(self, c: ProfilerConfig) -> None:
        """from_mapping(to_mapping(c)) == c, through JSON and YAML text as well."""
        assert ProfilerConfig.from_mapping(c.to_mapping()) == c
        assert ProfilerConfig.from_mapping(json.loads(json.dumps(c.to_mapping()))) == c
        assert ProfilerConfig.from_mapping(yaml.safe_load(yaml.safe_dump(c.to_mapping()))) == c


class TestFromFile:
    """Tests for `ProfilerConfig.from_file`."""

    def test_yaml(self, tmp_path: Path) -> None:
        """A YAML file is read."""
        path = tmp_path / "p.yaml"
        path.write_text("enable: true\nsteps: [1, 3]\ntorch:\n  schedule: {wait: 1, active: 2}\n")
        c = ProfilerConfig.from_file(path)
        assert c.enable and c.steps == (1, 3) and c.torch.schedule == Schedule(wait=1, active=2)

    def test_json_and_section(self, tmp_path: Path) -> None:
        """A JSON file is read, and `section` picks a nested block."""
        path = tmp_path / "trainer.json"
        path.write_text(json.dumps({"actor": {"profiler": {"enable": True, "ranks": [2]}}}))
        assert ProfilerConfig.from_file(path, section="actor.profiler").ranks == (2,)

    def test_empty_yaml_is_defaults(self, tmp_path: Path) -> None:
        """An empty YAML file gives the defaults."""
        path = tmp_path / "empty.yml"
        path.write_text("")
        assert ProfilerConfig.from_file(path) == ProfilerConfig()

    @pytest.mark.parametrize(
        ("name", "text", "section", "message"),
        [
            ("missing.yaml", None, None, "cannot read profiler config"),
            ("bad.yaml", "enable: [1,", None, "cannot parse profiler config"),
            ("bad.json", "{", None, "cannot parse profiler config"),
            ("list.yaml", "- 1\n", None, "must hold a mapping of profiler settings"),
            ("s.yaml", "actor: {}\n", "actor.profiler", "has no key 'profiler'"),
            ("v.yaml", "steps: [-1]\n", None, "ProfilerConfig.steps must contain integers >= 0, got -1"),
        ],
    )
    def test_errors(self, tmp_path: Path, name: str, text: str | None, section: str | None, message: str) -> None:
        """Unreadable, unparsable, misplaced or invalid content raises ConfigError naming it."""
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(ConfigError) as info:
            ProfilerConfig.from_file(path, section=section)
        assert message in str(info.value)
