"""Every key of verl's profiler configuration, and what profdsl does with it: the table that
:mod:`profdsl.integrations.verl.config` maps by, and that ``docs/from-verl.md`` prints
(:func:`key_table`; ``tests/test_verl_config.py`` checks the page against it).

Paths are relative to a role's block (``profiler.<key>``: ``actor_rollout_ref.actor.profiler``,
``actor_rollout_ref.ref.profiler``, ``actor_rollout_ref.rollout.profiler``, ``critic.profiler``) or
to the trainer's ``global_profiler``. ``_target_`` (Hydra's) and ``name`` (a label) are accepted
and ignored everywhere.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["GLOBAL_KEYS", "IGNORED", "KEYS", "ROLE_KEYS", "TOOL_KEYS", "Key", "key_table"]


@attrs.frozen
class Key:
    """One verl key: the profdsl field it becomes (or ``—``), and how."""

    verl: str
    profdsl: str
    note: str


#: Keys accepted and ignored in every block.
IGNORED: Final = frozenset({"_target_", "name"})

#: The keys of each ``tool_config.<tool>`` block (and ``global_tool_config.<tool>``), as verl's
#: dataclasses and shipped YAML spell them.
TOOL_KEYS: Final = {
    "torch": frozenset({"contents", "discrete", "profile_token_start", "profile_token_end", "schedule"}),
    "nsys": frozenset({"discrete", "controller_nsight_options", "worker_nsight_options"}),
    "npu": frozenset({"contents", "level", "analysis", "discrete", "profile_token_start", "profile_token_end"}),
    "torch_memory": frozenset(
        {"trace_alloc_max_entries", "stack_depth", "memory_snapshot_num_steps", "context", "stacks", "kw_args"}
    ),
    "precision_debugger": frozenset({"config_path", "steps", "stages", "strict"}),
}
#: The keys of ``tool_config.torch.schedule``.
SCHEDULE_KEYS: Final = frozenset({"skip_first", "wait", "warmup", "active", "repeat"})
#: The keys of a role's ``profiler`` block.
ROLE_KEYS: Final = frozenset(
    {
        "tool",
        "enable",
        "all_ranks",
        "ranks",
        "save_path",
        "relocate_results",
        "finish_hook_cmd",
        "finish_hook_all_ranks",
        "finish_hook_ranks",
        "tool_config",
        "global_tool_config",
    }
)
#: The keys of ``global_profiler``: a role block's, and the steps.
GLOBAL_KEYS: Final = ROLE_KEYS | {"steps", "profile_continuous_steps"}
#: The tools profdsl refuses, and what to do instead.
REFUSED_TOOLS: Final = {
    "npu": "profdsl has no Ascend NPU backend: keep verl's profiler for NPU runs, or profile on "
    "CUDA with tool 'torch' or 'nsys'",
    "torch_memory": "profdsl records allocations inside torch traces, not memory snapshots: use "
    "tool 'torch' with tool_config.torch.contents [memory], or call "
    "torch.cuda.memory._record_memory_history yourself",
    "precision_debugger": "msprobe's precision debugger is not a profiler: keep verl's for it",
}

G, R = "global_profiler", "profiler"

KEYS: Final = (
    Key(
        f"{G}.tool",
        "`tool` (every role's default)",
        "`torch` or `nsys`; `npu`, `torch_memory`, "
        "`precision_debugger` and unknown names are refused for an enabled role (verl gave those a "
        "silent no-op); `null` with a role enabled is refused",
    ),
    Key(f"{G}.steps", "`steps`", "`null` is no step"),
    Key(
        f"{G}.profile_continuous_steps",
        "`continuous_steps`",
        "with a schedule each step runs it afresh (verl recorded only the first step's first window: R6)",
    ),
    Key(
        f"{G}.save_path",
        "`save_path` (every role's default)",
        "made absolute where the config is mapped (verl resolved it in each worker's cwd: R11)",
    ),
    Key(f"{G}.relocate_results", "`relocate_results` (default)", "verl's default `false` is kept"),
    Key(f"{G}.finish_hook_cmd", "`finish_hook.cmd` (default)", "see `profiler.finish_hook_cmd`"),
    Key(f"{G}.finish_hook_all_ranks", "`finish_hook.all_ranks` (default)", ""),
    Key(f"{G}.finish_hook_ranks", "`finish_hook.ranks` (default)", ""),
    Key(f"{G}.global_tool_config.nsys.discrete", "`discrete` (default of `tool_config.nsys.discrete`)", ""),
    Key(
        f"{G}.global_tool_config.nsys.worker_nsight_options",
        "`nsight_options(cfg)`",
        "for `profdsl.ray.runtime_env(config, nsight_options=...)`; `null` values are dropped "
        "(profdsl sets `capture-range-end`)",
    ),
    Key(
        f"{G}.global_tool_config.nsys.controller_nsight_options",
        "—",
        "ignored: profdsl's driver captures nothing; run the driver under nsys yourself",
    ),
    Key(f"{G}.global_tool_config.torch_memory.*", "—", "ignored; tool `torch_memory` is refused"),
    Key(f"{G}.global_tool_config.precision_debugger.*", "—", "ignored; tool `precision_debugger` is refused"),
    Key(
        f"{G}.enable` / `all_ranks` / `ranks` / `tool_config",
        "—",
        "never read by verl's trainer: "
        "accepted when unset (`false`, `[]`, `null`), refused otherwise (enable each role)",
    ),
    Key(f"{R}.tool", "`tool`", f"default: `{G}.tool`"),
    Key(f"{R}.enable", "`enable`", "rollout default: the actor's"),
    Key(f"{R}.all_ranks", "`all_ranks`", "rollout default: the actor's"),
    Key(
        f"{R}.ranks",
        "`ranks`",
        "for rollout, global GPU ranks (replica `r` owns `[r*W, (r+1)*W)`), as in verl; rollout default: the actor's",
    ),
    Key(f"{R}.save_path", "`save_path`", f"default: `{G}.save_path`; `null` with the role enabled is refused"),
    Key(f"{R}.relocate_results", "`relocate_results`", f"default: `{G}` (rollout: the actor's)"),
    Key(
        f"{R}.finish_hook_cmd",
        "`finish_hook.cmd`",
        "runs after the last step's rollout traces "
        "landed (B3), in every trainer (B4), also when training ends early (B5), bounded by "
        "`finish_hook.timeout_s` (R1); `$VERL_PROFILE_SAVE_PATH`, `_TOOL`, `_RANK`, `_PID` and "
        "`_ROLE` are exported from profdsl's `$PROFDSL_*` (to a script it runs too); "
        "`$VERL_PROFILE_RAY_NSIGHT_DIR` is "
        "refused (reports are moved into `save_path`)",
    ),
    Key(f"{R}.finish_hook_all_ranks", "`finish_hook.all_ranks`", ""),
    Key(f"{R}.finish_hook_ranks", "`finish_hook.ranks`", "default: the profiled ranks, as in verl"),
    Key(f"{R}.global_tool_config", "—", f"refused unless `null` or empty: set it under `{G}`"),
    Key(
        f"{R}.tool_config.torch.contents",
        "`torch.contents`",
        "same meaning: `[]` is CPU+CUDA without stack, shapes or memory; rollout default: the actor's",
    ),
    Key(
        f"{R}.tool_config.torch.discrete",
        "`discrete` (tool `torch`)",
        "rollout default: the actor's; engines are profiled whatever it says (verl skipped them unless discrete: R3)",
    ),
    Key(
        f"{R}.tool_config.torch.schedule.skip_first` / `wait` / `warmup` / `active` / `repeat",
        "`torch.schedule`",
        "`active: 0` is no schedule; in continuous mode `repeat: 0` becomes 1, as "
        "verl does; no empty or duplicate windows (B1, B2)",
    ),
    Key(
        f"{R}.tool_config.torch.profile_token_start",
        "`rollout.delay_iterations`",
        "rollout only (a training role's must be `null`); `null` is 0",
    ),
    Key(
        f"{R}.tool_config.torch.profile_token_end",
        "`rollout.max_iterations`",
        "`end - start` "
        "engine iterations; `null` keeps profdsl's finite default (64) where verl recorded until "
        "stop; rollout only",
    ),
    Key(f"{R}.tool_config.nsys.discrete", "`discrete` (tool `nsys`)", ""),
    Key(f"{R}.tool_config.npu.*", "—", "ignored; tool `npu` is refused: " + REFUSED_TOOLS["npu"]),
    Key(
        f"{R}.tool_config.torch_memory.*",
        "—",
        "ignored; tool `torch_memory` is refused: " + REFUSED_TOOLS["torch_memory"],
    ),
    Key(f"{R}.tool_config.precision_debugger.*", "—", "ignored; tool `precision_debugger` is refused"),
    Key("`_target_`, `name` (any block)", "—", "ignored (Hydra's target, labels)"),
)


def key_table() -> str:
    """The Markdown table of :data:`KEYS` that ``docs/from-verl.md`` holds."""
    rows = ["| verl | profdsl | note |", "| --- | --- | --- |"]
    for key in KEYS:
        verl = key.verl if key.verl.startswith("`") else f"`{key.verl}`"
        rows.append(f"| {verl} | {key.profdsl} | {key.note} |")
    return "\n".join(rows)
