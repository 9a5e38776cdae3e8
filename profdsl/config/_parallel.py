"""``Parallel``: a process's coordinates in the job's parallel layout (tensor, pipeline, data,
context and expert parallel), and the size of each dimension where it is known.

They go into trace names (``tp1-pp0-dp3``), the ``profdsl`` trace metadata and the manifest
records, and rank selectors (``ProfilerConfig.select``) are resolved against them. A
:class:`~profdsl._runtime.profiler.Profiler` takes them as ``parallel=`` (this class, a plain
mapping, or a torch ``DeviceMesh``), or discovers them (:mod:`profdsl.core._parallel_discovery`).

Examples:
    >>> p = Parallel.from_mapping({"tp": 1, "pp": 0, "dp": 3, "sizes": {"tp": 2, "pp": 2}})
    >>> p.coords(), p.sizes()
    ({'tp': 1, 'pp': 0, 'dp': 3}, {'tp': 2, 'pp': 2})
    >>> Parallel(tp=2, tp_size=2)
    Traceback (most recent call last):
    ...
    profdsl.errors.ConfigError: Parallel.tp must be < tp_size (2), got 2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from profdsl.config._checks import int_in, suggest
from profdsl.errors import ConfigError

__all__ = ["DIMS", "MAX_COORD", "Parallel", "known_coords"]

#: The parallel dimensions, in the order trace names write them.
DIMS: Final = ("tp", "pp", "dp", "cp", "ep")
#: Largest coordinate (and size - 1) accepted: six digits, what a trace name's padded width holds.
MAX_COORD: Final = 999_999


def known_coords(source: object) -> tuple[tuple[str, int], ...]:
    """The coordinates ``source`` (a record, a trace name, a :class:`Parallel`) knows, in :data:`DIMS` order."""
    return tuple((d, v) for d in DIMS if (v := getattr(source, d)) is not None)


_COORD = int_in(0, MAX_COORD, optional=True)
_SIZE = int_in(1, MAX_COORD + 1, optional=True)


@attrs.frozen(kw_only=True)
class Parallel:
    """Where this process sits in each parallel dimension (``None``: not known or not used).

    ``tp``, ``pp``, ``dp``, ``cp``, ``ep`` are coordinates (``0 ..``); ``tp_size`` ... ``ep_size``
    the number of positions along each dimension, needed by selectors that say ``last``. A
    coordinate must be below its size when both are given.

    Raises:
        ConfigError: a coordinate or size that is not an integer in range; the message names the
            field and the value.
    """

    tp: int | None = attrs.field(default=None, validator=_COORD)
    pp: int | None = attrs.field(default=None, validator=_COORD)
    dp: int | None = attrs.field(default=None, validator=_COORD)
    cp: int | None = attrs.field(default=None, validator=_COORD)
    ep: int | None = attrs.field(default=None, validator=_COORD)
    tp_size: int | None = attrs.field(default=None, validator=_SIZE)
    pp_size: int | None = attrs.field(default=None, validator=_SIZE)
    dp_size: int | None = attrs.field(default=None, validator=_SIZE)
    cp_size: int | None = attrs.field(default=None, validator=_SIZE)
    ep_size: int | None = attrs.field(default=None, validator=_SIZE)

    def __attrs_post_init__(self) -> None:
        for dim in DIMS:
            coord, size = getattr(self, dim), getattr(self, f"{dim}_size")
            if coord is not None and size is not None and coord >= size:
                raise ConfigError(f"Parallel.{dim} must be < {dim}_size ({size}), got {coord!r}")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, where: str = "parallel") -> Parallel:
        """Build from ``{"tp": 1, "dp": 3}``, with sizes as ``"tp_size": 4`` or
        ``"sizes": {"tp": 4}``; an unknown key is a ``ConfigError`` naming it."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{where} must be a mapping of parallel coordinates, got {mapping!r}")
        known = {*DIMS, *(f"{d}_size" for d in DIMS)}
        fields: dict[str, Any] = {}
        for key, value in mapping.items():
            if key == "sizes":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"{where}.sizes must be a mapping such as {{'tp': 4}}, got {value!r}")
                for dim, size in value.items():
                    if dim not in DIMS:
                        raise ConfigError(
                            f"unknown dimension {dim!r} in {where}.sizes{suggest(dim, DIMS)} (known: {', '.join(DIMS)})"
                        )
                    fields[f"{dim}_size"] = size
            elif key in known:
                fields[key] = value
            else:
                raise ConfigError(
                    f"unknown key {key!r} in {where}{suggest(key, [*known, 'sizes'])} "
                    f"(known: {', '.join(DIMS)}, their '<dim>_size', sizes)"
                )
        return cls(**fields)

    def coords(self) -> dict[str, int]:
        """The known coordinates, in :data:`DIMS` order (:func:`known_coords`)."""
        return dict(known_coords(self))

    def sizes(self) -> dict[str, int]:
        """The known dimension sizes, in :data:`DIMS` order."""
        return {d: v for d in DIMS if (v := getattr(self, f"{d}_size")) is not None}

    def __bool__(self) -> bool:
        return bool(self.coords() or self.sizes())
