"""What kind of work a stage is: the vocabulary of the step ledger (``docs/ledger.md``).

A stage's kind is the one it declares (the trace metadata's ``profdsl.regions.kinds``, which
``profile_stage(..., kind=...)`` is to fill), else the first default whose pattern its
label matches (lower-cased, shell-style ``*``), else ``other``. A declared kind profdsl does not
know (written by a newer version) counts as ``other``.

The default patterns are :data:`DEFAULTS`, tabled in ``docs/ledger.md``.

Examples:
    >>> kind_of("compute_ref_log_prob"), kind_of("generate_sequences"), kind_of("update_actor")
    ('inference', 'generation', 'update')
    >>> kind_of("sync_weights"), kind_of("Compute_Reward"), kind_of("load_batch"), kind_of("save_ckpt")
    ('weight_sync', 'reward', 'data', 'other')
    >>> kind_of("update_actor", declared="generation"), kind_of("x", declared="from the future")
    ('generation', 'other')
"""

from __future__ import annotations

import fnmatch
from typing import Final

__all__ = ["DEFAULTS", "GENERATION", "OTHER", "STAGE_KINDS", "kind_of"]

GENERATION: Final = "generation"
OTHER: Final = "other"
#: Every kind, in the order the ledger shows them.
STAGE_KINDS: Final = (GENERATION, "inference", "update", "weight_sync", "reward", "data", OTHER)
#: The default kinds by label, tried in order: the first kind with a matching pattern wins.
DEFAULTS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("weight_sync", ("*sync*weight*", "*weight*sync*", "update_weights*")),
    ("reward", ("*reward*", "*rm_score*")),
    ("inference", ("*log_prob*", "*logprob*", "ref", "ref_*", "reference*", "compute_values*")),
    (GENERATION, ("gen", "gen_*", "generat*", "rollout*")),
    ("update", ("update_*", "update", "train*", "mini_batch*")),
    ("data", ("*data*", "load*batch*")),
)


def kind_of(label: str, declared: str | None = None) -> str:
    """The kind of the stage ``label``: ``declared`` when it is one of :data:`STAGE_KINDS`
    (``other`` for a declared kind profdsl does not know), else its default by name."""
    if declared is not None:
        return declared if declared in STAGE_KINDS else OTHER
    name = label.lower()
    for kind, patterns in DEFAULTS:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            return kind
    return OTHER
