"""Finding this process's rank and world size: explicit values, then an initialized
``torch.distributed`` (only when the caller already imported torch), then ``RANK`` /
``WORLD_SIZE`` / ``LOCAL_RANK``, then rank 0 of 1. Re-exported by :mod:`profdsl.core._ranks`.

Explicit arguments are validated (``ConfigError``). The environment is not profdsl's to validate:
a variable is read only when its value is needed, and a malformed one (or a ``RANK`` that does
not fit ``WORLD_SIZE``) is logged once and ignored, as if unset."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import Final

import attrs

from profdsl.config._checks import MAX_WIDE_INDEX, require_int
from profdsl.core._log import once
from profdsl.errors import ConfigError

__all__ = ["RankInfo", "discover_local_rank", "discover_rank", "discover_world"]

_ENV_RANK: Final = "RANK"
_ENV_WORLD_SIZE: Final = "WORLD_SIZE"
_ENV_LOCAL_RANK: Final = "LOCAL_RANK"

_ENV_INT = re.compile(r"\s*[0-9]{1,20}\s*", re.ASCII)


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


def _parse_env_int(environ: Mapping[str, str], name: str, minimum: int, maximum: int) -> int | None:
    """Read an integer environment variable.

    Args:
        environ: The environment to read.
        name: The variable's name.
        minimum: Smallest allowed value.
        maximum: Largest allowed value.

    Returns:
        The value; None when the variable is absent, or is not a decimal integer in
        ``minimum..maximum`` (logged once: the variable is ignored).
    """
    raw = environ.get(name)
    if raw is None:
        return None
    if _ENV_INT.fullmatch(raw) is None or not minimum <= int(raw) <= maximum:
        once(
            f"env:{name}={raw!r}",
            logging.WARNING,
            "profdsl: environment variable %s must be an integer in %s..%s, got %r: ignored",
            name,
            minimum,
            maximum,
            raw,
        )
        return None
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
    except Exception:
        return None
    if not (isinstance(rank, int) and isinstance(world_size, int) and 0 <= rank < world_size):
        return None
    return _Found(rank, world_size, "torch.distributed", "torch.distributed rank", "torch.distributed")


def _from_env(environ: Mapping[str, str], *, rank_needed: bool, world_size_needed: bool) -> _Found | None:
    """Return rank and world size from ``RANK`` / ``WORLD_SIZE`` (each read only when needed), or
    None when neither is set and usable. A ``RANK`` that does not fit ``WORLD_SIZE`` is logged
    once, and both are ignored."""
    rank = _parse_env_int(environ, _ENV_RANK, 0, MAX_WIDE_INDEX - 1) if rank_needed else None
    world_size = _parse_env_int(environ, _ENV_WORLD_SIZE, 1, MAX_WIDE_INDEX) if world_size_needed else None
    if rank is None and world_size is None:
        return None
    found = _Found(
        rank=0 if rank is None else rank,
        world_size=1 if world_size is None else world_size,
        source="env",
        rank_label=f"environment variable {_ENV_RANK}" if rank is not None else "default rank",
        world_size_label=(f"environment variable {_ENV_WORLD_SIZE}" if world_size is not None else "the default"),
    )
    if rank_needed and world_size_needed and found.rank >= found.world_size:
        once(
            f"env-fit:{found.rank}/{found.world_size}",
            logging.WARNING,
            "profdsl: environment variable %s=%s does not fit world size %s (from %s): the "
            "environment is ignored, rank 0 of 1",
            _ENV_RANK,
            found.rank,
            found.world_size,
            found.world_size_label,
        )
        return None
    return found


def discover_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """This process's global rank and the job's world size, as :func:`discover_rank` finds them,
    without reading ``LOCAL_RANK`` (what a profiler needs).

    Raises:
        ConfigError: An argument is not an integer in range, or the rank is not below the world
            size; the message names the argument and the value.
    """
    found = _found(rank, world_size, os.environ)
    return found.rank, found.world_size


def _argument(label: str, value: int | None, minimum: int, maximum: int) -> int | None:
    if value is None:
        return None
    require_int(label, value, minimum)
    if value > maximum:
        raise ConfigError(f"{label} must be at most {maximum}, got {value!r}")
    return value


def _found(rank: int | None, world_size: int | None, environ: Mapping[str, str]) -> _Found:
    """The arguments given (checked); those not given, from the first usable implicit source
    (torch.distributed, the environment, rank 0 of 1); the rank checked against the world size."""
    rank = _argument("argument rank", rank, 0, MAX_WIDE_INDEX - 1)
    world_size = _argument("argument world_size", world_size, 1, MAX_WIDE_INDEX)
    found = _Found(rank or 0, world_size or 1, "explicit", "argument rank", "argument world_size")
    if rank is None or world_size is None:
        base = (
            _from_torch_distributed()
            or _from_env(environ, rank_needed=rank is None, world_size_needed=world_size is None)
            or _Found(0, 1, "default", "default rank", "the default")
        )
        if rank is None and world_size is None:
            found = base
        elif rank is None:
            found = attrs.evolve(found, rank=base.rank, rank_label=base.rank_label)
        else:
            found = attrs.evolve(found, world_size=base.world_size, world_size_label=base.world_size_label)
    if found.rank >= found.world_size:
        raise ConfigError(
            f"{found.rank_label} must be < world size {found.world_size} "
            f"(from {found.world_size_label}), got {found.rank}"
        )
    return found


def discover_rank(
    rank: int | None = None, world_size: int | None = None, *, environ: Mapping[str, str] | None = None
) -> RankInfo:
    """Find this process's global rank and the job's world size.

    Each argument that is given wins on its own. The ones not given come, as a pair, from the first
    of: an initialized ``torch.distributed`` default group (only looked at when the caller already
    imported torch), the ``RANK`` / ``WORLD_SIZE`` environment variables (an unset one defaults to
    0 or 1), or rank 0 of a world of 1. ``local_rank`` is ``LOCAL_RANK`` whenever that variable is
    set, whatever the source of ``rank``, because it describes the process's place on its node,
    not how the global rank was found; otherwise it equals ``rank``.

    An environment variable is read only when its value is needed. One that is not a decimal
    integer in range (empty included), or a ``RANK`` not below ``WORLD_SIZE``, is logged once and
    ignored, as if unset: the environment is not profdsl's configuration.

    Args:
        rank: Explicit global rank, ``>= 0``.
        world_size: Explicit world size, ``>= 1`` (at most ``MAX_WIDE_INDEX``).
        environ: Environment to read instead of ``os.environ`` (for tests and launchers).

    Returns:
        The discovered ``RankInfo``; ``source`` is ``"explicit"`` as soon as one argument is given.

    Raises:
        ConfigError: An argument is not an integer in range, or the resulting rank is not below
            the world size. The message names the argument (or the variable the world size came
            from) and the value.
    """
    found = _found(rank, world_size, os.environ if environ is None else environ)
    local_rank = discover_local_rank(environ=environ)
    return RankInfo(
        rank=found.rank,
        world_size=found.world_size,
        local_rank=found.rank if local_rank is None else local_rank,
        source=found.source,
    )


def discover_local_rank(*, environ: Mapping[str, str] | None = None) -> int | None:
    """This process's rank on its node: ``LOCAL_RANK``, or None when the launcher did not set it
    (a malformed value is logged once and ignored)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    return _parse_env_int(env, _ENV_LOCAL_RANK, 0, MAX_WIDE_INDEX - 1)
