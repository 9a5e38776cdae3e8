"""Tests for `ProfilerConfig.union` / `intersect`, against a brute-force oracle of what a config
profiles, written from the contract's sentences."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given

from profdsl import ConfigError, FinishHook, ProfilerConfig, Schedule, TorchOptions

from .strategies import configs

STEPS = range(10)
RANKS = range(8)


def selected(c: ProfilerConfig) -> set[tuple[int, int]]:
    """Oracle: the (step, rank) pairs a config profiles. "Empty ranks with all_ranks=False selects
    rank 0"; a disabled config profiles nothing."""
    if not c.enable:
        return set()
    ranks = set(RANKS) if c.all_ranks else (set(c.ranks) if c.ranks else {0})
    return {(s, r) for s in STEPS if s in c.steps for r in RANKS if r in ranks}


def flags(c: ProfilerConfig) -> dict[str, bool]:
    """Oracle: what the torch backend records. "CUDA is recorded when contents is empty or names
    cuda; stack, shapes, memory switch on those options." """
    contents = c.torch.contents
    return {
        "cuda": len(contents) == 0 or "cuda" in contents,
        "stack": "stack" in contents,
        "shapes": "shapes" in contents,
        "memory": "memory" in contents,
    }


def align_left_biased(a: ProfilerConfig, b: ProfilerConfig) -> ProfilerConfig:
    """b with the fields that are documented as left-biased copied from a."""
    return attrs.evolve(
        b,
        save_path=a.save_path,
        nsys_report_dir=a.nsys_report_dir,
        rollout=a.rollout,
        torch=attrs.evolve(b.torch, schedule=a.torch.schedule),
        finish_hook=attrs.evolve(b.finish_hook, cmd=a.finish_hook.cmd),
    )


class TestUnion:
    """Tests for `ProfilerConfig.union`."""

    @given(configs, configs)
    def test_profiles_everything_either_profiles(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """Whatever a or b profiles, the union profiles."""
        assert selected(a) | selected(b) <= selected(a.union(b))

    @given(configs, configs)
    def test_is_the_smallest_step_by_rank_product(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """The union profiles only steps and ranks that a or b profiles (steps x ranks)."""
        both = selected(a) | selected(b)
        steps, ranks = {s for s, _ in both}, {r for _, r in both}
        assert selected(a.union(b)) == {(s, r) for s in steps for r in ranks}

    @given(configs, configs)
    def test_torch_flags_are_or(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """The union records a kind of activity if an enabled input records it."""
        inputs = [c for c in (a, b) if c.enable] or [a, b]
        expected = {k: any(flags(c)[k] for c in inputs) for k in flags(a)}
        assert flags(a.union(b)) == expected

    @given(configs, configs)
    def test_commutative(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """Apart from the left-biased fields, the order of the operands does not matter."""
        b = align_left_biased(a, b)
        assert a.union(b) == b.union(a)

    @given(configs)
    def test_idempotent(self, a: ProfilerConfig) -> None:
        """A config united with itself is itself."""
        assert a.union(a) == a

    @given(configs, configs, configs)
    def test_associative_in_what_it_profiles(self, a: ProfilerConfig, b: ProfilerConfig, c: ProfilerConfig) -> None:
        """Grouping does not change what is profiled."""
        assert selected(a.union(b).union(c)) == selected(a.union(b.union(c)))

    def test_disabled_operand_contributes_nothing(self) -> None:
        """Uniting with a disabled role keeps the enabled role's schedule and ranks."""
        actor = ProfilerConfig(enable=True, ranks=[1], torch=TorchOptions(schedule=Schedule(active=2)))
        assert ProfilerConfig().union(actor) == actor == actor.union(ProfilerConfig())

    def test_left_biased_fields(self) -> None:
        """save_path, and the hook command and schedule when both are set, come from the left."""
        a = ProfilerConfig(
            enable=True, save_path="a", finish_hook=FinishHook(cmd="A"), torch=TorchOptions(schedule=Schedule(active=2))
        )
        b = ProfilerConfig(
            enable=True,
            save_path="b",
            finish_hook=FinishHook(cmd="B", timeout_s=5),
            torch=TorchOptions(schedule=Schedule(active=3)),
        )
        u = a.union(b)
        assert (u.save_path, u.finish_hook.cmd, u.torch.schedule) == (a.save_path, "A", Schedule(active=2))
        assert u.finish_hook.timeout_s == 1800.0

    def test_no_schedule_wins(self) -> None:
        """A role that records every mini-batch and one on a schedule unite to every mini-batch."""
        a = ProfilerConfig(enable=True, torch=TorchOptions(schedule=Schedule(active=2)))
        assert a.union(ProfilerConfig(enable=True)).torch.schedule is None


class TestIntersect:
    """Tests for `ProfilerConfig.intersect`."""

    @given(configs, configs)
    def test_profiles_exactly_what_both_profile(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """The intersection profiles exactly the pairs both profile."""
        assert selected(a.intersect(b)) == selected(a) & selected(b)

    @given(configs, configs)
    def test_torch_flags_are_and(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """The intersection records a kind of activity only if both record it."""
        expected = {k: flags(a)[k] and flags(b)[k] for k in flags(a)}
        assert flags(a.intersect(b)) == expected

    @given(configs, configs)
    def test_commutative(self, a: ProfilerConfig, b: ProfilerConfig) -> None:
        """Apart from the left-biased fields, the order of the operands does not matter."""
        b = align_left_biased(a, b)
        assert a.intersect(b) == b.intersect(a)

    @given(configs)
    def test_idempotent(self, a: ProfilerConfig) -> None:
        """A config intersected with itself is itself."""
        assert a.intersect(a) == a

    def test_disjoint_ranks_disable(self) -> None:
        """Ranks {1} and {2} share nothing: the result profiles nothing (not rank 0)."""
        a = ProfilerConfig(enable=True, steps=[1], ranks=[1])
        b = ProfilerConfig(enable=True, steps=[1], ranks=[2])
        assert selected(a.intersect(b)) == set() and not a.intersect(b).enable

    def test_hook_command_must_agree(self) -> None:
        """Two different hook commands intersect to no command (verl kept the first: R3)."""
        a = ProfilerConfig(finish_hook=FinishHook(cmd="A", ranks=[0, 1]))
        b = ProfilerConfig(finish_hook=FinishHook(cmd="B", ranks=[1, 2]))
        assert a.intersect(b).finish_hook == FinishHook(cmd=None, ranks=(1,))
        assert a.intersect(a).finish_hook.cmd == "A"


def test_different_tools_refused() -> None:
    """Merging a torch and an nsys config is a ConfigError naming both tools."""
    with pytest.raises(ConfigError, match="different tools: 'torch' and 'nsys'"):
        ProfilerConfig().union(ProfilerConfig(tool="nsys"))
    with pytest.raises(ConfigError, match="different tools"):
        ProfilerConfig().intersect(ProfilerConfig(tool="nsys"))
