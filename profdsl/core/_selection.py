"""Which ranks, hook ranks and rollout replicas a config selects: the one home of those rules.

A :class:`Selection` is built once from a config (its ranks were validated when the config was
made, its selector is parsed here, once); its questions then take a rank's
:class:`~profdsl.core._topology.Topology` and validate nothing again.

Examples:
    >>> from profdsl.config import ProfilerConfig
    >>> from profdsl.core._topology import GridLayout
    >>> layout = GridLayout(world_size=8, tp=2, pp=2)
    >>> s = Selection.of(ProfilerConfig(enable=True, select="tp == 0 and pp in {0, last}"))
    >>> [r for r in range(8) if s.matches(layout.topology(r))]
    [0, 2, 4, 6]
    >>> sorted(Selection.of(ProfilerConfig(enable=True, ranks=[3])).replicas(2, 4))
    [1]
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import attrs

from profdsl.config.selector import LAST, Every, FirstPerNode, OnePerDpGroup, Selector, Term, parse_selector
from profdsl.core._topology import Topology
from profdsl.errors import ConfigError

if TYPE_CHECKING:
    from profdsl.config import ProfilerConfig

__all__ = ["Selection"]


@attrs.frozen(kw_only=True)
class Selection:
    """The rank rules of one config, resolved once.

    Attributes:
        enabled: whether profiling is on at all.
        ranks: the ranks named (empty: rank 0).
        all_ranks: every rank is profiled.
        select: the rank selector; when set, it alone decides which ranks are traced.
        hook: whether a finish-hook command is configured.
        hook_ranks: ranks the hook runs on (empty: the traced ranks).
        hook_all_ranks: the hook runs on every rank.
    """

    enabled: bool = False
    ranks: frozenset[int] = frozenset()
    all_ranks: bool = False
    select: Selector | None = None
    hook: bool = False
    hook_ranks: frozenset[int] = frozenset()
    hook_all_ranks: bool = False

    @classmethod
    def of(cls, config: ProfilerConfig) -> Selection:
        """The selection of ``config`` (whose fields were validated when it was built)."""
        hook = config.finish_hook
        return cls(
            enabled=config.enable,
            ranks=frozenset(config.ranks),
            all_ranks=config.all_ranks,
            select=None if config.select is None else parse_selector(config.select),
            hook=bool(hook.cmd),
            hook_ranks=frozenset(hook.ranks),
            hook_all_ranks=hook.all_ranks,
        )

    def matches(self, topology: Topology) -> bool:
        """The rank rule alone (``enabled`` not looked at): with a selector, whether the rank
        matches every term; else every rank with ``all_ranks``, rank 0 when ``ranks`` is empty,
        otherwise membership in ``ranks``.

        Raises:
            ConfigError: a selector term needs something ``topology`` lacks.
        """
        if self.select is not None:
            return all(_matches(term, topology) for term in self.select.terms)
        return self.all_ranks or (topology.rank in self.ranks if self.ranks else topology.rank == 0)

    def runs_hook(self, rank: int, traced: bool) -> bool:
        """Whether the finish hook runs on ``rank`` (``traced``: whether the rank is traced, by
        the config or a request): every rank with ``hook_all_ranks``, membership in a non-empty
        ``hook_ranks``, else ``traced``. No command: never."""
        if not (self.enabled and self.hook):
            return False
        return self.hook_all_ranks or (rank in self.hook_ranks if self.hook_ranks else traced)

    def named_ranks(self, world_size: int) -> frozenset[int] | None:
        """The ranks of a world of ``world_size`` the rank rule names, when they can be told
        without each rank's coordinates (no selector; ``enabled`` not looked at); None with a
        selector."""
        if self.select is not None:
            return None
        if self.all_ranks:
            return frozenset(range(world_size))
        return frozenset(r for r in (self.ranks or {0}) if r < world_size)

    def replicas(self, width: int, count: int) -> frozenset[int]:
        """The rollout replicas of ``width`` GPUs each (``count`` of them) that are profiled:
        every one with ``all_ranks``, replica 0 with empty ``ranks``, else the owners of the named
        global ranks (the selector does not reach replicas). Disabled: none."""
        if not self.enabled or count <= 0:
            return frozenset()
        if self.all_ranks:
            return frozenset(range(count))
        if not self.ranks:
            return frozenset({0})
        return frozenset(owner for owner in (r // width for r in self.ranks) if owner < count)

    def replica_gpus(self, width: int, count: int) -> frozenset[int]:
        """The global GPU ranks whose rollout traces are kept: the named ranks, or every GPU of
        each selected replica when ``ranks`` is empty or ``all_ranks`` is set (as verl does)."""
        if not self.enabled:
            return frozenset()
        if self.ranks and not self.all_ranks:
            return frozenset(r for r in self.ranks if r // width < count)
        return frozenset(
            g for replica in self.replicas(width, count) for g in range(replica * width, (replica + 1) * width)
        )

    def asks(self, requested: Collection[int] | str | Selector | None, topology: Topology, traced: bool) -> bool:
        """Whether a capture request naming ``requested`` takes the rank of ``topology``: None
        means the ranks the config traces (``traced``), ``"all"`` every rank, a collection its
        members, a selector (or its text) the ranks it matches."""
        if requested is None:
            return traced
        if requested == "all":
            return True
        if isinstance(requested, str):
            requested = parse_selector(requested)
        if isinstance(requested, Selector):
            return all(_matches(term, topology) for term in requested.terms)
        return topology.rank in requested


def _missing(term: Term, topology: Topology, what: str) -> ConfigError:
    return ConfigError(
        f"the selector term {term.format()!r} needs {what}, which rank {topology.rank} does not "
        "have: pass Profiler(parallel=...) (a dict, profdsl.Parallel or a DeviceMesh with named "
        "dimensions), or initialise Megatron's parallel_state or a named DeviceMesh first"
    )


def _matches(term: Term, topology: Topology) -> bool:
    """Whether ``topology``'s rank matches one selector term (the meaning of each term)."""
    parallel = topology.parallel
    if isinstance(term, Every):
        return topology.rank % term.n == 0
    if isinstance(term, FirstPerNode):
        if topology.local_rank is None:
            if topology.world_size == 1:
                return True
            raise _missing(term, topology, "its rank on its node (LOCAL_RANK)")
        return topology.local_rank == 0
    if isinstance(term, OnePerDpGroup):
        if parallel.dp is None:
            raise _missing(term, topology, "the dp coordinate")
        return all(v == 0 for d, v in parallel.coords().items() if d != "dp")
    if term.dim == "rank":
        value, last = topology.rank, topology.world_size - 1
    else:
        value, last = getattr(parallel, term.dim), getattr(parallel, f"{term.dim}_size")
        if value is None:
            raise _missing(term, topology, f"the {term.dim} coordinate")
        if last is not None:
            last -= 1
    for wanted in term.values:
        if wanted == LAST:
            if last is None:
                raise _missing(term, topology, f"the {term.dim} size (for 'last')")
            wanted = last
        if value == wanted:
            return True
    return False
