"""verl's profiler configuration, mapped to one :class:`~profdsl.config.ProfilerConfig` per role.

verl keeps ``global_profiler`` at the trainer level and a ``profiler`` block (with its
``tool_config.<tool>``) per role; role blocks inherit missing values from the global block, and
the rollout block from the actor's (``verl-profiler-spec`` §1.9). The same rules are applied here
to whatever keys a mapping lacks, so the resolved YAML verl ships and a hand-written sparse
mapping both work. Every key is mapped, ignored with a reason, or refused with a ``ConfigError``
naming its verl path and what to do (:mod:`profdsl.integrations.verl._keys` lists them all).

Examples:
    >>> cfg = {"global_profiler": {"tool": "torch", "steps": [2, 4], "save_path": "/tmp/prof"},
    ...        "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [0, 1]}}}}
    >>> roles = profiler_configs(cfg)
    >>> roles["actor"].steps, roles["actor"].ranks, roles["rollout"].enable, roles["ref"].enable
    ((2, 4), (0, 1), True, False)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, Literal, TypeVar

import attrs

from profdsl.config import FinishHook, ProfilerConfig, RolloutOptions, Schedule, TorchOptions
from profdsl.config._checks import is_int, refuse, require_bool, require_int, require_text, suggest, to_int_set
from profdsl.errors import ConfigError
from profdsl.integrations.verl._keys import GLOBAL_KEYS, IGNORED, REFUSED_TOOLS, ROLE_KEYS, SCHEDULE_KEYS, TOOL_KEYS

__all__ = ["MISSING", "ROLES", "ROLE_PATHS", "hook_command", "map_block", "nsight_options", "plain", "profiler_configs"]

T = TypeVar("T")

#: Where each role's block sits in a verl trainer config.
ROLE_PATHS: Final = {
    "actor": ("actor_rollout_ref", "actor", "profiler"),
    "ref": ("actor_rollout_ref", "ref", "profiler"),
    "rollout": ("actor_rollout_ref", "rollout", "profiler"),
    "critic": ("critic", "profiler"),
}
ROLES: Final = tuple(ROLE_PATHS)
MISSING: Final = "???"  # OmegaConf's unset value (``omegaconf.MISSING``)
#: verl's finish-hook variables, defined from profdsl's in front of a command that uses them.
_HOOK_VARS: Final = ("SAVE_PATH", "TOOL", "RANK", "PID", "ROLE")


def plain(value: Any) -> Any:
    """Plain dicts and lists from an OmegaConf node (resolved), a verl config dataclass or any
    mapping; scalars as they are."""
    omegaconf = sys.modules.get("omegaconf")
    if omegaconf is not None and isinstance(value, (omegaconf.DictConfig, omegaconf.ListConfig)):
        value = omegaconf.OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _unset(value: Any) -> bool:
    """Whether a verl value is unset: null, or OmegaConf's ``'???'`` (``MISSING``: what verl's
    dataclasses leave in ``tool``, ``save_path`` and ``tool_config`` when nothing sets them)."""
    return value is None or (isinstance(value, str) and value == MISSING)


def _given(check: Callable[[str, Any], T], where: str, value: Any) -> T | None:
    """``check`` (a profdsl field check) on a verl value, naming its verl key; unset: None."""
    return None if _unset(value) else check(f"verl {where}", value)


def _bool(where: str, value: Any) -> bool:
    """A verl flag (unset: False)."""
    return bool(_given(require_bool, where, value))


def _block(mapping: Any, where: str, known: Collection[str] = ()) -> dict[str, Any]:
    """A verl block as a dict (unset: empty); with ``known``, its keys checked (:func:`_check`)."""
    if _unset(mapping):
        return {}
    if not isinstance(mapping, Mapping):
        refuse(f"verl {where}", "a mapping", mapping)
    if known:
        _check(mapping, known, where)
    return dict(mapping)


def _check(block: Mapping[Any, Any], known: Collection[str], where: str) -> None:
    for key in block:
        if key not in known and key not in IGNORED:
            raise ConfigError(
                f"unknown verl key {where}.{key}{suggest(key, known)} (known: {', '.join(sorted(known))})"
            )


def _convert(where: str, build: Callable[[], T]) -> T:
    """``build()``, a profdsl ConfigError re-raised under the verl key it came from."""
    try:
        return build()
    except ConfigError as exc:
        if str(exc).startswith(("verl ", "unknown verl key")):  # names its verl key already
            raise
        raise ConfigError(f"verl {where}: {exc}") from None


@attrs.frozen
class _Values:
    """A checked verl block's values; ``get`` reads one left at ``MISSING`` as ``default``."""

    values: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key, default)
        return default if _unset(value) and value is not None else value


@attrs.frozen
class _Global(_Values):
    """``global_profiler``, checked."""

    nsys: dict[str, Any]


def _global(cfg: Mapping[str, Any]) -> _Global:
    where = "global_profiler"
    block = _block(cfg.get("global_profiler"), where, GLOBAL_KEYS)
    for key in (*_LOCAL, "tool_config"):  # a role's own keys
        if block.get(key) not in (None, {}, [], False, MISSING):
            raise ConfigError(
                f"verl {where}.{key} is never read by verl's trainer, got "
                f"{block[key]!r}: set it in each role's profiler block"
            )
    # checked here, although a role that sets its own never reads them: no value goes unseen
    for key in ("tool", "save_path", "finish_hook_cmd"):
        _given(require_text, f"{where}.{key}", block.get(key))
    for key in ("profile_continuous_steps", "relocate_results", "finish_hook_all_ranks"):
        _bool(f"{where}.{key}", block.get(key))
    for key in ("steps", "finish_hook_ranks"):
        _given(to_int_set, f"{where}.{key}", block.get(key))
    tools = _tools(block.get("global_tool_config"), f"{where}.global_tool_config")
    nsys = _block(tools.get("nsys"), f"{where}.global_tool_config.nsys")
    _bool(f"{where}.global_tool_config.nsys.discrete", nsys.get("discrete"))
    return _Global(block, nsys)


def _at(cfg: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = cfg
    for key in path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    return _block(node, ".".join(path))


@attrs.frozen
class _Role(_Values):
    """A role block's effective verl values (after verl's inheritance), and where it came from."""

    where: str
    torch: dict[str, Any]
    nsys_discrete: Any


#: The role keys a block lacking them holds at these values (``global_profiler``'s are never read).
_LOCAL: Final = {"enable": False, "all_ranks": False, "ranks": []}
#: The role keys a block lacking them takes from ``global_profiler``, and what that holds when a
#: mapping lacks them too: verl's shipped YAML defaults.
_GLOBAL_DEFAULTS: Final[dict[str, Any]] = {
    "tool": None,
    "save_path": "outputs/profile",
    "relocate_results": False,
    "finish_hook_cmd": None,
    "finish_hook_all_ranks": False,
    "finish_hook_ranks": [],
}
#: Role keys a rollout block takes from the actor's when it lacks them (the tool and save_path: global).
_FROM_ACTOR: Final = {*_LOCAL, *_GLOBAL_DEFAULTS} - {"tool", "save_path"}


def _tools(raw: Any, where: str, tool: Any = None) -> dict[str, Any]:
    """A ``tool_config`` (or ``global_tool_config``) block as a dict, its keys and each tool's
    checked. A role's, with its ``tool`` named, may be as verl's tests build it,
    ``ProfilerConfig(tool_config=TorchProfilerToolConfig(...))``: one tool's fields where the
    per-tool mapping goes; with no key a tool's name, the block is that tool's (an unknown key is
    refused by name)."""
    tools = _block(raw, where)
    if isinstance(tool, str) and tool in TOOL_KEYS and tools and not set(tools) & set(TOOL_KEYS):
        tools = {tool: tools}
    _check(tools, TOOL_KEYS, where)
    for name, sub in tools.items():
        if name in TOOL_KEYS:  # not an ignored key (``_target_``, ``name``)
            _block(sub, f"{where}.{name}", TOOL_KEYS[name])
    return tools


def _role(block: Mapping[str, Any] | None, g: _Global, where: str, actor: _Role | None) -> _Role:
    block = dict(block or {})
    _check(block, ROLE_KEYS, where)
    if not _unset(block.get("global_tool_config")) and block.get("global_tool_config") != {}:
        raise ConfigError(
            f"verl {where}.global_tool_config is read from global_profiler only: move "
            "it to global_profiler.global_tool_config"
        )
    tools = _tools(block.get("tool_config"), f"{where}.tool_config", block.get("tool"))
    torch = _block(tools.get("torch"), f"{where}.tool_config.torch")
    if "schedule" in torch:
        torch["schedule"] = _block(torch["schedule"], f"{where}.tool_config.torch.schedule", SCHEDULE_KEYS)
    values: dict[str, Any] = {}
    for key in (*_LOCAL, *_GLOBAL_DEFAULTS):
        if key in block and not (_unset(block[key]) and block[key] is not None):
            values[key] = block[key]
        elif actor is not None and key in _FROM_ACTOR:
            values[key] = actor.get(key)
        elif key in _GLOBAL_DEFAULTS:
            values[key] = g.get(key, _GLOBAL_DEFAULTS[key])
        else:
            values[key] = _LOCAL[key]
    if actor is not None:  # the rollout's torch contents and discrete follow the actor's
        torch = {**{k: actor.torch[k] for k in ("contents", "discrete") if k in actor.torch}, **torch}
    nsys = _block(tools.get("nsys"), f"{where}.tool_config.nsys")
    nsys_discrete = nsys.get("discrete", g.nsys.get("discrete", False))
    return _Role(values, where, torch, nsys_discrete)


def _schedule(role: _Role, discrete: bool) -> Schedule | None:
    where = f"{role.where}.tool_config.torch.schedule"
    raw = role.torch.get("schedule") or {}
    fields = {k: (0 if _unset(raw.get(k)) else raw[k]) for k in SCHEDULE_KEYS}
    if is_int(fields["active"]) and fields["active"] == 0:  # verl: scheduling only with active > 0
        _convert(where, lambda: Schedule(**{**fields, "active": 1}))  # the rest still checked
        return None
    if not discrete and is_int(fields["repeat"]) and fields["repeat"] == 0:
        fields["repeat"] = 1  # verl's continuous mode records the first window only
    return _convert(where, lambda: Schedule(**fields))


def hook_command(cmd: str) -> str:
    """verl's finish hook command as profdsl runs it: ``$VERL_PROFILE_SAVE_PATH``, ``_TOOL``,
    ``_RANK``, ``_PID`` and ``_ROLE`` defined from profdsl's ``$PROFDSL_*`` and exported,
    whatever the command's text names (a script it runs reads them from its environment, as
    under verl), then the command as written.

    Examples:
        >>> hook_command("sync.sh").endswith("; sync.sh")
        True
    """
    names = [f"VERL_PROFILE_{v}" for v in _HOOK_VARS]
    prelude = " ".join(f'VERL_PROFILE_{v}="$PROFDSL_{v}"' for v in _HOOK_VARS)
    return f"{prelude}; export {' '.join(names)}; {cmd}"


def _hook_cmd(where: str, cmd: Any) -> Any:
    """A command (a non-blank string) as :func:`hook_command` gives it; anything else as it is
    (``FinishHook`` judges it)."""
    if not isinstance(cmd, str) or not cmd.strip():
        return cmd
    if "VERL_PROFILE_RAY_NSIGHT_DIR" in cmd:
        raise ConfigError(
            f"verl {where} uses $VERL_PROFILE_RAY_NSIGHT_DIR: profdsl moves nsys reports "
            "into save_path, so read them from $PROFDSL_SAVE_PATH"
        )
    return hook_command(cmd)


def _rollout_options(role: _Role, is_rollout: bool) -> RolloutOptions:
    where = f"{role.where}.tool_config.torch"
    start = _given(require_int, f"{where}.profile_token_start", role.torch.get("profile_token_start"))
    end = _given(require_int, f"{where}.profile_token_end", role.torch.get("profile_token_end"))
    if not is_rollout:
        if start is not None or end is not None:
            raise ConfigError(
                f"verl {where}.profile_token_start/_end apply to the rollout engines only "
                f"(got {start!r}, {end!r}): set them in "
                "actor_rollout_ref.rollout.profiler.tool_config.torch"
            )
        return RolloutOptions()
    fields: dict[str, Any] = {}
    if start is not None:
        fields["delay_iterations"] = start
    if end is not None:
        if end <= (start or 0):
            raise ConfigError(
                f"verl {where}.profile_token_end must be an integer > profile_token_start ({start!r}), got {end!r}"
            )
        fields["max_iterations"] = end - (start or 0)
    return _convert(f"{where}.profile_token_start/_end", lambda: RolloutOptions(**fields))


def _config(role: _Role, g: _Global, name: str) -> ProfilerConfig:
    where = role.where
    enable = _bool(f"{where}.enable", role.get("enable"))
    given = _given(require_text, f"{where}.tool", role.get("tool"))
    if enable and given in REFUSED_TOOLS:
        raise ConfigError(f"verl {where}.tool is {given!r}: {REFUSED_TOOLS[given]}")
    if enable and given is None:
        raise ConfigError(
            f"verl {where}.enable is true but no tool is set: set global_profiler.tool to 'torch' or 'nsys'"
        )
    if enable and given not in ("torch", "nsys"):
        raise ConfigError(
            f"verl {where}.tool must be 'torch' or 'nsys', got {given!r} (verl gives an "
            "unknown tool a backend that does nothing)"
        )
    tool: Literal["torch", "nsys"] = "nsys" if given == "nsys" else "torch"
    discrete = _bool(
        f"{where}.tool_config.{tool}.discrete", role.nsys_discrete if tool == "nsys" else role.torch.get("discrete")
    )
    save_path = role.get("save_path")
    if save_path is None and enable:
        raise ConfigError(f"verl {where}.save_path is null: set global_profiler.save_path")
    fields = {} if save_path is None else {"save_path": save_path}
    contents = role.torch.get("contents")
    hook = _convert(
        f"{where}.finish_hook_*",
        lambda: FinishHook(
            cmd=_hook_cmd(f"{where}.finish_hook_cmd", role.get("finish_hook_cmd")),
            all_ranks=_bool(f"{where}.finish_hook_all_ranks", role.get("finish_hook_all_ranks")),
            ranks=role.get("finish_hook_ranks", []),
        ),
    )
    torch = _convert(
        f"{where}.tool_config.torch",
        lambda: TorchOptions(contents=[] if contents is None else contents, schedule=_schedule(role, discrete)),
    )
    return _convert(
        where,
        lambda: ProfilerConfig(
            enable=enable,
            tool=tool,
            steps=g.get("steps", []),
            ranks=role.get("ranks", []),
            all_ranks=_bool(f"{where}.all_ranks", role.get("all_ranks")),
            discrete=discrete,
            continuous_steps=_bool("global_profiler.profile_continuous_steps", g.get("profile_continuous_steps")),
            torch=torch,
            relocate_results=_bool(f"{where}.relocate_results", role.get("relocate_results")),
            finish_hook=hook,
            rollout=_rollout_options(role, name == "rollout"),
            **fields,
        ),
    )


def profiler_configs(cfg: Any) -> dict[str, ProfilerConfig]:
    """The :class:`ProfilerConfig` of each role (``actor``, ``ref``, ``critic``, ``rollout``) of a
    verl trainer config.

    Args:
        cfg: the whole trainer config as a mapping (``OmegaConf.to_container(cfg, resolve=True)``,
            or the ``DictConfig`` itself); roles without a block get verl's defaults.

    Raises:
        ConfigError: an unknown key (closest match suggested), a value profdsl refuses (the npu,
            torch_memory and precision_debugger tools, a token window on a training role, ...),
            or an invalid value; the message names the verl key and says what to do.
    """
    cfg = plain(cfg)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"a verl trainer config must be a mapping, got {cfg!r}")
    g = _global(cfg)
    found: dict[str, ProfilerConfig] = {}
    actor: _Role | None = None
    for name, path in ROLE_PATHS.items():  # the actor's block first: the rollout's inherits from it
        role = _role(_at(cfg, path), g, ".".join(path), actor if name == "rollout" else None)
        actor = role if name == "actor" else actor
        found[name] = _config(role, g, name)
    return found


def map_block(
    block: Any, *, global_profiler: Any = None, rollout: bool = False, where: str = "profiler"
) -> ProfilerConfig:
    """One role's ``profiler`` block (a mapping or a verl ``ProfilerConfig``), with the trainer's
    ``global_profiler`` for what it inherits (``steps`` above all: a role block has none).

    Raises:
        ConfigError: as :func:`profiler_configs`.
    """
    g = _global({"global_profiler": plain(global_profiler)})
    return _config(_role(_block(plain(block), where), g, where, None), g, "rollout" if rollout else "role")


def nsight_options(cfg: Any) -> dict[str, str]:
    """``global_profiler.global_tool_config.nsys.worker_nsight_options``, for
    ``profdsl.ray.runtime_env(config, nsight_options=...)`` (``null`` values dropped)."""
    where = "global_profiler.global_tool_config.nsys.worker_nsight_options"
    g = _global(plain(cfg))
    options = _block(g.nsys.get("worker_nsight_options"), where)
    found = {}
    for key, value in options.items():
        if _unset(value):
            continue
        if isinstance(value, (list, dict)) or (isinstance(value, float) and not math.isfinite(value)):
            raise ConfigError(f"verl {where}.{key} must be a string, a number or true/false, got {value!r}")
        found[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return found
