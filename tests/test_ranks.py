"""Tests for profdsl.ranks: rank discovery, rank selection, replicas and trace-name parsing."""

from __future__ import annotations

import os
import string
import subprocess
import sys
import types
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from profdsl.config import FinishHook, ProfilerConfig
from profdsl.core._decide import decide
from profdsl.core._ranks import RankInfo, discover_rank
from profdsl.core._topology import Topology
from profdsl.errors import ConfigError
from profdsl.ranks import local_rank_from_trace_name, replicas_for_ranks

REPO_ROOT = Path(__file__).resolve().parent.parent
NS = "1732870000000000000"

small_ranks = st.frozensets(st.integers(min_value=0, max_value=40), max_size=8)


# ----------------------------------------------------------------------------------------------
# discover_rank
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def gloo_group(tmp_path: Path) -> Iterator[None]:
    """A real single-process gloo default group, destroyed afterwards."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    dist.init_process_group(backend="gloo", init_method=f"file://{tmp_path / 'pg_store'}", world_size=1, rank=0)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _fake_dist(**functions: object) -> types.SimpleNamespace:
    """A stand-in ``torch.distributed`` module exposing the given functions."""
    return types.SimpleNamespace(**functions)


class TestDiscoverRankSources:
    def test_no_source_gives_rank_zero_of_one(self) -> None:
        """Without arguments, process group or environment, the process is rank 0 of 1."""
        assert discover_rank(environ={}) == RankInfo(0, 1, 0, "default")

    def test_environment_is_read(self) -> None:
        """RANK, WORLD_SIZE and LOCAL_RANK are read from the given environment."""
        env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}
        assert discover_rank(environ=env) == RankInfo(5, 8, 1, "env")

    def test_local_rank_defaults_to_rank(self) -> None:
        """Without LOCAL_RANK the local rank equals the global rank."""
        info = discover_rank(environ={"RANK": "3", "WORLD_SIZE": "4"})
        assert info.local_rank == 3

    def test_missing_world_size_defaults_to_one(self) -> None:
        """RANK=0 alone means a world of one, still sourced from the environment."""
        assert discover_rank(environ={"RANK": "0"}) == RankInfo(0, 1, 0, "env")

    def test_explicit_arguments_beat_environment(self) -> None:
        """Explicit rank and world size win over RANK / WORLD_SIZE."""
        env = {"RANK": "1", "WORLD_SIZE": "2"}
        assert discover_rank(2, 4, environ=env) == RankInfo(2, 4, 2, "explicit")

    def test_each_explicit_argument_wins_on_its_own(self) -> None:
        """An explicit world size keeps the rank from the environment, and vice versa."""
        env = {"RANK": "1", "WORLD_SIZE": "2"}
        assert discover_rank(world_size=16, environ=env) == RankInfo(1, 16, 1, "explicit")
        assert discover_rank(rank=0, environ=env) == RankInfo(0, 2, 0, "explicit")

    def test_local_rank_env_applies_to_explicit_rank(self) -> None:
        """LOCAL_RANK from the environment is kept even when the rank is explicit."""
        info = discover_rank(9, 16, environ={"LOCAL_RANK": "1"})
        assert (info.rank, info.local_rank) == (9, 1)

    def test_os_environ_is_the_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without ``environ`` the process environment is read."""
        monkeypatch.setenv("RANK", "2")
        monkeypatch.setenv("WORLD_SIZE", "3")
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        assert discover_rank() == RankInfo(2, 3, 2, "env")

    @given(
        world_size=st.integers(min_value=1, max_value=1024),
        data=st.data(),
        env_rank=st.integers(min_value=0, max_value=3),
    )
    def test_explicit_pair_is_returned_unchanged(self, world_size: int, data: st.DataObject, env_rank: int) -> None:
        """Any valid explicit pair comes back as given, whatever the environment says."""
        rank = data.draw(st.integers(min_value=0, max_value=world_size - 1))
        env = {"RANK": str(env_rank), "WORLD_SIZE": "4"}
        info = discover_rank(rank, world_size, environ=env)
        assert (info.rank, info.world_size, info.source) == (rank, world_size, "explicit")


class TestDiscoverRankTorchDistributed:
    def test_real_gloo_group_is_used(self, gloo_group: None) -> None:
        """An initialized gloo group supplies rank and world size, before the environment."""
        info = discover_rank(environ={"RANK": "3", "WORLD_SIZE": "4"})
        assert info == RankInfo(0, 1, 0, "torch.distributed")

    def test_explicit_beats_real_group(self, gloo_group: None) -> None:
        """Explicit arguments still win over an initialized group."""
        assert discover_rank(3, 4, environ={}) == RankInfo(3, 4, 3, "explicit")

    def test_rank_outside_group_world_is_rejected(self, gloo_group: None) -> None:
        """An explicit rank that does not fit the group's world size is a ConfigError."""
        with pytest.raises(ConfigError, match=r"argument rank .*got 1"):
            discover_rank(rank=1, environ={})

    def test_uninitialized_group_falls_through(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An imported but uninitialized torch.distributed leaves the environment in charge."""
        fake = _fake_dist(is_available=lambda: True, is_initialized=lambda: False)
        monkeypatch.setitem(sys.modules, "torch.distributed", fake)
        assert discover_rank(environ={"RANK": "1", "WORLD_SIZE": "2"}).source == "env"

    def test_raising_module_falls_through(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A torch.distributed whose calls raise is ignored rather than propagated."""

        def boom() -> bool:
            raise RuntimeError("broken build")

        fake = _fake_dist(is_available=lambda: True, is_initialized=boom)
        monkeypatch.setitem(sys.modules, "torch.distributed", fake)
        assert discover_rank(environ={}) == RankInfo(0, 1, 0, "default")

    def test_initialized_fake_group_is_used(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An initialized group's rank and world size are taken; LOCAL_RANK still applies."""
        fake = _fake_dist(
            is_available=lambda: True,
            is_initialized=lambda: True,
            get_rank=lambda: 6,
            get_world_size=lambda: 8,
        )
        monkeypatch.setitem(sys.modules, "torch.distributed", fake)
        assert discover_rank(environ={"LOCAL_RANK": "2"}) == RankInfo(6, 8, 2, "torch.distributed")

    def test_import_does_not_import_torch(self) -> None:
        """Importing profdsl.core._ranks and calling discover_rank() leaves torch unimported."""
        code = (
            "import sys, profdsl.core._ranks\n"
            "info = profdsl.core._ranks.discover_rank()\n"
            "assert info.source == 'default', info\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr


class TestDiscoverRankErrors:
    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("RANK", "abc"),
            ("RANK", "-1"),
            ("RANK", ""),
            ("RANK", "1.5"),
            ("RANK", "\u0663"),
            ("WORLD_SIZE", "0"),
            ("WORLD_SIZE", "many"),
            ("LOCAL_RANK", "x"),
            ("LOCAL_RANK", "-2"),
        ],
    )
    def test_bad_environment_value(self, name: str, value: str, caplog: pytest.LogCaptureFixture) -> None:
        """A malformed environment variable is ignored (as if unset), with one warning naming it
        and its value: the environment is not profdsl's configuration."""
        env = {"RANK": "0", "WORLD_SIZE": "1", name: value}
        assert discover_rank(environ=env) == RankInfo(0, 1, 0, "env")
        [message] = [r.getMessage() for r in caplog.records if r.name == "profdsl"]
        assert f"environment variable {name}" in message and repr(value) in message

    def test_env_rank_not_below_world_size(self, caplog: pytest.LogCaptureFixture) -> None:
        """RANK >= WORLD_SIZE: both are ignored with a warning naming RANK; rank 0 of 1."""
        assert discover_rank(environ={"RANK": "4", "WORLD_SIZE": "4"}) == RankInfo(0, 1, 0, "default")
        assert "environment variable RANK=4 does not fit world size 4" in caplog.text

    def test_env_rank_without_world_size(self, caplog: pytest.LogCaptureFixture) -> None:
        """RANK=3 without WORLD_SIZE does not fit the default world of one: ignored, logged."""
        assert discover_rank(environ={"RANK": "3"}) == RankInfo(0, 1, 0, "default")
        assert "RANK=3 does not fit" in caplog.text

    def test_explicit_rank_not_below_world_size(self) -> None:
        """An explicit rank >= explicit world size raises ConfigError naming the argument."""
        with pytest.raises(ConfigError, match=r"argument rank must be < world size 2.*got 2"):
            discover_rank(2, 2, environ={})

    @pytest.mark.parametrize(
        ("kwargs", "fragment"),
        [
            ({"rank": -1}, "argument rank must be an integer >= 0, got -1"),
            ({"rank": True}, "argument rank must be an integer >= 0, got True"),
            ({"rank": 1.0}, "argument rank must be an integer >= 0, got 1.0"),
            ({"world_size": 0}, "argument world_size must be an integer >= 1, got 0"),
        ],
    )
    def test_bad_explicit_argument(self, kwargs: dict[str, object], fragment: str) -> None:
        """A bad explicit argument raises ConfigError naming it and its value."""
        with pytest.raises(ConfigError) as caught:
            discover_rank(**kwargs, environ={})  # type: ignore[arg-type]
        assert fragment in str(caught.value)

    def test_env_is_ignored_when_both_arguments_given(self) -> None:
        """A malformed RANK does not matter when rank and world size are explicit."""
        assert discover_rank(0, 1, environ={"RANK": "junk"}).rank == 0


# ----------------------------------------------------------------------------------------------
# the traced ranks and the hook ranks (decided by core/_decide.decide)
# ----------------------------------------------------------------------------------------------


def selected_oracle(world: int, ranks: Collection[int], all_ranks: bool) -> set[int]:
    """Brute force: the ranks of a ``world`` that the contract profiles."""
    if all_ranks:
        return set(range(world))
    wanted = set(ranks) if ranks else {0}
    return {candidate for candidate in range(world) if candidate in wanted}


def hook_oracle(
    world: int,
    hook_ranks: Collection[int],
    hook_all: bool,
    profiled_ranks: Collection[int],
    profiled_all: bool,
) -> set[int]:
    """Brute force: the ranks of a ``world`` that run the finish hook."""
    if hook_all:
        return set(range(world))
    if hook_ranks:
        return set(range(world)) & set(hook_ranks)
    return selected_oracle(world, profiled_ranks, profiled_all)


def is_rank_selected(rank: int, ranks: Collection[int], *, all_ranks: bool = False, world: int = 64) -> bool:
    """Whether the one resolver traces ``rank`` of a ``world`` under a config naming ``ranks``."""
    config = ProfilerConfig(enable=True, ranks=tuple(ranks), all_ranks=all_ranks)
    return decide(config, Topology(rank=rank, world_size=world)).traced


class TestIsRankSelected:
    def test_empty_ranks_selects_rank_zero_only(self) -> None:
        """With no ranks named, only rank 0 is profiled."""
        assert is_rank_selected(0, [])
        assert not is_rank_selected(1, [])

    def test_named_ranks_are_selected(self) -> None:
        """Named ranks are profiled and others are not, rank 0 included."""
        assert is_rank_selected(3, [1, 3])
        assert not is_rank_selected(0, [1, 3])

    def test_all_ranks_selects_everyone(self) -> None:
        """all_ranks profiles every rank, even ones not named."""
        assert is_rank_selected(7, [1], all_ranks=True)

    @given(world=st.integers(1, 24), ranks=small_ranks, all_ranks=st.booleans())
    def test_matches_oracle(self, world: int, ranks: frozenset[int], all_ranks: bool) -> None:
        """Over a whole small world the selected ranks equal the brute-force oracle's."""
        got = {r for r in range(world) if is_rank_selected(r, ranks, all_ranks=all_ranks, world=world)}
        assert got == selected_oracle(world, ranks, all_ranks)


def hook_config(
    hook_ranks: Collection[int], hook_all_ranks: bool, profiled_ranks: Collection[int], profiled_all_ranks: bool
) -> ProfilerConfig:
    """A config that names its hook ranks and profiled ranks as given, with a hook command."""
    hook = FinishHook(cmd="true", ranks=tuple(hook_ranks), all_ranks=hook_all_ranks)
    return ProfilerConfig(enable=True, ranks=tuple(profiled_ranks), all_ranks=profiled_all_ranks, finish_hook=hook)


def runs_hook(config: ProfilerConfig, rank: int, world: int = 16) -> bool:
    """Whether the one resolver runs ``config``'s finish hook on ``rank`` of a ``world``."""
    return decide(config, Topology(rank=rank, world_size=world)).runs_hook


class TestHookRanks:
    def test_defaults_to_profiled_ranks(self) -> None:
        """Without hook ranks the hook runs exactly where profiling runs."""
        assert runs_hook(hook_config((), False, (2,), False), 2)
        assert not runs_hook(hook_config((), False, (2,), False), 0)

    def test_default_follows_profiled_rank_zero_rule(self) -> None:
        """With nothing named anywhere the hook runs on rank 0 only."""
        assert runs_hook(hook_config((), False, (), False), 0)
        assert not runs_hook(hook_config((), False, (), False), 1)

    def test_default_follows_profiled_all_ranks(self) -> None:
        """With no hook ranks and profiled_all_ranks, the hook runs on every rank."""
        assert runs_hook(hook_config((), False, (), True), 5)

    def test_hook_ranks_override_profiled_ranks(self) -> None:
        """Named hook ranks replace the profiled ranks, even profiled_all_ranks."""
        assert runs_hook(hook_config([4], False, [0], True), 4)
        assert not runs_hook(hook_config([4], False, [0], True), 0)

    def test_hook_all_ranks_runs_everywhere(self) -> None:
        """hook_all_ranks runs the hook on ranks that are neither hook nor profiled ranks."""
        assert runs_hook(hook_config([1], True, [2], False), 9)

    def test_bad_hook_ranks_member_is_rejected(self) -> None:
        """A negative hook rank raises ConfigError naming the hook's ranks."""
        with pytest.raises(ConfigError, match=r"FinishHook.ranks must contain .*got -1"):
            hook_config([-1], False, [], False)

    @given(
        world=st.integers(1, 24),
        hook_ranks=small_ranks,
        hook_all=st.booleans(),
        profiled_ranks=small_ranks,
        profiled_all=st.booleans(),
    )
    def test_matches_oracle(
        self,
        world: int,
        hook_ranks: frozenset[int],
        hook_all: bool,
        profiled_ranks: frozenset[int],
        profiled_all: bool,
    ) -> None:
        """Over a whole small world the hook ranks equal the brute-force oracle's."""
        config = hook_config(sorted(hook_ranks), hook_all, sorted(profiled_ranks), profiled_all)
        got = {r for r in range(world) if runs_hook(config, r, world)}
        assert got == hook_oracle(world, hook_ranks, hook_all, profiled_ranks, profiled_all)


# ----------------------------------------------------------------------------------------------
# replicas_for_ranks
# ----------------------------------------------------------------------------------------------


def replicas_oracle(ranks: Collection[int], width: int, all_ranks: bool, num_replicas: int) -> frozenset[int]:
    """Brute force: scan each replica's global ranks and keep replicas owning a named one."""
    if all_ranks:
        return frozenset(range(num_replicas))
    if not ranks:
        return frozenset({0}) if num_replicas else frozenset()
    owners: set[int] = set()
    for global_rank in range(num_replicas * width):
        for replica in range(num_replicas):
            start = replica * width
            if start <= global_rank < start + width and global_rank in ranks:
                owners.add(replica)
    return frozenset(owners)


widths = st.integers(min_value=1, max_value=6)
replica_counts = st.integers(min_value=0, max_value=8)


class TestReplicasForRanks:
    def test_ranks_map_to_owning_replicas(self) -> None:
        """With 4 GPUs per replica, ranks 1, 5 and 6 belong to replicas 0 and 1."""
        assert replicas_for_ranks([1, 5, 6], 4, num_replicas=3) == {0, 1}

    def test_empty_ranks_means_replica_zero(self) -> None:
        """No ranks named selects replica 0."""
        assert replicas_for_ranks([], 2, num_replicas=3) == {0}

    def test_empty_ranks_without_replicas_is_empty(self) -> None:
        """No ranks named and no replicas selects nothing."""
        assert replicas_for_ranks([], 2, num_replicas=0) == frozenset()

    def test_ranks_past_last_replica_are_ignored(self) -> None:
        """A rank owned by a replica that does not exist selects nothing."""
        assert replicas_for_ranks([2, 9], 2, num_replicas=2) == {1}

    def test_all_ranks_selects_every_replica(self) -> None:
        """all_ranks selects range(num_replicas)."""
        assert replicas_for_ranks([0], 8, all_ranks=True, num_replicas=3) == {0, 1, 2}

    def test_returns_frozenset(self) -> None:
        """The result is a frozenset, safe to share."""
        assert isinstance(replicas_for_ranks([0], 1, num_replicas=1), frozenset)

    @pytest.mark.parametrize(
        ("ranks", "width", "count", "fragment"),
        [
            ([0], 0, 1, "replica_world_size must be an integer >= 1, got 0"),
            ([0], 1, -1, "num_replicas must be an integer >= 0, got -1"),
            ([-1], 1, 1, "ranks members must be an integer >= 0, got -1"),
            ([True], 1, 1, "ranks members must be an integer >= 0, got True"),
        ],
    )
    def test_bad_arguments(self, ranks: list[int], width: int, count: int, fragment: str) -> None:
        """Bad arguments raise ConfigError naming the argument and the value."""
        with pytest.raises(ConfigError) as caught:
            replicas_for_ranks(ranks, width, num_replicas=count)
        assert fragment in str(caught.value)

    @given(ranks=small_ranks, width=widths, all_ranks=st.booleans(), count=replica_counts)
    def test_matches_oracle(self, ranks: frozenset[int], width: int, all_ranks: bool, count: int) -> None:
        """The result equals the brute-force scan of every replica's rank range."""
        got = replicas_for_ranks(ranks, width, all_ranks=all_ranks, num_replicas=count)
        assert got == replicas_oracle(ranks, width, all_ranks, count)

    @given(ranks=small_ranks, width=widths, all_ranks=st.booleans(), count=replica_counts)
    def test_result_is_within_existing_replicas(
        self, ranks: frozenset[int], width: int, all_ranks: bool, count: int
    ) -> None:
        """Only existing replicas are ever selected."""
        got = replicas_for_ranks(ranks, width, all_ranks=all_ranks, num_replicas=count)
        assert got <= frozenset(range(count))

    @given(ranks=small_ranks, width=widths, count=replica_counts)
    def test_all_ranks_gives_everything(self, ranks: frozenset[int], width: int, count: int) -> None:
        """all_ranks selects every replica whatever ranks holds."""
        got = replicas_for_ranks(ranks, width, all_ranks=True, num_replicas=count)
        assert got == frozenset(range(count))

    @given(smaller=small_ranks, extra=small_ranks, width=widths, count=replica_counts)
    def test_monotone_in_ranks(self, smaller: frozenset[int], extra: frozenset[int], width: int, count: int) -> None:
        """Naming more ranks never drops a replica (for non-empty rank sets)."""
        assume(smaller)
        small_result = replicas_for_ranks(smaller, width, num_replicas=count)
        big_result = replicas_for_ranks(smaller | extra, width, num_replicas=count)
        assert small_result <= big_result

    @given(replica=st.integers(0, 10), width=widths)
    def test_replica_ranks_round_trip(self, replica: int, width: int) -> None:
        """Each rank a replica owns maps back to that replica alone."""
        owned = range(replica * width, (replica + 1) * width)
        assert len(owned) == width
        for global_rank in owned:
            assert replicas_for_ranks([global_rank], width, num_replicas=replica + 1) == {replica}


# ----------------------------------------------------------------------------------------------
# local_rank_from_trace_name
# ----------------------------------------------------------------------------------------------

TRACE_NAME_CASES = [
    # vLLM >= 0.13 workers
    pytest.param(f"verl_rollout_dp0_pp0_tp3_dcp0_ep0_rank3.{NS}.pt.trace.json.gz", 4, 3, id="vllm-prefix"),
    pytest.param(f"dp0_pp0_tp1_dcp0_ep0_rank1.{NS}.pt.trace.json.gz", 2, 1, id="vllm-no-prefix"),
    pytest.param(f"dp0_pp1_tp0_dcp0_ep0_rank2.{NS}.pt.trace.json.gz", 4, 2, id="vllm-pp"),
    pytest.param(f"run-7_dp1_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz", 4, None, id="vllm-dp1"),
    pytest.param(f"dp2_pp0_tp1_dcp0_ep0_rank1.{NS}.pt.trace.json.gz", 4, None, id="vllm-dp2-no-prefix"),
    pytest.param(f"myprefix_rank1.{NS}.pt.trace.json.gz", 2, 1, id="vllm-rank-only-prefix"),
    pytest.param(f"rank1.{NS}.pt.trace.json.gz", 2, 1, id="vllm-rank-only"),
    pytest.param(f"rank2.{NS}.pt.trace.json", 4, 2, id="vllm-uncompressed"),
    pytest.param(f"exp_dp1_rank3.{NS}.pt.trace.json.gz", 4, 3, id="vllm-prefix-looks-like-dp"),
    # older instance convention
    pytest.param("rollout-0-rank-2.1732870000.pt.trace.json.gz", 4, 2, id="instance"),
    # SGLang
    pytest.param("1732870000.1234-TP-1.trace.json.gz", 2, 1, id="sglang-tp"),
    pytest.param("step5-1732870000.1234-TP-3.trace.json.gz", 4, 3, id="sglang-prefix"),
    pytest.param("1732870000.1234-TP-1-prefill.trace.json.gz", 2, 1, id="sglang-prefill"),
    pytest.param("1732870000.1234-TP-0-decode.trace.json.gz", 2, 0, id="sglang-decode"),
    pytest.param("1732870000.1234-TP-0-DP-1.trace.json.gz", 4, None, id="sglang-dp"),
    pytest.param("1732870000.1234-TP-1-PP-1.trace.json.gz", 4, None, id="sglang-pp"),
    pytest.param("1732870000.1234-TP-0-EP-0.trace.json.gz", 4, None, id="sglang-ep"),
    pytest.param("1732870000.1234-TP-0-DP-0-prefill.trace.json.gz", 4, None, id="sglang-dp-stage"),
    pytest.param("1732870000.1234-TP-1-memory.pickle", 2, 1, id="sglang-memory"),
    pytest.param("1732870000.1234-TP-1-memory-decode.pickle", 2, 1, id="sglang-memory-stage"),
    # old vLLM / torch tensorboard_trace_handler: no rank
    pytest.param(f"node-3_12345.{NS}.pt.trace.json.gz", 8, None, id="old-host-pid"),
    pytest.param("gpu-rank3node_1.pt.trace.json.gz", 8, None, id="verl-host-trap"),
    pytest.param(f"node-rank7_4242.{NS}.pt.trace.json.gz", 8, None, id="old-host-rank7"),
    pytest.param(f"rank7_4242.{NS}.pt.trace.json.gz", 8, None, id="old-host-is-rank7"),
    pytest.param(f"node_rank7_4242.{NS}.pt.trace.json.gz", 8, None, id="old-host-underscore-rank7"),
    pytest.param(f"host-rank-7_4242.{NS}.pt.trace.json.gz", 8, None, id="old-host-dash-rank"),
    pytest.param(f"h-TP-1_4242.{NS}.pt.trace.json.gz", 8, None, id="old-host-tp"),
    pytest.param(f"rank\u0663.{NS}.pt.trace.json.gz", 8, None, id="non-ascii-digit"),
    # out of range
    pytest.param(f"rank4.{NS}.pt.trace.json.gz", 4, None, id="vllm-out-of-range"),
    pytest.param("1732870000.1234-TP-2.trace.json.gz", 2, None, id="sglang-out-of-range"),
    pytest.param("a-rank-5.1732870000.pt.trace.json.gz", 4, None, id="instance-out-of-range"),
    pytest.param(f"rank1.{NS}.pt.trace.json.gz", 1, None, id="w1-readable-out-of-range"),
    # one-GPU replicas
    pytest.param(f"rank0.{NS}.pt.trace.json.gz", 1, 0, id="w1-readable"),
    pytest.param(f"node-3_12345.{NS}.pt.trace.json.gz", 1, 0, id="w1-old-name"),
    pytest.param("notes.txt", 1, 0, id="w1-unrelated"),
    pytest.param(f"dp1_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz", 1, None, id="w1-dp1"),
    # full paths: only the base name counts
    pytest.param(
        f"/tmp/traces/replica_3/dp0_pp0_tp0_dcp0_ep0_rank1.{NS}.pt.trace.json.gz",
        2,
        1,
        id="path-vllm",
    ),
    pytest.param(f"/data/rank5/host_1.{NS}.pt.trace.json.gz", 8, None, id="path-dir-has-rank"),
    pytest.param("/out/run-TP-3/1732870000.1-TP-0.trace.json.gz", 4, 0, id="path-sglang"),
    pytest.param(f"C:\\traces\\rank2.{NS}.pt.trace.json.gz", 4, 2, id="path-windows"),
]


class TestLocalRankFromTraceNameTable:
    @pytest.mark.parametrize(("name", "width", "expected"), TRACE_NAME_CASES)
    def test_table(self, name: str, width: int, expected: int | None) -> None:
        """Each real-looking trace name maps to the documented local rank or None."""
        assert local_rank_from_trace_name(name, width) == expected

    @pytest.mark.parametrize("width", [0, -1])
    def test_bad_width(self, width: int) -> None:
        """A replica world size below 1 raises ConfigError naming it and the value."""
        expected = rf"replica_world_size must be an integer >= 1, got {width}"
        with pytest.raises(ConfigError, match=expected):
            local_rank_from_trace_name(f"rank0.{NS}.pt.trace.json.gz", width)


SAFE = string.ascii_letters + string.digits + "-_."
HOST_FRAGMENTS = ["gpu", "node", "rank", "rank3", "-rank-", "-rank-2", "TP", "-TP-1", "dp1", "_", "-", ".", "7"]

safe_prefixes = st.text(alphabet=SAFE, max_size=20)
host_names = st.one_of(
    st.text(alphabet=SAFE, min_size=1, max_size=24),
    st.lists(st.sampled_from(HOST_FRAGMENTS), min_size=1, max_size=6).map("".join),
)
timestamps = st.integers(min_value=0, max_value=2**63).map(str)
small_ints = st.integers(min_value=0, max_value=64)


@st.composite
def width_and_rank(draw: st.DrawFn) -> tuple[int, int]:
    """A replica world size and a local rank inside it."""
    width = draw(st.integers(min_value=1, max_value=64))
    return width, draw(st.integers(min_value=0, max_value=width - 1))


@st.composite
def vllm_names(draw: st.DrawFn, k: int) -> str:
    """A vLLM >= 0.13 worker trace name (data-parallel rank 0) for local rank ``k``."""
    prefix = draw(safe_prefixes)
    if draw(st.booleans()):
        pp, tp, dcp, ep = (draw(small_ints) for _ in range(4))
        middle = f"dp0_pp{pp}_tp{tp}_dcp{dcp}_ep{ep}_rank{k}"
    else:
        middle = f"rank{k}"
    head = f"{prefix}_{middle}" if prefix else middle
    gz = draw(st.sampled_from([".gz", ""]))
    return f"{head}.{draw(timestamps)}.pt.trace.json{gz}"


@st.composite
def sglang_names(draw: st.DrawFn, k: int) -> str:
    """An SGLang TP-only trace or memory-snapshot name for local rank ``k``."""
    prefix = draw(safe_prefixes)
    profile_id = draw(st.one_of(timestamps, st.text(alphabet=SAFE, min_size=1, max_size=12)))
    head = f"{prefix}-{profile_id}" if prefix else profile_id
    stage = draw(st.sampled_from(["", "-prefill", "-decode"]))
    if draw(st.booleans()):
        return f"{head}-TP-{k}-memory{stage}.pickle"
    return f"{head}-TP-{k}{stage}.trace.json.gz"


class TestLocalRankFromTraceNameProperties:
    @given(
        wk=width_and_rank(),
        data=st.data(),
        directory=st.sampled_from(["", "/tmp/t/", "out/rank9/"]),
    )
    def test_generated_vllm_name_gives_k(self, wk: tuple[int, int], data: st.DataObject, directory: str) -> None:
        """A vLLM name built from local rank k reads back as exactly k, with any prefix."""
        width, k = wk
        name = directory + data.draw(vllm_names(k))
        assert local_rank_from_trace_name(name, width) == k

    @given(wk=width_and_rank(), data=st.data())
    def test_generated_sglang_name_gives_k(self, wk: tuple[int, int], data: st.DataObject) -> None:
        """An SGLang TP-only name built from tp rank k reads back as exactly k."""
        width, k = wk
        assert local_rank_from_trace_name(data.draw(sglang_names(k)), width) == k

    @given(
        host=host_names,
        pid=st.integers(min_value=1, max_value=2**22),
        ns=timestamps,
        width=st.integers(min_value=2, max_value=64),
    )
    def test_old_host_pid_name_gives_none(self, host: str, pid: int, ns: str, width: int) -> None:
        """A torch ``{host}_{pid}.{ns}`` name never yields a rank in a multi-GPU replica."""
        assert local_rank_from_trace_name(f"{host}_{pid}.{ns}.pt.trace.json.gz", width) is None

    @given(wk=width_and_rank(), data=st.data())
    def test_generated_vllm_dp_name_gives_none(self, wk: tuple[int, int], data: st.DataObject) -> None:
        """A vLLM name from a data-parallel engine other than 0 yields None."""
        width, k = wk
        dp = data.draw(st.integers(min_value=1, max_value=16))
        name = f"{data.draw(safe_prefixes)}_dp{dp}_pp0_tp{k}_dcp0_ep0_rank{k}.{NS}.pt.trace.json.gz"
        assert local_rank_from_trace_name(name, width) is None
