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

from profdsl.core import ranks as _ranks
from profdsl.core.ranks import *  # noqa: F403  (the public names; their one home is profdsl.core.ranks)

__all__ = _ranks.__all__
