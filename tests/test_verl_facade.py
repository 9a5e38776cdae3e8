"""verl's profiler surface over profdsl: a worker written the way verl's workers are switches by
import, and writes what profdsl's own DSL writes for the same config, without verl's bugs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from profdsl import ConfigError, Profiler, ProfilerConfig, mini_batch_window, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.integrations.verl import DistProfiler, DistProfilerExtension, profiler_configs
from profdsl.manifest import read_manifest

from .traces import names, parsed

torch = pytest.importorskip("torch")


def compute(data: Any) -> int:
    torch.ones(16).mul(2).sum()
    return len(data) if isinstance(data, list) else 1


# --- a worker written as verl writes its workers (verl/workers/engine_workers.py) ----------------


class TrainingWorker(DistProfilerExtension):
    """verl's inner engine worker: its own DistProfiler, never started by the trainer."""

    def __init__(self, config: Any, rank: int, world_size: int) -> None:
        DistProfilerExtension.__init__(
            self,
            DistProfiler(
                rank=rank, config=config, tool_config=None, save_file_prefix="language_model", world_size=world_size
            ),
        )

    def train_mini_batch(self, data: list[Any]) -> list[int]:
        outputs = []
        for batch_idx, mini_batch in enumerate(data):
            with torch.profiler.record_function(f"mini_batch{batch_idx}"):
                outputs.append(self.train_batch(mini_batch))
            self.profiler.step()
        return outputs

    @DistProfiler.annotate(color="red", role="train_batch")
    def train_batch(self, data: Any) -> int:
        return compute(data)


class ActorRolloutRefWorker(DistProfilerExtension):
    def __init__(self, config: Any, rank: int, world_size: int, inner_config: Any = None) -> None:
        self.actor = TrainingWorker(inner_config, rank, world_size)
        DistProfilerExtension.__init__(
            self,
            DistProfiler(rank=rank, config=config, tool_config=None, save_file_prefix="actor", world_size=world_size),
        )

    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
    def compute_ref_log_prob(self, data: Any) -> int:
        return compute(data)

    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
    def compute_log_prob(self, data: Any) -> int:
        return compute(data)

    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self, data: list[Any]) -> list[int]:
        return self.actor.train_mini_batch(data)


# --- the same worker in profdsl's own DSL ---------------------------------------------------------


class DslWorker:
    def __init__(self, config: ProfilerConfig, rank: int, world_size: int) -> None:
        self.profiler = Profiler(config, role="actor", rank=rank, world_size=world_size)

    @profile_stage("ref_compute_log_prob", color="#808000")
    def compute_ref_log_prob(self, data: Any) -> int:
        return compute(data)

    @profile_stage("actor_compute_log_prob", color="blue")
    def compute_log_prob(self, data: Any) -> int:
        return compute(data)

    @profile_stage("actor_update", scheduled=True, color="red")
    def update_actor(self, data: list[Any]) -> list[int]:
        return [compute(mb) for mb in mini_batch_window(data)]

    def start_profile(self, **kwargs: Any) -> None:
        self.profiler.start(kwargs["profile_step"])

    def stop_profile(self, run_command: bool = True) -> None:
        self.profiler.stop()


def drive(worker: Any, steps: list[int], mini_batches: int) -> list[Any]:
    """verl's trainer loop: start_profile / stages / stop_profile on each step (all profiled)."""
    results = []
    for step in steps:
        worker.start_profile(role="train", profile_step=step)
        results.append(worker.compute_ref_log_prob([1, 2]))
        results.append(worker.compute_log_prob([1, 2]))
        results.append(worker.update_actor(list(range(mini_batches))))
        worker.stop_profile(run_command=step == steps[-1])
    return results


def written(folder: Path) -> list[dict[str, Any]]:
    """What a run wrote, without what differs between two runs (times, sizes, the folder)."""
    out = []
    for name, trace in parsed(folder):
        meta = dict(trace["profdsl"])
        meta.pop("blocked_ms", None)
        meta.pop("export_ms", None)
        out.append(
            {
                "name": attrs.evolve(name, time_ms=0),
                "meta": meta,
                "mini_batches": sorted(set(names(trace, "mini_batch"))),
                "stages": sorted({n for n in names(trace) if n in STAGES}),
            }
        )
    return sorted(out, key=lambda w: (w["name"].step, w["name"].stage or "", w["name"].window or (0, 0)))


STAGES = {"ref_compute_log_prob", "actor_compute_log_prob", "actor_update", "train_batch"}
#: What differs between two runs: paths, times, sizes, and profiling's cost and its parts (issue 29
#: item 6: which run's session was the process's first decides init_ms or start_ms).
DROP = {
    "path",
    "time_ms",
    "bytes",
    "json_bytes",
    "export_ms",
    "blocked_ms",
    "export_cpu_ms",
    "init_ms",
    "start_ms",
    "stop_ms",
    "wait_ms",
}


def comparable_records(folder: Path) -> list[dict[str, Any]]:
    """The manifest records without what differs between two runs (paths, times, sizes), in order."""
    return sorted(
        ({k: v for k, v in r.items() if k not in DROP} for r in read_manifest(folder)),
        key=lambda r: (r.get("step") or 0, r.get("stage") or "", r.get("window") or [0, 0]),
    )


def verl_actor_config(save_path: Path, *overrides: str) -> ProfilerConfig:
    """The actor's config mapped from verl's keys (tests/test_verl_config.py maps the same keys in
    the YAML verl ships)."""
    flat = {
        "global_profiler.tool": "torch",
        "global_profiler.steps": [1, 2],
        "global_profiler.save_path": str(save_path),
        "actor_rollout_ref.actor.profiler.enable": True,
        "actor_rollout_ref.actor.profiler.tool_config.torch.contents": ["cpu"],
    }
    for item in overrides:
        key, value = item.split("=")
        flat[key] = {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return profiler_configs(tree)["actor"]


T = "actor_rollout_ref.actor.profiler.tool_config.torch"
MODES = {
    "discrete, 4 mini-batches, active=2 (verl's B1)": ((f"{T}.discrete=true", f"{T}.schedule.active=2"), 4),
    "discrete, 2 mini-batches, wait=1 active=2 (verl's B2)": (
        (f"{T}.discrete=true", f"{T}.schedule.wait=1", f"{T}.schedule.active=2"),
        2,
    ),
    "continuous, 4 mini-batches, active=2": ((f"{T}.schedule.active=2",), 4),
    "continuous, no schedule": ((), 3),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_facade_writes_what_the_dsl_writes(tmp_path: Path, mode: str) -> None:
    overrides, mini_batches = MODES[mode]
    config = verl_actor_config(tmp_path / "verl", *overrides)
    facade = ActorRolloutRefWorker(config, rank=0, world_size=2, inner_config=config)
    got = drive(facade, [1, 2], mini_batches)
    facade.profiler.close()
    facade.actor.profiler.close()
    dsl_config = attrs.evolve(config, save_path=str(tmp_path / "dsl"))
    dsl = DslWorker(dsl_config, rank=0, world_size=2)
    assert drive(dsl, [1, 2], mini_batches) == got == [2, 2, [1] * mini_batches] * 2
    dsl.profiler.close()

    ours, theirs = written(tmp_path / "verl"), written(tmp_path / "dsl")
    for entry in ours + theirs:
        entry["meta"].pop("config_hash")  # the save_path differs, and with it the hash
    assert ours == theirs
    assert ours, "nothing was written"
    mine, dsl_records = comparable_records(tmp_path / "verl"), comparable_records(tmp_path / "dsl")
    for r in mine + dsl_records:
        r.pop("config_hash", None)
    assert mine == dsl_records

    # none of verl's bugs: every window holds exactly its mini-batches, nothing empty or repeated
    windows = [w["name"].window for w in ours if w["name"].window]
    for entry in ours:
        window = entry["name"].window
        if window is not None:
            assert entry["mini_batches"] == [f"mini_batch{i}" for i in range(window[0], window[1] + 1)]
            assert entry["meta"]["regions"]["mini_batches"] == ["mini_batch"]
    assert len({w["name"].format() for w in ours}) == len(ours)
    assert len(windows) == len(set(zip(windows, [w["name"].step for w in ours if w["name"].window])))
    if "B1" in mode:
        update = [w["name"].window for w in ours if w["name"].stage == "actor-update"]
        assert update == [(0, 1), (2, 3), (0, 1), (2, 3)]
    if "B2" in mode:
        assert [w["name"].window for w in ours if w["name"].stage == "actor-update"] == [(1, 1), (1, 1)]
    if mode.startswith("continuous, 4"):
        assert [w["meta"]["windows"] for w in ours] == [
            [{"role": "actor", "step": s, "window": [0, 1]}] for s in (1, 2)
        ]
        assert [w["mini_batches"] for w in ours] == [["mini_batch0", "mini_batch1"]] * 2


def test_a_verl_role_block_with_its_steps(tmp_path: Path) -> None:
    """verl's own role block (a mapping, as omega_conf_to_dataclass gives a Mapping) and its
    tool_config passed apart, with the steps the trainer knows."""
    block = {
        "_target_": "verl.utils.profiler.ProfilerConfig",
        "tool": "torch",
        "enable": True,
        "all_ranks": False,
        "ranks": [1],
        "save_path": str(tmp_path),
        "relocate_results": False,
        "finish_hook_cmd": None,
        "finish_hook_all_ranks": False,
        "finish_hook_ranks": [],
        "tool_config": {},
    }
    tool_config = {
        "_target_": "verl.utils.profiler.config.TorchProfilerToolConfig",
        "contents": ["cpu"],
        "discrete": True,
        "schedule": {"active": 0},
    }
    profiler = DistProfiler(
        rank=1, config=block, tool_config=tool_config, save_file_prefix="ref", steps=[3], world_size=2
    )
    assert profiler.check_enable() and profiler.check_this_rank() and profiler.is_discrete_mode()
    assert not profiler.check_this_step()
    profiler.start(profile_step=3)
    assert profiler.check_this_step()
    with profile_stage("ref_compute_log_prob"):
        compute([1])
    profiler.stop()
    profiler.close()
    [(name, _)] = parsed(tmp_path)
    assert (name.role, name.stage, name.step, name.rank) == ("ref", "ref-compute-log-prob", 3, 1)
    with pytest.raises(ConfigError, match="holds no steps"):
        DistProfiler(rank=0, config=block, save_file_prefix="ref")


def test_disabled_or_absent_configs_never_crash(tmp_path: Path) -> None:
    """verl's B7: a disabled torch role without a tool_config raised AttributeError."""
    for config in (None, {"tool": "torch", "enable": False}, {"tool": None, "enable": False, "tool_config": None}):
        worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
        assert drive(worker, [1], 2) == [2, 2, [1, 1]]
        assert not worker.profiler.check_enable()
    assert not any(tmp_path.iterdir())


def test_a_failing_save_path_never_breaks_a_stage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """verl's B6: a discrete stage whose trace cannot be written still runs, once, and returns."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = attrs.evolve(
        verl_actor_config(tmp_path / "unused", "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true"),
        save_path=str(blocker / "sub"),
    )
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        assert drive(worker, [1, 2], 3) == [2, 2, [1, 1, 1]] * 2
    worker.profiler.close()
    assert "could not write" in caplog.text


def test_hook_runs_after_the_last_step_with_verls_variables(tmp_path: Path) -> None:
    """finish_hook_cmd using $VERL_PROFILE_* runs once, after the last profiled step, even when
    the trainer says run_command=False there (verl's B4)."""
    cmd = 'echo "$VERL_PROFILE_RANK $VERL_PROFILE_ROLE" > "$VERL_PROFILE_SAVE_PATH/hook.txt"'
    config = verl_actor_config(tmp_path, f"global_profiler.finish_hook_cmd={cmd}")
    # the inner TrainingWorker gets the same config, as in verl, and is never started
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1, inner_config=config)
    for step in (1, 2):
        worker.start_profile(role="train", profile_step=step)
        worker.update_actor([1, 2])
        worker.stop_profile(run_command=False)
    assert (tmp_path / "hook.txt").read_text().split() == ["0", "actor"]
    worker.profiler.close()
    worker.actor.profiler.close()
    assert [r["exit_code"] for r in read_manifest(tmp_path) if r["kind"] == "hook"] == [0]


def test_start_without_a_step_profiles_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Once no configured step is left (a step-less start() begins the next configured one, as
    verl's SFT trainers need: tests/test_verl_trainers.py), it profiles nothing, and says so."""
    worker = ActorRolloutRefWorker(verl_actor_config(tmp_path), rank=0, world_size=1)
    drive(worker, [1, 2], 1)
    # the last profiled step returns once torch's events are on disk; the writer finishes the
    # trace behind it (docs/architecture.md, "What a caller waits for")
    assert PROCESS.writer.wait(timeout=120)
    before = len(parsed(tmp_path))
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        worker.start_profile()
        assert worker.compute_log_prob([1]) == 1
        worker.stop_profile()
    worker.profiler.close()
    assert "without profile_step" in caplog.text and len(parsed(tmp_path)) == before


def test_fused_roles_stopped_in_any_order(tmp_path: Path) -> None:
    """verl's R5: two roles in one process share one session; stopping the non-owner first is fine."""
    config = verl_actor_config(tmp_path)
    actor = DistProfiler(rank=0, config=config, save_file_prefix="actor", world_size=1)
    critic = DistProfiler(rank=0, config=config, save_file_prefix="critic", world_size=1)
    actor.start(profile_step=1)
    critic.start(profile_step=1)
    compute([1])
    critic.stop()
    actor.stop()
    actor.close()
    critic.close()
    [(name, trace)] = parsed(tmp_path)
    assert trace["profdsl"]["roles"] == ["actor", "critic"]


def test_step_outside_a_scheduled_stage_counts_mini_batches(tmp_path: Path) -> None:
    """verl's critic and SFT loops call step() outside an annotated stage: the mini-batches are
    numbered and listed in the continuous trace."""
    config = verl_actor_config(tmp_path)
    worker = TrainingWorker(config, rank=0, world_size=1)
    worker.start_profile(profile_step=1)
    worker.train_mini_batch([1, 2, 3])
    worker.stop_profile()
    worker.profiler.close()
    [(_, trace)] = parsed(tmp_path)
    assert trace["profdsl"]["windows"] == [{"role": "language_model", "step": 1, "window": [0, 2]}]
    assert set(names(trace, "train_batch")) == {"train_batch"}


def test_stages_on_threads_keep_their_own_mini_batches(tmp_path: Path) -> None:
    """Scheduled stages on two threads at once: each step() ends its own thread's mini-batch
    (scopes live on each context's stack); a stage refused the capture drives nobody's windows."""
    config = verl_actor_config(
        tmp_path,
        "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true",
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active=8",
    )
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
    worker.start_profile(profile_step=1)
    errors: list[BaseException] = []

    def run(target: Callable[[], object]) -> None:
        try:
            target()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(lambda: worker.update_actor([1, 2, 3]),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    worker.stop_profile()
    worker.profiler.close()
    assert not errors and not any(t.is_alive() for t in threads)
    updates = [(n, t) for n, t in parsed(tmp_path) if n.stage == "actor-update"]
    assert updates and all(n.window == (0, 2) for n, _ in updates)
    assert all(sorted(names(t, "mini_batch")) == ["mini_batch0", "mini_batch1", "mini_batch2"] for _, t in updates)


def test_annotate_colours_and_names() -> None:
    with pytest.raises(ConfigError, match="DistProfiler.annotate color"):
        DistProfiler.annotate(color="not-a-colour")
    calls = []

    class Worker:
        profiler = None

        @DistProfiler.annotate(message="explicit")
        def method(self, x: int) -> int:
            calls.append(x)
            return x + 1

    assert Worker().method(1) == 2 and Worker.method.__name__ == "method" and calls == [1]


def test_critic_discrete_mini_batches_never_collide(tmp_path: Path) -> None:
    """verl's B8: the critic's train_batch (annotated without scheduled) in discrete mode writes a
    trace per mini-batch; verl's names differed only by the millisecond. Here each is its own
    file, however fast they come, all recorded."""
    config = verl_actor_config(tmp_path, f"{T}.discrete=true")
    critic = TrainingWorker(config, rank=0, world_size=1)
    critic.start_profile(profile_step=1)
    for _ in range(2):
        critic.train_mini_batch([1, 2, 3])
    critic.stop_profile()
    critic.profiler.close()
    files = parsed(tmp_path)
    assert len(files) == 6 and len({n.format() for n, _ in files}) == 6
    assert all(n.stage == "train-batch" for n, _ in files)
    assert len([r for r in read_manifest(tmp_path) if r["kind"] == "trace" and r["status"] == "ok"]) == 6


# --- verl's own dataclasses, as verl's workers build them -----------------------------------------


def verl_profiler_dataclasses() -> Any:
    """verl's ``verl/utils/profiler/config.py`` (``ProfilerConfig``, ``TorchProfilerToolConfig``,
    ...), loaded from the installed verl without importing ``verl`` itself (whose ``__init__``
    needs verl's whole dependency tree: the test setup installs it without dependencies)."""
    import importlib.util
    import sys
    import types

    pytest.importorskip("omegaconf")
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is installed by the test setup: pip install --no-deps -c .ci/constraints.txt verl")
    root = Path(next(iter(spec.submodule_search_locations)))
    saved = {name: sys.modules.get(name) for name in ("verl", "verl.base_config")}
    package = types.ModuleType("verl")
    package.__path__ = []
    sys.modules["verl"] = package
    try:
        modules = {}
        for name, where in (
            ("verl.base_config", "base_config.py"),
            ("verl_profiler_config", "utils/profiler/config.py"),
        ):
            found = importlib.util.spec_from_file_location(name, root / where)
            assert found is not None and found.loader is not None
            modules[name] = importlib.util.module_from_spec(found)
            sys.modules[name] = modules[name]
            found.loader.exec_module(modules[name])
        return modules["verl_profiler_config"]
    finally:
        sys.modules.pop("verl_profiler_config", None)
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_verls_own_dataclasses_as_its_workers_build_them(tmp_path: Path) -> None:
    """verl's workers hand ``DistProfiler`` its ``ProfilerConfig`` dataclass, whose unset fields
    (``tool``, ``save_path``, ``tool_config``) hold OmegaConf's ``'???'``, and the tool's own
    dataclass apart: the disabled default maps to nothing profiled, an enabled one maps its tool
    config, and ``'???'`` is never taken for a value."""
    verl = verl_profiler_dataclasses()
    assert verl.ProfilerConfig().tool_config == "???"
    off = DistProfiler(rank=0, config=verl.ProfilerConfig(), tool_config=None, save_file_prefix="actor")
    assert not off.check_enable() and not off.check_this_rank()
    torch_tool = verl.TorchProfilerToolConfig(
        contents=["cpu"], discrete=True, schedule=verl.TorchProfilerScheduleConfig(active=2, repeat=1)
    )
    on = DistProfiler(
        rank=0,
        config=verl.ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path)),
        tool_config=torch_tool,
        save_file_prefix="actor",
        steps=[1],
        world_size=1,
    )
    assert on.config.discrete and on.config.torch.contents == {"cpu"}
    assert (on.config.torch.schedule.active, on.config.torch.schedule.repeat) == (2, 1)
    nsys = DistProfiler(
        rank=0,
        config=verl.ProfilerConfig(tool="nsys", enable=True, save_path=str(tmp_path)),
        tool_config=verl.NsightToolConfig(discrete=True),
        steps=[1],
        world_size=1,
    )
    assert nsys.config.tool == "nsys" and nsys.config.discrete
    # the disabled default with a tool config passed anyway (tool '???': nothing to put it under)
    assert not DistProfiler(rank=0, config=verl.ProfilerConfig(), tool_config=torch_tool).check_enable()
    # save_path left at '???' inherits as verl's YAML does (global_profiler.save_path's default)
    unset = DistProfiler(
        rank=0, config=verl.ProfilerConfig(tool="torch", enable=True), tool_config=torch_tool, steps=[1], world_size=1
    )
    assert unset.config.save_path.endswith("outputs/profile")


class TestWorldHoldsTheRank:
    """verl's profiler needs no world size, so its callers (tests, custom drivers) pass none:
    ``DistProfiler(rank=1)`` without ``WORLD_SIZE`` is rank 1 of a world of 2, not an error."""

    def test_rank_without_a_world(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
        monkeypatch.delenv("RANK", raising=False)
        from profdsl.integrations.verl import DistProfiler

        facade = DistProfiler(rank=1, config=None)
        assert (facade.rank, facade.world_size) == (1, 2)

    def test_a_known_world_is_kept(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WORLD_SIZE", "8")
        from profdsl.integrations.verl import DistProfiler

        assert DistProfiler(rank=3, config=None).world_size == 8
        assert DistProfiler(rank=3, config=None, world_size=4).world_size == 4

    def test_a_rank_past_a_known_world_is_still_an_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from profdsl.errors import ConfigError
        from profdsl.integrations.verl import DistProfiler

        with pytest.raises(ConfigError, match="argument rank must be < world size 2"):
            DistProfiler(rank=3, config=None, world_size=2)

    def test_the_profiler_itself_still_asks(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """profdsl's own Profiler does not guess a world size: trace names carry it."""
        monkeypatch.delenv("WORLD_SIZE", raising=False)
        from profdsl import Profiler, ProfilerConfig
        from profdsl.errors import ConfigError

        with pytest.raises(ConfigError, match="must be < world size 1"):
            Profiler(ProfilerConfig(), role="actor", rank=1)


def test_rank_without_world_size_infers_a_world_holding_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's tests and custom drivers build DistProfiler(rank=1) with no WORLD_SIZE: the world
    holds the rank (rank + 1), as verl infers, instead of a ConfigError."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    profiler = DistProfiler(rank=1, config=verl_actor_config(tmp_path), save_file_prefix="actor")
    assert (profiler.rank, profiler.world_size) == (1, 2)
    profiler.close()
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ConfigError, match="world size 1"):
        DistProfiler(rank=1, config=verl_actor_config(tmp_path), save_file_prefix="actor")


def test_a_tool_dataclass_inside_verls_profiler_config(tmp_path: Path) -> None:
    """``ProfilerConfig(tool_config=TorchProfilerToolConfig(...))``, the form verl's own tests
    build (and verl accepts): the tool's dataclass where the per-tool mapping would be is that
    tool's config, not "unknown verl key ...tool_config.contents"."""
    verl = verl_profiler_dataclasses()
    torch_tool = verl.TorchProfilerToolConfig(
        contents=["cpu"], discrete=True, schedule=verl.TorchProfilerScheduleConfig(active=2, repeat=1)
    )
    inside = verl.ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path), tool_config=torch_tool)
    on = DistProfiler(rank=0, config=inside, save_file_prefix="actor", steps=[1], world_size=1)
    assert on.config.discrete and on.config.torch.contents == {"cpu"}
    assert (on.config.torch.schedule.active, on.config.torch.schedule.repeat) == (2, 1)
    nsys = verl.ProfilerConfig(tool="nsys", enable=True, save_path=str(tmp_path), tool_config=verl.NsightToolConfig())
    assert DistProfiler(rank=0, config=nsys, steps=[1], world_size=1).config.tool == "nsys"
    with pytest.raises(ConfigError, match=r"unknown verl key .*tool_config\.torch\.bogus|tool_config"):
        DistProfiler(rank=0, config={"tool": "torch", "enable": True, "tool_config": {"bogus": 1}}, steps=[1])
