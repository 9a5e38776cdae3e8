"""Rank discovery and rank-selection rules.

Everything here is pure and cheap. The module never imports torch: it only looks at
``torch.distributed`` when the caller's process already imported it, so importing profdsl does not
pay torch's import cost and a process without torch still gets a sensible answer.

Two kinds of rank appear in profdsl:

* A *global rank* is a process's (or GPU's) index in the whole job, as found by
  :func:`discover_rank` or named in a config's ``ranks``.
* A rollout engine *replica* owns ``replica_world_size`` consecutive global ranks;
  :func:`replicas_for_ranks` and :func:`replica_ranks` convert between the two, and
  :func:`local_rank_from_trace_name` tells which GPU of a replica wrote an engine trace file.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection, Mapping
from typing import Final

import attrs

from profdsl._engine_names import Ambiguous, read_engine_rank
from profdsl.errors import ConfigError

__all__ = [
    "RankInfo",
    "discover_rank",
    "is_hook_rank",
    "is_rank_selected",
    "local_rank_from_trace_name",
    "replica_ranks",
    "replicas_for_ranks",
]

_SOURCE_EXPLICIT: Final = "explicit"
_SOURCE_TORCH: Final = "torch.distributed"
_SOURCE_ENV: Final = "env"
_SOURCE_DEFAULT: Final = "default"

_ENV_RANK: Final = "RANK"
_ENV_WORLD_SIZE: Final = "WORLD_SIZE"
_ENV_LOCAL_RANK: Final = "LOCAL_RANK"

_ENV_INT = re.compile(r"\s*[0-9]+\s*", re.ASCII)


@attrs.frozen
class RankInfo:
    """Where this process sits in the job.

    Attributes:
        rank: Global rank, ``0 <= rank < world_size``.
        world_size: Number of processes in the job, ``>= 1``.
        local_rank: Rank on this node (``LOCAL_RANK``), or ``rank`` when the launcher did not
            set it.
        source: Highest-priority source that supplied ``rank`` or ``world_size``: ``"explicit"``,
            ``"torch.distributed"``, ``"env"`` or ``"default"``.
    """

    rank: int
    world_size: int
    local_rank: int
    source: str


@attrs.frozen
class _Found:
    """A rank and world size from one source, with labels for error messages."""

    rank: int
    world_size: int
    source: str
    rank_label: str
    world_size_label: str


def _require_int(label: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an integer ``>= minimum``.

    Args:
        label: How the error message names the value, e.g. ``"argument rank"``.
        value: The value to check.
        minimum: Smallest allowed value.

    Returns:
        ``value``, typed as ``int``.

    Raises:
        ConfigError: ``value`` is not an ``int`` (``bool`` is refused) or is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{label} must be an integer >= {minimum}, got {value!r}")
    return value


def _require_ranks(label: str, ranks: Collection[int]) -> None:
    """Check that every member of ``ranks`` is an integer ``>= 0``.

    Raises:
        ConfigError: A member is not a non-negative integer; the message names ``label``.
    """
    for member in ranks:
        _require_int(f"{label} members", member, 0)


def _parse_env_int(environ: Mapping[str, str], name: str, minimum: int) -> int | None:
    """Read an integer environment variable.

    Args:
        environ: The environment to read.
        name: The variable's name.
        minimum: Smallest allowed value.

    Returns:
        The value, or None when the variable is absent.

    Raises:
        ConfigError: The variable is set but is not a decimal integer ``>= minimum``.
    """
    raw = environ.get(name)
    if raw is None:
        return None
    if _ENV_INT.fullmatch(raw) is None or int(raw) < minimum:
        raise ConfigError(
            f"environment variable {name} must be an integer >= {minimum}, got {raw!r}"
        )
    return int(raw)


def _from_torch_distributed() -> _Found | None:
    """Return rank and world size from an initialized default process group, if there is one."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    # A half-imported or exotic torch build must not break rank discovery: any failure means
    # "not usable", and the environment is consulted instead.
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        rank = dist.get_rank()
        world_size = dist.get_world_size()
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(rank, int) or not isinstance(world_size, int):
        return None
    if world_size < 1 or not 0 <= rank < world_size:
        return None
    return _Found(rank, world_size, _SOURCE_TORCH, "torch.distributed rank", "torch.distributed")


def _from_env(environ: Mapping[str, str]) -> _Found | None:
    """Return rank and world size from ``RANK`` / ``WORLD_SIZE``, or None when neither is set.

    Raises:
        ConfigError: A set variable is not a valid integer.
    """
    rank = _parse_env_int(environ, _ENV_RANK, 0)
    world_size = _parse_env_int(environ, _ENV_WORLD_SIZE, 1)
    if rank is None and world_size is None:
        return None
    return _Found(
        rank=0 if rank is None else rank,
        world_size=1 if world_size is None else world_size,
        source=_SOURCE_ENV,
        rank_label=f"environment variable {_ENV_RANK}" if rank is not None else "default rank",
        world_size_label=(
            f"environment variable {_ENV_WORLD_SIZE}" if world_size is not None else "the default"
        ),
    )


def _fallback(environ: Mapping[str, str]) -> _Found:
    """Return the first usable implicit source: torch.distributed, environment, default."""
    found = _from_torch_distributed() or _from_env(environ)
    if found is not None:
        return found
    return _Found(0, 1, _SOURCE_DEFAULT, "default rank", "the default")


def _combine(rank: int | None, world_size: int | None, environ: Mapping[str, str]) -> _Found:
    """Fill the arguments that were not given from the implicit sources."""
    if rank is not None and world_size is not None:
        return _Found(rank, world_size, _SOURCE_EXPLICIT, "argument rank", "argument world_size")
    base = _fallback(environ)
    if rank is None and world_size is None:
        return base
    return _Found(
        rank=base.rank if rank is None else rank,
        world_size=base.world_size if world_size is None else world_size,
        source=_SOURCE_EXPLICIT,
        rank_label=base.rank_label if rank is None else "argument rank",
        world_size_label=base.world_size_label if world_size is None else "argument world_size",
    )


def discover_rank(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> RankInfo:
    """Find this process's global rank and the job's world size.

    Each argument that is given wins on its own. The ones not given come, as a pair, from the first
    of: an initialized ``torch.distributed`` default group (only looked at when the caller already
    imported torch), the ``RANK`` / ``WORLD_SIZE`` environment variables (an unset one defaults to
    0 or 1), or rank 0 of a world of 1. ``local_rank`` is ``LOCAL_RANK`` whenever that variable is
    set, whatever the source of ``rank``, because it describes the process's place on its node,
    not how the global rank was found; otherwise it equals ``rank``.

    Args:
        rank: Explicit global rank, ``>= 0``.
        world_size: Explicit world size, ``>= 1``.
        environ: Environment to read instead of ``os.environ`` (for tests and launchers).

    Returns:
        The discovered ``RankInfo``; ``source`` is ``"explicit"`` as soon as one argument is given.

    Raises:
        ConfigError: An argument or a consulted environment variable (including an empty one) is
            not an integer in range, or the resulting rank is not below the world size. The message
            names the argument or variable and the value.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    checked_rank = None if rank is None else _require_int("argument rank", rank, 0)
    checked_world = (
        None if world_size is None else _require_int("argument world_size", world_size, 1)
    )
    found = _combine(checked_rank, checked_world, env)
    if found.rank >= found.world_size:
        raise ConfigError(
            f"{found.rank_label} must be < world size {found.world_size} "
            f"(from {found.world_size_label}), got {found.rank}"
        )
    local_rank = _parse_env_int(env, _ENV_LOCAL_RANK, 0)
    return RankInfo(
        rank=found.rank,
        world_size=found.world_size,
        local_rank=found.rank if local_rank is None else local_rank,
        source=found.source,
    )


def is_rank_selected(rank: int, ranks: Collection[int], *, all_ranks: bool = False) -> bool:
    """Apply the profiled-rank rule.

    Args:
        rank: The global rank asking.
        ranks: Ranks named in the config.
        all_ranks: Select every rank, whatever ``ranks`` holds.

    Returns:
        True for every rank with ``all_ranks``; for rank 0 only when ``ranks`` is empty; otherwise
        whether ``rank`` is in ``ranks``.

    Raises:
        ConfigError: ``rank`` or a member of ``ranks`` is not an integer ``>= 0``.
    """
    _require_int("rank", rank, 0)
    _require_ranks("ranks", ranks)
    if all_ranks:
        return True
    if not ranks:
        return rank == 0
    return rank in ranks


def is_hook_rank(
    rank: int,
    *,
    hook_ranks: Collection[int],
    hook_all_ranks: bool,
    profiled_ranks: Collection[int],
    profiled_all_ranks: bool,
) -> bool:
    """Tell whether the finish hook runs on ``rank``.

    Args:
        rank: The global rank asking.
        hook_ranks: Ranks the hook is configured to run on.
        hook_all_ranks: Run the hook on every rank.
        profiled_ranks: Ranks named for profiling.
        profiled_all_ranks: Profile every rank.

    Returns:
        True for every rank with ``hook_all_ranks``; membership in ``hook_ranks`` when it is
        non-empty; otherwise whether ``rank`` is profiled (see :func:`is_rank_selected`).

    Raises:
        ConfigError: ``rank`` or a member of either collection is not an integer ``>= 0``.
    """
    _require_int("rank", rank, 0)
    _require_ranks("hook_ranks", hook_ranks)
    if hook_all_ranks:
        return True
    if hook_ranks:
        return rank in hook_ranks
    return is_rank_selected(rank, profiled_ranks, all_ranks=profiled_all_ranks)


def replicas_for_ranks(
    ranks: Collection[int],
    replica_world_size: int,
    *,
    all_ranks: bool = False,
    num_replicas: int,
) -> frozenset[int]:
    """Map config ranks (global GPU ranks) to the rollout replicas that own them.

    Replica ``r`` owns global ranks ``[r * W, (r + 1) * W)`` with ``W = replica_world_size``.

    Args:
        ranks: Global GPU ranks named in the config.
        replica_world_size: GPUs per replica, ``W >= 1``.
        all_ranks: Select every replica.
        num_replicas: Number of replicas that exist, ``>= 0``.

    Returns:
        ``range(num_replicas)`` with ``all_ranks``; ``{0}`` when ``ranks`` is empty (nothing when
        there are no replicas); otherwise the owners of ``ranks``, leaving out ranks whose replica
        does not exist.

    Raises:
        ConfigError: An argument is out of range; the message names it and the value.
    """
    width = _require_int("replica_world_size", replica_world_size, 1)
    count = _require_int("num_replicas", num_replicas, 0)
    _require_ranks("ranks", ranks)
    if all_ranks:
        return frozenset(range(count))
    if not ranks:
        return frozenset({0}) if count > 0 else frozenset()
    return frozenset(owner for owner in (r // width for r in ranks) if owner < count)


def replica_ranks(replica: int, replica_world_size: int) -> range:
    """Return the global ranks replica ``replica`` owns.

    Args:
        replica: Replica index, ``>= 0``.
        replica_world_size: GPUs per replica, ``>= 1``.

    Returns:
        ``range(replica * W, (replica + 1) * W)``.

    Raises:
        ConfigError: An argument is out of range; the message names it and the value.
    """
    index = _require_int("replica", replica, 0)
    width = _require_int("replica_world_size", replica_world_size, 1)
    return range(index * width, (index + 1) * width)


def local_rank_from_trace_name(name: str, replica_world_size: int) -> int | None:
    """Tell which GPU of a replica (``0 .. W-1``) wrote an engine trace file, from its name.

    Only the base name is read, so a full path is fine. Recognised conventions:

    * vLLM >= 0.13 workers,
      ``[prefix_][dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_]rank<r>.<ns>.pt.trace.json[.gz]``, give ``r``;
      with ``d > 0`` each data-parallel engine numbers its workers from 0, so the position inside
      the replica is unknown and the answer is None.
    * ``<instance>-rank-<k>.<ts>.pt.trace.json[.gz]`` gives ``k``.
    * SGLang ``...-TP-<tp>[-<stage>].trace.json.gz`` and ``...-TP-<tp>-memory[-<stage>].pickle``
      give ``tp``; a ``-DP-``, ``-PP-`` or ``-EP-`` part makes the offset unknown: None.
    * Anything else, such as torch's ``{host}_{pid}.{ns}.pt.trace.json.gz``, carries no rank.

    Args:
        name: File name or path of the trace.
        replica_world_size: GPUs per replica, ``W >= 1``.

    Returns:
        The local rank when the name gives one in ``[0, W)``. None when the name gives a value
        outside that range, follows a known convention that leaves the offset unknown (data
        parallel, multi-dimensional SGLang), or carries no rank at all. Exception: a name that
        carries no rank in a one-GPU replica (``W == 1``) gives 0, since that replica has no other
        GPU.

    Raises:
        ConfigError: ``replica_world_size`` is not an integer ``>= 1``.
    """
    width = _require_int("replica_world_size", replica_world_size, 1)
    value = read_engine_rank(name)
    if value is None:
        return 0 if width == 1 else None
    if isinstance(value, Ambiguous) or value >= width:
        return None
    return value
