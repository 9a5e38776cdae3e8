"""Where a rank sits (pure): its global rank, its rank on its node and its parallel coordinates,
and the grid layouts ``profdsl plan`` predicts for.

A :class:`Topology` is what rank selectors are resolved against
(:class:`profdsl.core._selection.Selection`). A running process builds its own
(:func:`profdsl.core._parallel_discovery.process_topology`); a :class:`GridLayout` gives every
rank's for a regular layout.

Examples:
    >>> layout = GridLayout(world_size=16, tp=2, pp=2, nodes=2)
    >>> layout.dp, layout.topology(11).parallel.coords(), layout.topology(11).local_rank
    (4, {'tp': 1, 'pp': 1, 'dp': 1, 'cp': 0}, 3)
"""

from __future__ import annotations

from typing import Final

import attrs

from profdsl.config._checks import MAX_WIDE_INDEX, int_in, require_int
from profdsl.config._parallel import MAX_COORD, Parallel
from profdsl.errors import ConfigError

__all__ = ["GRID_ORDER", "GridLayout", "Topology"]

#: The dimensions of a grid layout, fastest-varying first: Megatron's default rank order
#: (tensor-parallel neighbours are adjacent ranks, pipeline stages the farthest apart).
GRID_ORDER: Final = ("tp", "cp", "dp", "pp")


@attrs.frozen(kw_only=True)
class Topology:
    """One rank's place in the job.

    Attributes:
        rank: the global rank.
        world_size: the number of ranks.
        local_rank: the rank on its node (``LOCAL_RANK``), or None when not known.
        parallel: the parallel coordinates and dimension sizes that are known.
    """

    rank: int = attrs.field(validator=int_in(0, MAX_WIDE_INDEX - 1))
    world_size: int = attrs.field(validator=int_in(1, MAX_WIDE_INDEX))
    local_rank: int | None = attrs.field(default=None, validator=int_in(0, MAX_WIDE_INDEX - 1, optional=True))
    parallel: Parallel = attrs.field(factory=Parallel)

    def __attrs_post_init__(self) -> None:
        if self.rank >= self.world_size:
            raise ConfigError(f"Topology.rank must be < world_size ({self.world_size}), got {self.rank}")


@attrs.frozen(kw_only=True)
class GridLayout:
    """A regular layout: ``world_size`` ranks as a ``tp × cp × dp × pp`` grid (``dp`` is what is
    left), ranks numbered with ``tp`` varying fastest (:data:`GRID_ORDER`), and ``nodes`` nodes of
    ``world_size / nodes`` consecutive ranks each.

    Raises:
        ConfigError: a degree that is not an integer >= 1, or that does not divide the world size.
    """

    world_size: int = attrs.field(validator=int_in(1, MAX_WIDE_INDEX))
    tp: int = attrs.field(default=1, validator=int_in(1, MAX_COORD + 1))
    pp: int = attrs.field(default=1, validator=int_in(1, MAX_COORD + 1))
    cp: int = attrs.field(default=1, validator=int_in(1, MAX_COORD + 1))
    nodes: int = attrs.field(default=1, validator=int_in(1, MAX_WIDE_INDEX))

    def __attrs_post_init__(self) -> None:
        model = self.tp * self.pp * self.cp
        if self.world_size % model:
            raise ConfigError(
                f"world size {self.world_size} is not a multiple of tp*pp*cp = {self.tp}*{self.pp}*{self.cp} = {model}"
            )
        if self.dp > MAX_COORD + 1:
            raise ConfigError(f"dp = world size / (tp*pp*cp) must be at most {MAX_COORD + 1}, got {self.dp}")
        if self.world_size % self.nodes:
            raise ConfigError(f"world size {self.world_size} is not a multiple of nodes = {self.nodes}")

    @property
    def dp(self) -> int:
        """The data-parallel degree: what the world size leaves after ``tp * pp * cp``."""
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def ranks_per_node(self) -> int:
        """Ranks on each node."""
        return self.world_size // self.nodes

    def topology(self, rank: int) -> Topology:
        """Rank ``rank``'s place in this layout."""
        require_int("rank", rank, 0, self.world_size - 1)
        sizes = {dim: self.dp if dim == "dp" else int(getattr(self, dim)) for dim in GRID_ORDER}
        coords: dict[str, int] = {}
        rest = rank
        for dim, size in sizes.items():
            coords[dim], rest = rest % size, rest // size
        return Topology(
            rank=rank,
            world_size=self.world_size,
            local_rank=rank % self.ranks_per_node,
            parallel=Parallel(**coords, **{f"{dim}_size": size for dim, size in sizes.items()}),
        )

    def node_of(self, rank: int) -> int:
        """The node index of ``rank``."""
        return require_int("rank", rank, 0, self.world_size - 1) // self.ranks_per_node
