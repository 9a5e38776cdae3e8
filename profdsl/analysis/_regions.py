"""Which events of a trace are profdsl's own regions, and what they stand for.

A trace's ``profdsl.regions`` metadata lists the stage labels and mini-batch base labels whose
regions profdsl opened while it recorded (a discrete trace's own ``profdsl.stage`` too); torch
holds each region under its encoded name (:mod:`profdsl.core._labels`), a mini-batch's as its
base followed by its index. ``profdsl.regions.continued`` counts, per region label, the region
events of the trace that continue an entry begun earlier (a region closed around a schedule step,
a ``yield`` or an ``await`` and reopened): they are time of one entry, not entries of their own;
``profdsl.regions.continued_at`` says the same per path (the labels of the regions each sits in,
then its own), which tells apart a label that sits at several paths.

This is the one home of that reading; every command that turns traces into times goes through
:class:`RegionNames`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from profdsl.core._labels import trace_names
from profdsl.records.meta import Regions, header_meta

__all__ = ["ENGINE_STAGE", "RegionNames"]

#: The stage an engine's own trace (no profdsl region) stands for: its span is generation.
ENGINE_STAGE = "generate (engine)"
_DIGITS = "0123456789"


@attrs.frozen
class RegionNames:
    """The region names of one trace: ``stages`` and mini-batch ``bases`` (trace name → label),
    ``continued`` (label → region events that continue an earlier entry), ``continued_at``
    (the same by path of labels, when the trace says) and ``kinds`` (label → the kind of work
    it declared, when the trace says: :func:`profdsl.core._kinds.kind_of`).

    Examples:
        >>> names = RegionNames.from_header({"profdsl": {"regions": {
        ...     "stages": ["update", "g\\u00e9n"], "mini_batches": ["mb1"]}}})
        >>> names.label("update"), names.label("g%C3%A9n"), names.label("mb12"), names.label("x")
        (('update', None), ('gén', None), ('mb1', 2), None)
    """

    stages: Mapping[str, str]
    bases: Mapping[str, str]
    continued: Mapping[str, int] = attrs.field(factory=dict)
    continued_at: Mapping[tuple[str, ...], int] = attrs.field(factory=dict)
    kinds: Mapping[str, str] = attrs.field(factory=dict)

    @classmethod
    def from_header(cls, meta: Mapping[str, Any]) -> RegionNames:
        """Read a trace's header (:func:`profdsl.analysis._reader.header`, already checked)."""
        own = header_meta(meta)
        if own is None:
            return cls({}, {})
        regions = own.regions or Regions()
        stages = list(regions.stages or ())
        if own.stage is not None:  # a discrete trace's own stage, even unlisted
            stages.append(own.stage)
        bases = list(regions.mini_batches or ())
        counts: dict[str, int] = {}
        for name, count in (regions.continued or {}).items():
            if count > 0:
                found = (name, None) if name in stages else _split(name, {b: b for b in bases})
                if found is not None:
                    counts[found[0]] = counts.get(found[0], 0) + count
        return cls(
            trace_names(stages),
            trace_names(bases),
            counts,
            continued_at=dict(regions.continued_at or ()),
            kinds=dict(regions.kinds or {}),
        )

    @property
    def empty(self) -> bool:
        """Whether no event can be a profdsl region."""
        return not self.stages and not self.bases

    def label(self, name: str) -> tuple[str, int | None] | None:
        """The label of the region named ``name`` and, for a mini-batch, its index; None when
        ``name`` is no profdsl region of this trace.

        A mini-batch's name is its base followed by its index; the base may itself end in digits
        (``mb1``, or an escape such as ``%A9``), so each split of the trailing digits is tried,
        the longest base first; an index has no leading zero.
        """
        stage = self.stages.get(name)
        if stage is not None:
            return stage, None
        return _split(name, self.bases) if self.bases else None

    def prefixes(self) -> list[str]:
        """Every prefix a region's name starts with (stage names whole, mini-batch bases): what a
        fast scan looks for."""
        return sorted(set(self.stages) | set(self.bases))


def _split(name: str, bases: Mapping[str, str]) -> tuple[str, int] | None:
    """``name`` as a mini-batch of one of ``bases`` (name → label): its label and index."""
    if not name[-1:].isdigit():
        return None
    for cut in range(len(name) - 1, len(name.rstrip(_DIGITS)) - 1, -1):  # the longest base first
        if name[cut] == "0" and cut < len(name) - 1:
            continue
        base = bases.get(name[:cut])
        if base is not None:
            return base, int(name[cut:])
    return None
