"""The region names profdsl opened in this process, written into each trace's metadata so that
``profdsl summary`` can tell profdsl's stages and mini-batches from other annotations."""

from __future__ import annotations

__all__ = ["MINI_BATCHES", "STAGES", "as_metadata"]

STAGES: set[str] = set()
MINI_BATCHES: set[str] = set()  # base names: regions are f"{base}{index}"


def as_metadata() -> dict[str, list[str]]:
    """The names, sorted, for a trace's ``profdsl.regions``."""
    return {"stages": sorted(STAGES), "mini_batches": sorted(MINI_BATCHES)}
