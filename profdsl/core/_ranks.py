"""The rollout replicas a config's ranks select and the rank an engine trace's name carries (the
public face is :mod:`profdsl.ranks`), and rank discovery (:mod:`profdsl.core._discovery`).
Which ranks a config traces is :class:`~profdsl.core._selection.Selection`'s rule."""

from __future__ import annotations

from collections.abc import Collection

from profdsl.config._checks import require_int
from profdsl.core._discovery import RankInfo, discover_rank
from profdsl.core._engine_names import Ambiguous, read_engine_rank
from profdsl.core._selection import Selection

__all__ = [
    "RankInfo",
    "discover_rank",
    "local_rank_from_trace_name",
    "replicas_for_ranks",
]


def replicas_for_ranks(
    ranks: Collection[int], replica_world_size: int, *, all_ranks: bool = False, num_replicas: int
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
    width = require_int("replica_world_size", replica_world_size, 1)
    count = require_int("num_replicas", num_replicas, 0)
    for member in ranks:
        require_int("ranks members", member, 0)
    return Selection(enabled=True, ranks=frozenset(ranks), all_ranks=all_ranks).replicas(width, count)


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
    width = require_int("replica_world_size", replica_world_size, 1)
    value = read_engine_rank(name)
    if value is None:
        return 0 if width == 1 else None
    if isinstance(value, Ambiguous) or value >= width:
        return None
    return value
