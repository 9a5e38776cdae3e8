"""Inputs the runtime must survive: step numbers that are not
plain ``int``, values beyond the names' padded width, timeouts, contents and NUL characters the
config must refuse, junk rank variables in the environment, and a relative ``save_path`` with
the working directory changing under it (in one process, and on a Ray worker)."""

from __future__ import annotations

import json
import logging
import os
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl import (
    ConfigError,
    FinishHook,
    Profiler,
    ProfilerConfig,
    RolloutOptions,
    TorchOptions,
    profile_stage,
    rollout_window,
)
from profdsl._cli import main as cli_main
from profdsl.core._naming import MAX_INDEX, MAX_NAME_BYTES
from profdsl.core.preview import preview
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName
from profdsl.rollout.vllm import VllmEngine, vllm_launch

from .fake_engines import FakeVllmLLM
from .profiling import config, hooks, records, work
from .traces import load, trace_files

torch = pytest.importorskip("torch")

#: Twelve digits: the widest index a trace name holds (profdsl.naming.MAX_WIDE_INDEX).
MAX_WIDE_INDEX = 999_999_999_999


def one_step(profiler: Profiler, step: object, stage: str = "update") -> None:
    with profiler.step(step), profile_stage(stage):  # type: ignore[arg-type]
        work()


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "profdsl" and r.levelno >= logging.WARNING and text in r.getMessage()
    ]


# ----------------------------------------------------------------------------------------------
# 1. Step numbers that are not plain int
# ----------------------------------------------------------------------------------------------


def numpy_int64(value: int) -> Any:
    numpy = pytest.importorskip("numpy")
    return numpy.int64(value)


INTEGRAL_STEPS = {
    "numpy.int64": numpy_int64,
    "0-d int64 tensor": lambda v: torch.tensor(v),
    "0-d int32 tensor": lambda v: torch.tensor(v, dtype=torch.int32),
}
MISUSED_STEPS: list[Any] = [
    -1,
    True,
    False,
    1.5,
    1.0,
    "3",
    None,
    b"1",
    [1],
    MAX_WIDE_INDEX + 1,
    torch.tensor(True),
    torch.tensor(1.0),
    torch.tensor([1, 2]),
]


class TestStepNumbers:
    """Any integral step number is a step; a misused one is logged once and not profiled."""

    @pytest.mark.parametrize("make", list(INTEGRAL_STEPS.values()), ids=list(INTEGRAL_STEPS))
    @pytest.mark.parametrize("discrete", [False, True])
    def test_integral_step_is_profiled(self, tmp_path: Path, make: Any, discrete: bool) -> None:
        """numpy.int64 and 0-d integer tensors profile the step they name, written as a plain int."""
        with Profiler(config(tmp_path, discrete=discrete), role="actor", rank=0, world_size=1) as p:
            for step in (0, 1, 2):
                one_step(p, make(step))
        [record] = records(tmp_path, "trace")
        assert record["status"] == "ok" and record["step"] == 1 and type(record["step"]) is int
        assert TraceName.parse(record["path"]).step == 1
        assert load(tmp_path / record["path"])["traceEvents"]

    @pytest.mark.parametrize("enable", [False, True])
    @pytest.mark.parametrize("value", MISUSED_STEPS, ids=repr)
    def test_misused_step_never_raises(self, tmp_path: Path, enable: bool, value: Any) -> None:
        """start/stop/step with a wrong step number never raise, enabled or not."""
        profiler = Profiler(config(tmp_path, enable=enable), role="actor", rank=0, world_size=1)
        profiler.start(value)
        with profile_stage("update"):
            work()
        profiler.stop()
        one_step(profiler, value)
        profiler.close()
        assert records(tmp_path, "trace") == []

    def test_misuse_is_logged_once_and_not_profiled(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """True, "1", 1.0 and -1 around the profiled step 1 are not step 1 (nor any step); one
        warning names the problem; the real step 1 is still profiled, and stop() after a misused
        start() is no misuse of its own."""
        caplog.set_level(logging.WARNING, logger="profdsl")
        with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler:
            for value in (True, "1", 1.0, -1):
                one_step(profiler, value)
                assert profiler.current_step is None and not profiler.is_profiling
            one_step(profiler, 1)
            one_step(profiler, True)
        assert [(r["step"], r["status"]) for r in records(tmp_path, "trace")] == [(1, "ok")]
        assert len(warnings_about(caplog, "step number")) == 1
        assert warnings_about(caplog, "without start()") == []

    def test_misused_step_ends_a_continuous_run(self, tmp_path: Path) -> None:
        """A misused step in the middle of a run of continuous steps is not captured: the run's
        trace ends before it and a new one begins after it."""
        cfg = config(tmp_path, steps=[1, 2, 3], continuous_steps=True)
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for value in (1, 2.0, 3):
                one_step(profiler, value)
        first_steps = sorted(TraceName.parse(r["path"]).step for r in records(tmp_path, "trace"))
        assert first_steps == [1, 3]

    def test_ray_step_profiler_takes_integral_steps(self, tmp_path: Path) -> None:
        """The trainer's step clock accepts numpy and tensor steps and keeps a plain int."""
        from profdsl.ray import RayStepProfiler

        trainer = RayStepProfiler(config(tmp_path), workers=[])
        for make in INTEGRAL_STEPS.values():
            with trainer.step(make(1)):
                assert trainer.clock.current_step == 1 and type(trainer.clock.current_step) is int
        with trainer.step(-1):  # type: ignore[arg-type]
            assert trainer.clock.current_step is None
        trainer.close()


# ----------------------------------------------------------------------------------------------
# 3. Values the config accepts but the runtime could not use
# ----------------------------------------------------------------------------------------------


def oracle_name(
    *,
    role: str,
    stage: str | None,
    step: int | None,
    rank: int | None,
    world_size: int | None,
    replica: int | None,
    window: tuple[int, int] | None,
    part: int | None,
    host: str,
    pid: int,
    stamp: str,
    ext: str,
) -> str:
    """The name by the grammar of docs/trace-names.md, written independently of TraceName."""
    pieces = [role if stage is None else role + "." + stage]
    if step is not None:
        pieces.append("step" + str(step).rjust(6, "0"))
    if rank is not None:
        pieces.append("rank" + str(rank) + ("" if world_size is None else "-of-" + str(world_size)))
    elif world_size is not None:
        pieces.append("world" + str(world_size))
    if replica is not None:
        pieces.append("replica" + str(replica))
    if window is not None:
        pieces.append("mb" + str(window[0]) + ("" if window[0] == window[1] else "-" + str(window[1])))
    if part is not None:
        pieces.append("part" + str(part))
    return "_".join(pieces + [host, "pid" + str(pid), stamp + ext])


wide = st.integers(0, 12) | st.integers(MAX_INDEX - 2, MAX_INDEX + 2) | st.integers(0, MAX_WIDE_INDEX)
plain_labels = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=20)


@st.composite
def runtime_names(draw: st.DrawFn) -> dict[str, Any]:
    """The fields of a name profdsl's runtime writes: no parallel coordinates, any index up to
    MAX_WIDE_INDEX."""
    world = draw(st.none() | st.integers(1, MAX_WIDE_INDEX) | st.integers(MAX_INDEX, MAX_INDEX + 2))
    rank = draw(st.none() | (wide if world is None else st.integers(0, world - 1)))
    first, last = sorted((draw(wide), draw(wide)))
    return dict(
        role=draw(plain_labels),
        stage=draw(st.none() | plain_labels),
        step=draw(st.none() | wide),
        rank=rank,
        world_size=world,
        replica=draw(st.none() | wide),
        window=draw(st.none() | st.just((first, last))),
        part=draw(st.none() | wide),
        host=draw(plain_labels),
        pid=draw(st.integers(0, 2**32 - 1)),
        ext=draw(st.sampled_from([".pt.trace.json.gz", ".nsys-rep", ".trace.json.gz"])),
    )


class TestWideNames:
    """Indices past the padded six digits widen the name; in-range names are unchanged."""

    @settings(deadline=None)
    @given(fields=runtime_names())
    def test_round_trip_against_oracle(self, fields: dict[str, Any]) -> None:
        """Every runtime-shaped name formats as the grammar says, fits 255 bytes, parses back."""
        name = TraceName(time_ms=0, **fields)
        text = name.format()
        assert text == oracle_name(stamp="19700101T000000000", **fields)
        assert len(text.encode()) <= MAX_NAME_BYTES
        assert TraceName.parse(text) == name

    @settings(deadline=None)
    @given(step=st.integers(0, MAX_INDEX))
    def test_in_range_steps_keep_six_digits(self, step: int) -> None:
        """Up to 999999 a step is written zero-padded to exactly six digits, as before."""
        text = TraceName(role="a", step=step, host="h", pid=1, time_ms=0).format()
        assert text.split("_")[1] == "step" + "0" * (6 - len(str(step))) + str(step)

    @pytest.mark.parametrize(
        ("step", "segment"), [(999_999, "step999999"), (1_000_000, "step1000000"), (MAX_WIDE_INDEX, "step999999999999")]
    )
    def test_wide_step_segment(self, step: int, segment: str) -> None:
        """More digits, no padding beyond six, and parse reads them back."""
        name = TraceName(role="a", step=step, rank=0, world_size=2_000_000, host="h", pid=1, time_ms=0)
        assert name.format() == f"a_{segment}_rank0-of-2000000_h_pid1_19700101T000000000.pt.trace.json.gz"
        assert TraceName.parse(name.format()) == name

    def test_non_canonical_wide_step_is_rejected(self) -> None:
        """A zero-padded wide number is not canonical, so parse still accepts one spelling only."""
        assert TraceName.try_parse("a_step01000000_h_pid1_19700101T000000000.json") is None

    def test_name_over_255_bytes_is_refused(self) -> None:
        """Every field wide at once would not fit a file name: refused at construction."""
        with pytest.raises(ConfigError, match="255"):
            TraceName(
                role="r" * 30,
                stage="s" * 30,
                step=MAX_WIDE_INDEX,
                rank=0,
                world_size=MAX_WIDE_INDEX,
                tp=MAX_WIDE_INDEX,
                pp=MAX_WIDE_INDEX,
                dp=MAX_WIDE_INDEX,
                cp=MAX_WIDE_INDEX,
                ep=MAX_WIDE_INDEX,
                replica=MAX_WIDE_INDEX,
                window=(0, MAX_WIDE_INDEX),
                part=MAX_WIDE_INDEX,
                host="h" * 30,
                pid=1,
                time_ms=0,
            )

    @pytest.mark.parametrize("field", ["step", "part", "replica"])
    def test_beyond_wide_is_refused(self, field: str) -> None:
        from profdsl.core import _naming as naming

        assert naming.MAX_WIDE_INDEX == MAX_WIDE_INDEX
        with pytest.raises(ConfigError, match=f"TraceName.{field}"):
            TraceName(role="a", host="h", pid=1, time_ms=0, **{field: MAX_WIDE_INDEX + 1})


class TestWideRuntime:
    """Steps past 999999 and world sizes past 999999 are profiled, named and planned."""

    @pytest.mark.parametrize("discrete", [False, True])
    def test_step_of_a_million(self, tmp_path: Path, discrete: bool) -> None:
        step = 1_234_567
        cfg = config(tmp_path, steps=[step], ranks=[3], discrete=discrete)
        with Profiler(cfg, role="actor", rank=3, world_size=2_000_000) as profiler:
            one_step(profiler, step)
        [record] = records(tmp_path, "trace")
        assert record["status"] == "ok", record
        name = TraceName.parse(record["path"])
        assert (name.step, name.rank, name.world_size) == (step, 3, 2_000_000)
        assert "_step1234567_rank3-of-2000000_" in record["path"]

    def test_rollout_window_at_step_a_million(self, tmp_path: Path) -> None:
        """The engine traces of step 1000000 move in under a wide name; nothing escapes."""
        step = 1_000_000
        cfg = config(tmp_path / "p", steps=[step], rollout=RolloutOptions(flush_wait_s=5))
        launch = vllm_launch(cfg, 0, replica_world_size=1, num_replicas=1, version="0.33.0")
        engine = VllmEngine(FakeVllmLLM(launch.engine_args.get("profiler_config"), tp=1, platform="cuda"))
        with Profiler(cfg, role="trainer", rank=0, world_size=1) as profiler:
            with profiler.step(step), rollout_window([engine], replica_world_size=1):
                pass
        [moved] = [r for r in read_manifest(cfg.save_path) if r["kind"] == "rollout"]
        assert moved["status"] == "ok" and moved["step"] == step
        assert TraceName.parse(moved["path"]).step == step

    def test_config_refuses_steps_and_ranks_no_name_can_hold(self) -> None:
        with pytest.raises(ConfigError, match="ProfilerConfig.steps"):
            ProfilerConfig(steps=[MAX_WIDE_INDEX + 1])
        with pytest.raises(ConfigError, match="ProfilerConfig.ranks"):
            ProfilerConfig(ranks=[MAX_WIDE_INDEX])
        with pytest.raises(ConfigError, match="FinishHook.ranks"):
            FinishHook(ranks=[10**30])
        assert ProfilerConfig(steps=[MAX_WIDE_INDEX]).steps == (MAX_WIDE_INDEX,)

    def test_preview_of_a_wide_run(self) -> None:
        found = preview(ProfilerConfig(enable=True, steps=[2_000_000]), world_size=3_000_000)
        assert "_step2000000_rank0-of-3000000_" in found.example

    def test_plan_command(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`profdsl plan` prints a wide plan, and refuses an impossible world size in one line."""
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"enable": True, "steps": [1_000_000]}))
        assert cli_main(["plan", str(path), "--world-size", "2000000"]) == 0
        assert "_step1000000_rank0-of-2000000_" in capsys.readouterr().out
        assert cli_main(["plan", str(path), "--world-size", str(MAX_WIDE_INDEX + 1)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "world_size" in err


class TestRefusedAtConstruction:
    """Values that would fail at run time are refused when the config is built, naming the field."""

    def test_absurd_hook_timeout(self) -> None:
        with pytest.raises(ConfigError, match="FinishHook.timeout_s"):
            FinishHook(cmd="true", timeout_s=1e300, background=True)
        for huge in (10**12, 10**400, float("nan")):
            with pytest.raises(ConfigError, match="FinishHook.timeout_s"):
                ProfilerConfig.from_mapping({"finish_hook": {"cmd": "true", "timeout_s": huge}})
        for field in ("start_timeout_s", "stop_timeout_s", "flush_wait_s"):
            with pytest.raises(ConfigError, match=f"RolloutOptions.{field}"):
                RolloutOptions(**{field: 1e300})

    def test_replica_world_size_that_names_cannot_hold(self) -> None:
        from profdsl.config._checks import MAX_WIDE_INDEX

        engines = [object(), object()]
        rollout_window(engines, replica_world_size=MAX_WIDE_INDEX // 2)
        with pytest.raises(ConfigError, match="replica_world_size"):
            rollout_window(engines, replica_world_size=MAX_WIDE_INDEX // 2 + 1)

    def test_plan_with_absurd_mini_batches_is_a_usage_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = tmp_path / "c.json"
        path.write_text(json.dumps({"enable": True, "steps": [1]}))
        assert cli_main(["plan", str(path), "--world-size", "2", "--mini-batches", str(10**10)]) == 2
        err = capsys.readouterr().err
        assert "mini_batches" in err and len(err.strip().splitlines()) == 1

    def test_longest_hook_timeout_closes(self, tmp_path: Path) -> None:
        """The largest timeout accepted works end to end: a background hook, then close()."""
        from profdsl.config._checks import MAX_SECONDS

        hook = FinishHook(cmd='touch "$PROFDSL_SAVE_PATH/../hook-ran"', timeout_s=MAX_SECONDS, background=True)
        profiler = Profiler(config(tmp_path / "p", finish_hook=hook), role="actor", rank=0, world_size=1)
        one_step(profiler, 1)
        profiler.close()
        assert (tmp_path / "hook-ran").exists()
        assert [h["status"] for h in hooks(tmp_path / "p")] == ["ok"]

    @pytest.mark.parametrize("contents", [[["cpu"]], [{"cpu": 1}], [None], [1], [("cpu",)]], ids=repr)
    def test_contents_that_are_not_names(self, contents: Any) -> None:
        with pytest.raises(ConfigError, match="TorchOptions.contents"):
            TorchOptions(contents=contents)
        with pytest.raises(ConfigError, match="TorchOptions.contents"):
            ProfilerConfig.from_mapping({"torch": {"contents": contents}})

    @pytest.mark.parametrize(
        ("build", "field"),
        [
            (lambda: ProfilerConfig(save_path="a\x00b"), "ProfilerConfig.save_path"),
            (lambda: ProfilerConfig(save_path=Path("a\x00b")), "ProfilerConfig.save_path"),
            (lambda: ProfilerConfig(nsys_report_dir="a\x00b"), "ProfilerConfig.nsys_report_dir"),
            (lambda: FinishHook(cmd="echo \x00"), "FinishHook.cmd"),
            (lambda: ProfilerConfig.from_mapping({"finish_hook": {"cmd": "ls\x00"}}), "FinishHook.cmd"),
        ],
    )
    def test_nul_in_config(self, build: Any, field: str) -> None:
        with pytest.raises(ConfigError, match=field):
            build()

    @pytest.mark.parametrize("role", ["act\x00or", "", 3, None])
    def test_bad_role(self, tmp_path: Path, role: Any) -> None:
        """A role that is no usable name is refused by the Profiler, naming the argument."""
        for enable in (False, True):
            with pytest.raises(ConfigError, match="role"):
                Profiler(config(tmp_path, enable=enable), role=role, rank=0, world_size=1)


# ----------------------------------------------------------------------------------------------
# 4. Junk in the rank variables of the environment
# ----------------------------------------------------------------------------------------------

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
junk = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["-1", "", "abc", " ", "1.5", "0x1", "\u0663", "99999999999999999999", "0", "3", "7"]),
)


def environment(**values: str | None) -> mock._patch[Any]:
    """os.environ with the rank variables set to ``values`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    env.update({k: v for k, v in values.items() if v is not None})
    return mock.patch.dict(os.environ, env, clear=True)


class TestRankEnvironment:
    """Rank variables are read only when needed; a malformed one is logged once and ignored."""

    @pytest.mark.parametrize("local_rank", ["-1", "", "abc"])
    @pytest.mark.parametrize("enable", [False, True])
    def test_malformed_local_rank(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, local_rank: str, enable: bool
    ) -> None:
        """Explicit rank and world size: LOCAL_RANK is not even read, and profiling works."""
        caplog.set_level(logging.WARNING, logger="profdsl")
        with environment(LOCAL_RANK=local_rank, RANK="junk", WORLD_SIZE="-4"):
            with Profiler(config(tmp_path, enable=enable), role="actor", rank=0, world_size=2) as p:
                one_step(p, 1)
        assert (p.rank, p.world_size) == (0, 2)
        assert len(records(tmp_path, "trace")) == (1 if enable else 0)
        assert caplog.records == []

    @settings(deadline=None, max_examples=60)
    @given(rank=junk, world_size=junk, local_rank=junk)
    def test_junk_environment_never_raises(self, rank: str, world_size: str, local_rank: str) -> None:
        """Whatever RANK / WORLD_SIZE / LOCAL_RANK hold (NUL excepted: no environment holds one),
        a profiler is built with a valid rank and world size."""
        values = {k: v.replace("\x00", "") for k, v in zip(RANK_VARIABLES, (rank, world_size, local_rank))}
        with environment(**values):
            profiler = Profiler(ProfilerConfig(enable=False), role="actor")
            profiler.close()
            assert 0 <= profiler.rank < profiler.world_size
            explicit = Profiler(ProfilerConfig(enable=False), role="actor", rank=2, world_size=5)
            explicit.close()
            assert (explicit.rank, explicit.world_size) == (2, 5)

    @pytest.mark.parametrize(
        ("env", "expected", "named"),
        [
            ({"RANK": "abc", "WORLD_SIZE": "4"}, (0, 4), "RANK"),
            ({"RANK": "3", "WORLD_SIZE": "many"}, (0, 1), "WORLD_SIZE"),
            ({"RANK": "", "WORLD_SIZE": "2"}, (0, 2), "RANK"),
            ({"RANK": "4", "WORLD_SIZE": "4"}, (0, 1), "RANK"),
            ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 2), None),
        ],
    )
    def test_needed_and_malformed_is_logged_once(
        self,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
        env: dict[str, str],
        expected: tuple[int, int],
        named: str | None,
    ) -> None:
        """A malformed variable is ignored (the other one still counts); a pair that does not fit
        (RANK >= WORLD_SIZE) gives way to rank 0 of 1. Each is logged once per process, naming the
        variable; LOCAL_RANK, which the profiler does not need, is not read."""
        caplog.set_level(logging.WARNING, logger="profdsl")
        with environment(**env, LOCAL_RANK="junk"):
            logged = []
            for _ in range(3):
                profiler = Profiler(config(tmp_path), role="actor")
                profiler.close()
                assert (profiler.rank, profiler.world_size) == expected
                logged.append([r.getMessage() for r in caplog.records])
        assert logged[0] == logged[1] == logged[2]
        assert not any("LOCAL_RANK" in m for m in logged[0])
        if named is None:
            assert logged[0] == []
        else:
            assert logged[0] and all("environment variable" in m for m in logged[0])
            assert any(named in m for m in logged[0])


# ----------------------------------------------------------------------------------------------
# 10. A relative save_path and a working directory that changes
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    """Work in ``tmp_path/a`` (restored afterwards)."""
    before = os.getcwd()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    os.chdir(tmp_path / "a")
    try:
        yield tmp_path
    finally:
        os.chdir(before)


class TestRelativeSavePath:
    """A relative save_path is resolved once, where the config is built."""

    def test_config_holds_an_absolute_path(self, cwd: Path) -> None:
        cfg = ProfilerConfig(save_path="runs/../out")
        assert cfg.save_path == str(cwd / "a" / "out")
        assert ProfilerConfig().save_path == str(cwd / "a" / "profiles")
        os.chdir(cwd / "b")
        assert ProfilerConfig.from_mapping(cfg.to_mapping()) == cfg

    def test_chdir_between_steps(self, cwd: Path) -> None:
        """Two roles, the working directory changing between steps: every trace, the manifest and
        the hook's view are in the one folder resolved at construction; the hook runs once, after
        the last role's last trace."""
        cmd = 'ls "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../listing.txt"'
        cfg = config("rel", steps=[1, 2], discrete=True, finish_hook=FinishHook(cmd=cmd))
        actor = Profiler(cfg, role="actor", rank=0, world_size=1)
        ref = Profiler(cfg, role="ref", rank=0, world_size=1)
        for step in (1, 2):
            os.chdir(cwd / ("a" if step == 1 else "b"))
            one_step(actor, step, "update")
            one_step(ref, step, "ref")
        actor.close()
        ref.close()
        folder = cwd / "a" / "rel"
        assert not (cwd / "b" / "rel").exists()
        recorded = sorted((r["role"], r["step"]) for r in records(folder, "trace"))
        assert recorded == [("actor", 1), ("actor", 2), ("ref", 1), ("ref", 2)]
        assert len(trace_files(folder)) == 4
        assert sorted(h["status"] for h in hooks(folder)) == ["ok", "skipped"]  # one run per process
        listing = (cwd / "a" / "listing.txt").read_text().split()
        assert sorted(n for n in listing if n.endswith(".json.gz")) == sorted(p.name for p in trace_files(folder))


@pytest.mark.slow
def test_ray_worker_writes_where_the_driver_resolved(ray_cluster: str, cwd: Path) -> None:
    """A config built on the driver with a relative save_path reaches a worker (whose working
    directory differs) as the driver's absolute path; the worker's traces land there, for a step
    number the trainer got as numpy or tensor."""
    from profdsl.ray import ProfiledWorker, RayStepProfiler

    elsewhere = str(cwd / "b")

    class Worker(ProfiledWorker):  # defined here: shipped to the worker by value
        def __init__(self, cfg: ProfilerConfig) -> None:
            os.chdir(elsewhere)
            self.init_profiler(cfg, role="actor", rank=0, world_size=1)

        def save_path(self) -> tuple[str, str]:
            return self.profiler("actor").config.save_path, os.getcwd()

        @profile_stage("update_actor", role="actor")
        def update(self) -> None:
            torch.ones(4).mul(2)

    import ray

    cfg = config("rel", steps=[1, 2], discrete=True)
    worker = ray.remote(num_cpus=0)(Worker).remote(cfg)
    assert ray.get(worker.save_path.remote()) == (str(cwd / "a" / "rel"), elsewhere)
    trainer = RayStepProfiler(cfg, workers=[worker])
    for step in (torch.tensor(1), torch.tensor(2)):
        with trainer.step(step):
            ray.get(worker.update.remote())
    trainer.close()
    assert trainer.errors == []
    assert sorted(r["step"] for r in records(cwd / "a" / "rel", "trace")) == [1, 2]
    assert not (cwd / "b" / "rel").exists()
