"""verl's profiler configuration mapped to profdsl's, against the YAML verl ships.

verl is installed without its dependencies by the test setup (``.ci/run``, the README's test
command); its trainer config files are read from the installed package with OmegaConf, never by
importing verl (which needs its whole stack)."""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl import ConfigError, ProfilerConfig, RolloutOptions, Schedule
from profdsl.integrations.verl import KEYS, ROLES, key_table, map_block, nsight_options, profiler_configs
from profdsl.integrations.verl._keys import GLOBAL_KEYS, ROLE_KEYS, SCHEDULE_KEYS, TOOL_KEYS
from profdsl.integrations.verl.config import ROLE_PATHS, hook_command

omegaconf = pytest.importorskip("omegaconf")
OmegaConf = omegaconf.OmegaConf

ROOT = Path(__file__).resolve().parent.parent


def verl_root() -> Path:
    spec = importlib.util.find_spec("verl")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is installed by the test setup: pip install --no-deps -c .ci/constraints.txt verl")
    return Path(next(iter(spec.submodule_search_locations)))


def config_dir() -> Path:
    return verl_root() / "trainer" / "config"


def generated() -> list[Path]:
    files = sorted(config_dir().glob("_generated_*_trainer.yaml"))
    assert len(files) >= 4, files  # ppo, megatron, torchtitan, veomni
    return files


@functools.cache
def _loaded(path: Path) -> Any:
    return OmegaConf.load(path)


def load(path: Path, *overrides: str, whole: bool = False) -> dict[str, Any]:
    """The trainer config at ``path`` with Hydra-style ``overrides``, resolved by OmegaConf
    (only the profiler blocks, unless ``whole``: resolving the rest is slow and changes nothing)."""
    cfg = _loaded(path)
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    if whole:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[no-any-return]
    parts: dict[str, Any] = {}
    for path_ in ("global_profiler", *(".".join(p) for p in ROLE_PATHS.values())):
        node = OmegaConf.select(cfg, path_)
        if node is None:
            continue
        target = parts
        *parents, last = path_.split(".")
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = OmegaConf.to_container(node, resolve=True)
    return parts


def profiler_blocks(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every ``profiler`` / ``global_profiler`` mapping in an OmegaConf tree, by dotted path."""
    found = []
    if isinstance(node, omegaconf.DictConfig):
        for key in node.keys():
            child = node._get_node(key)
            where = f"{path}.{key}" if path else str(key)
            if key in ("profiler", "global_profiler") and isinstance(child, omegaconf.DictConfig):
                found.append((where, child))
            if isinstance(child, omegaconf.DictConfig):
                found += profiler_blocks(child, where)
    return found


class TestShippedYaml:
    @pytest.mark.parametrize("index", range(4))
    def test_every_generated_trainer_config_maps(self, index: int) -> None:
        path = generated()[index]
        roles = profiler_configs(load(path, whole=True))
        assert set(roles) == set(ROLES)
        assert not any(c.enable for c in roles.values())  # verl ships profiling off
        assert roles["actor"].save_path == os.path.abspath("outputs/profile")

    def test_every_profiler_block_of_every_yaml_file_maps(self) -> None:
        """Walk every YAML file verl ships and map each profiler block it holds (with the
        global block of the generated trainer config for what a fragment inherits)."""
        global_block = load(generated()[0])["global_profiler"]
        mapped = []
        for path in sorted(verl_root().rglob("*.yaml")):
            tree = OmegaConf.load(path)
            blocks = profiler_blocks(tree)
            if path.parent.name == "profiler":  # profiler/profiler.yaml is a bare role block
                blocks.append(("", tree))
            for where, block in blocks:
                data = OmegaConf.to_container(block, resolve=True)
                label = f"{path.name}:{where or '<file>'}"
                if where.endswith("global_profiler"):
                    profiler_configs({"global_profiler": data})
                elif "actor_rollout_ref" in where or "critic" in where:
                    continue  # inside a whole trainer config: mapped there, as a whole
                else:
                    map_block(data, global_profiler=global_block, rollout=path.parts[-2] == "rollout", where=label)
                mapped.append(label)
        for name in (
            "actor.yaml:profiler",
            "ref.yaml:profiler",
            "critic.yaml:profiler",
            "rollout.yaml:profiler",
            "profiler.yaml:<file>",
            "ppo_trainer.yaml:global_profiler",
        ):
            assert name in mapped, mapped
        whole = [
            p
            for p in verl_root().rglob("*.yaml")
            if any(w == "global_profiler" for w, _ in profiler_blocks(OmegaConf.load(p)))
        ]
        assert len(whole) >= 5  # the generated configs and ppo_trainer.yaml

    @pytest.mark.parametrize("path_index", range(4))
    def test_torch_continuous_on_actor(self, path_index: int) -> None:
        roles = profiler_configs(
            load(
                generated()[path_index],
                "global_profiler.tool=torch",
                "global_profiler.steps=[1,3]",
                "actor_rollout_ref.actor.profiler.enable=true",
                "actor_rollout_ref.actor.profiler.ranks=[0,1]",
            )
        )
        actor = roles["actor"]
        assert (actor.enable, actor.tool, actor.steps, actor.ranks, actor.discrete) == (
            True,
            "torch",
            (1, 3),
            (0, 1),
            False,
        )
        assert actor.torch.schedule is None and actor.torch.contents == frozenset()
        assert actor.relocate_results is False and actor.finish_hook.cmd is None
        rollout = roles["rollout"]  # follows the actor (verl's interpolations), global GPU ranks
        assert (rollout.enable, rollout.ranks, rollout.discrete) == (True, (0, 1), False)
        assert not roles["ref"].enable and not roles["critic"].enable

    def test_torch_discrete_with_a_schedule(self) -> None:
        prefix = "actor_rollout_ref.actor.profiler"
        roles = profiler_configs(
            load(
                generated()[0],
                "global_profiler.tool=torch",
                "global_profiler.steps=[2]",
                f"{prefix}.enable=true",
                f"{prefix}.tool_config.torch.discrete=true",
                f"{prefix}.tool_config.torch.contents=[cpu,cuda,stack]",
                f"{prefix}.tool_config.torch.schedule.wait=1",
                f"{prefix}.tool_config.torch.schedule.active=2",
                "actor_rollout_ref.ref.profiler.enable=true",
                "actor_rollout_ref.ref.profiler.all_ranks=true",
            )
        )
        actor, rollout, ref = roles["actor"], roles["rollout"], roles["ref"]
        assert actor.discrete and actor.torch.schedule == Schedule(wait=1, active=2, repeat=0)
        assert actor.torch.contents == {"cpu", "cuda", "stack"}
        assert rollout.discrete and rollout.torch.contents == {"cpu", "cuda", "stack"}
        assert rollout.torch.schedule is None  # the rollout block has no schedule
        assert ref.enable and ref.all_ranks and not ref.discrete and ref.steps == (2,)

    def test_continuous_schedule_records_the_first_window(self) -> None:
        prefix = "actor_rollout_ref.actor.profiler.tool_config.torch.schedule"
        roles = profiler_configs(
            load(
                generated()[0],
                "global_profiler.tool=torch",
                "global_profiler.steps=[1]",
                "actor_rollout_ref.actor.profiler.enable=true",
                f"{prefix}.active=2",
            )
        )
        assert roles["actor"].torch.schedule == Schedule(active=2, repeat=1)

    def test_nsys_discrete_from_the_global_block(self) -> None:
        cfg = load(
            generated()[1],
            "global_profiler.tool=nsys",
            "global_profiler.steps=[1]",
            "global_profiler.global_tool_config.nsys.discrete=true",
            "critic.profiler.enable=true",
        )
        critic = profiler_configs(cfg)["critic"]
        assert (critic.tool, critic.discrete, critic.enable) == ("nsys", True, True)
        options = nsight_options(cfg)
        assert options["capture-range"] == "cudaProfilerApi" and "capture-range-end" not in options

    def test_finish_hook_relocation_and_continuous_steps(self) -> None:
        cfg = load(
            generated()[0],
            "global_profiler.tool=torch",
            "global_profiler.steps=[1,2]",
            "global_profiler.profile_continuous_steps=true",
            "global_profiler.relocate_results=true",
            "global_profiler.finish_hook_ranks=[0]",
            "actor_rollout_ref.actor.profiler.enable=true",
            "global_profiler.finish_hook_cmd=upload",
        )
        actor = profiler_configs(cfg)["actor"]
        assert actor.continuous_steps and actor.relocate_results
        assert (actor.finish_hook.cmd, actor.finish_hook.ranks) == (hook_command("upload"), (0,))

    def test_rollout_token_window(self) -> None:
        prefix = "actor_rollout_ref.rollout.profiler.tool_config.torch"
        roles = profiler_configs(
            load(
                generated()[0],
                "global_profiler.tool=torch",
                "global_profiler.steps=[1]",
                "actor_rollout_ref.actor.profiler.enable=true",
                f"{prefix}.profile_token_start=2",
                f"{prefix}.profile_token_end=10",
            )
        )
        assert roles["rollout"].rollout == RolloutOptions(delay_iterations=2, max_iterations=8)
        assert roles["actor"].rollout == RolloutOptions()

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            (["global_profiler.tool=npu"], "actor_rollout_ref.actor.profiler.tool is 'npu': profdsl has no Ascend NPU"),
            (["global_profiler.tool=torch_memory"], "contents [memory]"),
            (["global_profiler.tool=precision_debugger"], "precision debugger is not a profiler"),
            (["global_profiler.tool=magic"], "tool must be 'torch' or 'nsys', got 'magic'"),
            (
                ["actor_rollout_ref.actor.profiler.enabel=true"],
                "unknown verl key actor_rollout_ref.actor.profiler.enabel; did you mean 'enable'?",
            ),
            (
                ["actor_rollout_ref.actor.profiler.tool_config.torch.profile_token_start=3"],
                "apply to the rollout engines only",
            ),
            (
                ["actor_rollout_ref.actor.profiler.tool_config.torch.contents=[gpu]"],
                "verl actor_rollout_ref.actor.profiler.tool_config.torch: TorchOptions.contents",
            ),
            (
                ["actor_rollout_ref.actor.profiler.tool_config.torch.schedule.wait=-1"],
                "tool_config.torch.schedule: Schedule.wait",
            ),
            (
                ["global_profiler.finish_hook_cmd='mv $VERL_PROFILE_RAY_NSIGHT_DIR/* x'"],
                "read them from $PROFDSL_SAVE_PATH",
            ),
            (["global_profiler.enable=true"], "global_profiler.enable is never read by verl's trainer"),
            (["global_profiler.save_path=null"], "save_path is null: set global_profiler.save_path"),
            (["actor_rollout_ref.actor.profiler.ranks='0,1'"], "ProfilerConfig.ranks"),
            (
                ["actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_end=0"],
                "profile_token_end must be an integer > profile_token_start",
            ),
        ],
    )
    def test_refused_with_the_key_and_what_to_do(self, overrides: list[str], message: str) -> None:
        base = [
            "global_profiler.tool=torch",
            "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=true",
        ]
        cfg = load(generated()[0], *base, *overrides)
        with pytest.raises(ConfigError) as caught:
            profiler_configs(cfg)
        assert message in str(caught.value)

    def test_refused_tools_are_fine_while_every_role_is_off(self) -> None:
        roles = profiler_configs(load(generated()[0], "global_profiler.tool=npu", "global_profiler.steps=[1]"))
        assert not any(c.enable for c in roles.values())

    def test_the_omegaconf_node_itself_is_accepted(self) -> None:
        cfg = OmegaConf.merge(
            OmegaConf.load(generated()[0]),
            OmegaConf.from_dotlist(
                ["global_profiler.tool=torch", "global_profiler.steps=[4]", "critic.profiler.enable=true"]
            ),
        )
        assert profiler_configs(cfg)["critic"].steps == (4,)


class TestFinishHookVariables:
    def test_verl_variables_are_defined_from_profdsl_ones(self, tmp_path: Path) -> None:
        cmd = 'echo "$VERL_PROFILE_SAVE_PATH|$VERL_PROFILE_RANK|$VERL_PROFILE_ROLE|$VERL_PROFILE_TOOL"'
        mapped = profiler_configs(
            {
                "global_profiler": {"tool": "torch", "steps": [1], "finish_hook_cmd": cmd},
                "actor_rollout_ref": {"actor": {"profiler": {"enable": True}}},
            }
        )
        command = mapped["actor"].finish_hook.cmd
        assert command is not None and command.endswith(cmd)
        env = {
            "PATH": os.environ["PATH"],
            "PROFDSL_SAVE_PATH": str(tmp_path),
            "PROFDSL_RANK": "3",
            "PROFDSL_ROLE": "actor",
            "PROFDSL_TOOL": "torch",
            "PROFDSL_PID": "9",
        }
        out = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == f"{tmp_path}|3|actor|torch"

    def test_a_command_without_them_is_kept(self) -> None:
        """Kept as written, after the variables (a script it runs reads them: the variables are
        exported whatever the command's text names; tests/test_verl_trainers.py runs one)."""
        mapped = profiler_configs({"global_profiler": {"tool": "torch", "finish_hook_cmd": "sync.sh"}})
        assert mapped["ref"].finish_hook.cmd == hook_command("sync.sh")


# ---------------------------------------------------------------------------------------------
# Inheritance: the mapping's own rules on a sparse mapping agree with verl's interpolations
# (the shipped YAML, resolved by OmegaConf) for any set of overrides.
# ---------------------------------------------------------------------------------------------

OVERRIDES = {
    "global_profiler.tool": st.sampled_from(["torch", "nsys"]),
    "global_profiler.steps": st.lists(st.integers(0, 9), max_size=3),
    "global_profiler.profile_continuous_steps": st.booleans(),
    "global_profiler.save_path": st.sampled_from(["outputs/profile", "/tmp/p"]),
    "global_profiler.relocate_results": st.booleans(),
    "global_profiler.finish_hook_cmd": st.sampled_from(["sync", "upload it"]),
    "global_profiler.finish_hook_all_ranks": st.booleans(),
    "global_profiler.finish_hook_ranks": st.lists(st.integers(0, 7), max_size=2),
    "global_profiler.global_tool_config.nsys.discrete": st.booleans(),
    **{
        f"{role}.profiler.{key}": strategy
        for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
        for key, strategy in (
            ("enable", st.booleans()),
            ("all_ranks", st.booleans()),
            ("ranks", st.lists(st.integers(0, 7), max_size=3)),
            ("tool_config.torch.discrete", st.booleans()),
            (
                "tool_config.torch.contents",
                st.lists(st.sampled_from(["cpu", "cuda", "stack"]), max_size=2, unique=True),
            ),
            ("tool_config.torch.schedule.active", st.integers(0, 3)),
            ("relocate_results", st.booleans()),
        )
    },
    "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_start": st.integers(0, 4),
}


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return tree


def outcome(cfg: dict[str, Any]) -> dict[str, ProfilerConfig] | str:
    try:
        return profiler_configs(cfg)
    except ConfigError as exc:
        return f"refused: {exc}"


@pytest.mark.slow
@settings(max_examples=60)
@given(
    st.dictionaries(st.sampled_from(sorted(OVERRIDES)), st.none(), max_size=8).flatmap(
        lambda keys: st.fixed_dictionaries({k: OVERRIDES[k] for k in keys})
    )
)
def test_inheritance_agrees_with_verls_interpolations(flat: dict[str, Any]) -> None:
    """Mapping the shipped YAML (verl's own interpolations resolved by OmegaConf) with a set of
    overrides, and mapping only those overrides (the mapping's inheritance rules), give the same
    configs, or the same refusal."""
    flat.setdefault("global_profiler.tool", "torch")
    dotlist = [f"{k}={v}" if not isinstance(v, list) else f"{k}=[{','.join(map(str, v))}]" for k, v in flat.items()]
    assert outcome(nest(flat)) == outcome(load(generated()[0], *dotlist))


# ---------------------------------------------------------------------------------------------
# The key table: docs/from-verl.md holds the one the mapping uses, and it names every key.
# ---------------------------------------------------------------------------------------------


def test_docs_hold_the_key_table() -> None:
    page = (ROOT / "docs" / "from-verl.md").read_text()
    assert key_table() in page


def test_the_key_table_names_every_key_the_mapping_knows() -> None:
    """Every key the mapping accepts (keys.py's sets, which it validates by) has a row."""

    def words(prefix: str) -> set[str]:
        return {w for k in KEYS if k.verl.startswith(prefix) for w in re.findall(r"[A-Za-z_]+", k.verl)}

    assert GLOBAL_KEYS <= words("global_profiler")
    assert ROLE_KEYS <= words("profiler.")
    assert SCHEDULE_KEYS <= words("profiler.tool_config.torch.schedule")
    shown = " ".join(k.verl for k in KEYS)
    for tool, keys in TOOL_KEYS.items():
        for key in keys:
            assert any(
                f"{block}.{tool}.{part}" in shown
                for block in ("tool_config", "global_tool_config")
                for part in (key, "*")
            ), (tool, key)
    assert "`_target_`, `name`" in shown


def test_every_mapped_row_changes_its_profdsl_field() -> None:
    """Each key the table maps to a field really moves that field (checked by setting it)."""
    base = {
        "global_profiler": {"tool": "torch", "steps": [1]},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": True}}},
    }
    default = profiler_configs(base)["actor"]
    cases: dict[str, tuple[str, Any, Any]] = {
        "global_profiler.steps": ("steps", [5], (5,)),
        "global_profiler.profile_continuous_steps": ("continuous_steps", True, True),
        "global_profiler.save_path": ("save_path", "/tmp/elsewhere", "/tmp/elsewhere"),
        "global_profiler.relocate_results": ("relocate_results", True, True),
        "global_profiler.finish_hook_cmd": ("finish_hook.cmd", "x", hook_command("x")),
        "global_profiler.finish_hook_all_ranks": ("finish_hook.all_ranks", True, True),
        "global_profiler.finish_hook_ranks": ("finish_hook.ranks", [2], (2,)),
        "actor_rollout_ref.actor.profiler.all_ranks": ("all_ranks", True, True),
        "actor_rollout_ref.actor.profiler.ranks": ("ranks", [3], (3,)),
        "actor_rollout_ref.actor.profiler.tool_config.torch.contents": ("torch.contents", ["cpu"], {"cpu"}),
        "actor_rollout_ref.actor.profiler.tool_config.torch.discrete": ("discrete", True, True),
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active": (
            "torch.schedule",
            2,
            Schedule(active=2, repeat=1),
        ),
    }
    for path, (field, value, expected) in cases.items():
        got: Any = profiler_configs(_set(base, path, value))["actor"]
        before: Any = default
        for part in field.split("."):
            got, before = getattr(got, part), getattr(before, part)
        assert got == expected != before, path
    nsys = profiler_configs(
        _set(_set(base, "global_profiler.tool", "nsys"), "global_profiler.global_tool_config.nsys.discrete", True)
    )["actor"]
    assert (nsys.tool, nsys.discrete) == ("nsys", True)


def _set(tree: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(tree)
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


def test_profdsl_configs_round_trip() -> None:
    roles = profiler_configs(
        load(
            generated()[0],
            "global_profiler.tool=torch",
            "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=true",
        )
    )
    for config in roles.values():
        assert ProfilerConfig.from_mapping(config.to_mapping()) == config


# ---------------------------------------------------------------------------------------------
# Hostile values: any value verl's YAML can hold, at any profiler key of the shipped config (and
# with a role enabled, so that the deeper keys are read): a ConfigError naming a verl key, or a
# mapping; never another exception.
# ---------------------------------------------------------------------------------------------


def _key_paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    if isinstance(node, dict):
        for key, child in node.items():
            found.append((*prefix, key))
            found += _key_paths(child, (*prefix, key))
    return found


@functools.cache
def _shipped() -> dict[str, Any]:
    """The profiler blocks of the shipped ``_generated_ppo_trainer.yaml``, resolved (read once)."""
    return load(generated()[0])


def _shipped_paths() -> list[tuple[str, ...]]:
    paths = _key_paths(_shipped())
    schedule = [(*p, "schedule", k) for p in paths if p[-2:] == ("tool_config", "torch") for k in SCHEDULE_KEYS]
    return sorted(set(paths + schedule))


YAML_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 10**13)
    | st.floats()
    | st.sampled_from(["???", "torch", "nsys", "npu", "a", "", "0", "1", "true"])
    | st.text(max_size=4)
)
YAML_VALUES = st.recursive(
    YAML_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["torch", "nsys", "active", "enable", "a", "0"]) | st.integers(0, 2), inner, max_size=3
        )
    ),
    max_leaves=6,
)


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


@pytest.mark.slow
@settings(deadline=None, max_examples=1000)
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(_shipped_paths())
            if importlib.util.find_spec("verl")
            else st.just(("global_profiler", "tool")),
            YAML_VALUES,
        ),
        max_size=4,
    ),
    enabled=st.booleans(),
)
def test_any_value_in_the_shipped_yaml_maps_or_is_a_config_error(
    changes: list[tuple[tuple[str, ...], Any]], enabled: bool
) -> None:
    cfg = copy.deepcopy(_shipped())
    if enabled:
        for path, value in (
            (("global_profiler", "tool"), "torch"),
            (("global_profiler", "steps"), [1]),
            (("actor_rollout_ref", "actor", "profiler", "enable"), True),
        ):
            _put(cfg, path, value)
    for path, value in changes:
        _put(cfg, path, value)
    for mapping in (profiler_configs, nsight_options):
        try:
            mapping(cfg)
        except ConfigError as exc:
            assert str(exc).startswith(("verl ", "unknown verl key")), exc  # it names the verl key


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        ("actor_rollout_ref.actor.profiler.tool", [], "actor.profiler.tool must be a string"),
        ("actor_rollout_ref.actor.profiler.tool", {}, "actor.profiler.tool must be a string"),
        ("global_profiler.tool", [], "global_profiler.tool must be a string"),
        ("global_profiler.steps", "1,2", "global_profiler.steps must be a list of integers"),
        (
            "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_start",
            "a",
            "rollout.profiler.tool_config.torch.profile_token_start must be an integer",
        ),
        (
            "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active",
            False,
            "actor.profiler.tool_config.torch.schedule: Schedule.active must be an integer",
        ),
        (
            "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.repeat",
            True,
            "actor.profiler.tool_config.torch.schedule: Schedule.repeat must be an integer",
        ),
        ("actor_rollout_ref.actor.profiler.tool_config", "???", None),
        ("actor_rollout_ref.actor.profiler.save_path", "???", None),
    ],
)
def test_values_verl_can_hold(where: str, value: Any, words: str | None) -> None:
    """The cases the fuzzing above found: unhashable tools, a string token count, a bool where a
    count goes; and OmegaConf's ``'???'`` (MISSING), which is no value."""
    cfg = copy.deepcopy(_shipped())  # resolved: the actor's tool is its own key now
    for path, setting in (
        (("global_profiler", "tool"), "torch"),
        (("global_profiler", "steps"), [1]),
        (("actor_rollout_ref", "actor", "profiler", "tool"), "torch"),
        (("actor_rollout_ref", "actor", "profiler", "enable"), True),
    ):
        _put(cfg, path, setting)
    _put(cfg, tuple(where.split(".")), value)
    if words is None:
        assert profiler_configs(cfg)["actor"].enable
    else:
        with pytest.raises(ConfigError, match=re.escape(words)):
            profiler_configs(cfg)


@pytest.mark.parametrize("key", ["all_ranks", "relocate_results", "finish_hook_all_ranks"])
def test_a_role_flag_that_is_not_a_bool_is_refused_by_its_verl_key(key: str) -> None:
    """A role's flags are read as every verl flag is (unset: False; else true or false), and a
    bad one is refused naming its own verl key, as ``enable`` is."""
    block = {"enable": True, key: "yes"}
    cfg = {"global_profiler": {"tool": "torch", "steps": [1]}, "actor_rollout_ref": {"actor": {"profiler": block}}}
    words = f"verl actor_rollout_ref.actor.profiler.{key} must be true or false, got 'yes'"
    with pytest.raises(ConfigError, match=re.escape(words)):
        profiler_configs(cfg)
    block[key] = "???"  # OmegaConf's MISSING: unset
    actor = profiler_configs(cfg)["actor"]
    assert (actor.finish_hook.all_ranks if key == "finish_hook_all_ranks" else getattr(actor, key)) is False


@pytest.mark.parametrize(
    "block",
    [
        "global_profiler",
        "global_profiler.global_tool_config",
        "global_profiler.global_tool_config.nsys",
        "actor_rollout_ref.actor.profiler",
        "actor_rollout_ref.actor.profiler.tool_config",
        "actor_rollout_ref.actor.profiler.tool_config.torch",
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule",
    ],
)
def test_hydras_target_and_a_name_are_ignored_in_every_block(block: str) -> None:
    """``_target_`` and ``name`` are accepted and ignored in any block (docs/from-verl.md), a
    role's ``tool_config`` beside its tools included: the config maps as it does without them."""
    plain_cfg: dict[str, Any] = {
        "global_profiler": {"tool": "torch", "steps": [1]},
        "actor_rollout_ref": {
            "actor": {"profiler": {"enable": True, "tool_config": {"torch": {"schedule": {"active": 1}}}}}
        },
    }
    cfg = copy.deepcopy(plain_cfg)
    _put(cfg, (*block.split("."), "_target_"), "verl.utils.profiler.config.SomeConfig")
    _put(cfg, (*block.split("."), "name"), "a label")
    assert profiler_configs(cfg) == profiler_configs(plain_cfg)
