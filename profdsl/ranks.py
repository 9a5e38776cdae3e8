"""Ranks and rollout replicas (pure: no torch import).

Two kinds of rank appear in profdsl:

* A *global rank* is a process's (or GPU's) index in the whole job, as a config's ``ranks``
  name it.
* A rollout engine *replica* owns ``replica_world_size`` consecutive global ranks:
  :func:`replicas_for_ranks` says which replicas own selected ranks, and
  :func:`local_rank_from_trace_name` tells which GPU of a replica wrote an engine trace file.
"""

from profdsl.core._ranks import local_rank_from_trace_name, replicas_for_ranks

__all__ = ["local_rank_from_trace_name", "replicas_for_ranks"]
