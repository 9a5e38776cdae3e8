"""What a folder holds: one row per artifact, from the manifest, or from file names when a
folder has no manifest (traces copied by hand, an older run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from profdsl.collect.manifest import MANIFEST_NAME, read_manifest
from profdsl.core.naming import ARTIFACT_SUFFIXES, NSYS_EXT, TraceName

__all__ = ["Artifact", "FolderError", "artifacts"]



class FolderError(Exception):
    """The folder is missing, not a folder, or holds nothing profdsl can read."""


@attrs.frozen
class Artifact:
    """One artifact of a folder (a manifest record, or what a file name says)."""

    kind: str
    path: str | None
    role: str | None = None
    stage: str | None = None
    step: int | None = None
    rank: int | None = None
    world_size: int | None = None
    replica: int | None = None
    window: tuple[int, int] | None = None
    bytes: int | None = None
    status: str = "ok"
    record: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def label(self) -> str:
        """A short name for the process row of this artifact: role, rank, replica."""
        parts = [self.role or "unknown"]
        if self.replica is not None:
            parts.append(f"replica{self.replica}")
        parts.append(f"rank{self.rank}" if self.rank is not None else "rank?")
        return " ".join(parts)


def _from_record(record: dict[str, Any]) -> Artifact:
    window = record.get("window")
    return Artifact(
        kind=record.get("kind", "trace"), path=record.get("path"), role=record.get("role"),
        stage=record.get("stage"), step=record.get("step"), rank=record.get("rank"),
        world_size=record.get("world_size"), replica=record.get("replica"),
        window=tuple(window) if window else None, bytes=record.get("bytes"),
        status=record.get("status") or "ok", record=record)


def _from_name(folder: Path, name: str) -> Artifact | None:
    parsed = TraceName.try_parse(name)
    if parsed is None:
        return None
    kind = "nsys" if parsed.ext == NSYS_EXT else "rollout" if parsed.role == "rollout" else "trace"
    return Artifact(kind=kind, path=name, role=parsed.role, stage=parsed.stage, step=parsed.step,
                    rank=parsed.rank, world_size=parsed.world_size, replica=parsed.replica,
                    window=parsed.window, bytes=(folder / name).stat().st_size)


def artifacts(folder: str | os.PathLike[str]) -> list[Artifact]:
    """Every artifact of ``folder``: the manifest's records, or parsed trace names without one.

    Raises:
        FolderError: ``folder`` is missing or not a folder, or holds no artifact at all.
    """
    path = Path(folder)
    if not path.exists():
        raise FolderError(f"{folder}: no such folder")
    if not path.is_dir():
        raise FolderError(f"{folder}: not a folder")
    rows = [_from_record(r) for r in read_manifest(path)] if (path / MANIFEST_NAME).exists() else []
    if not rows:  # no manifest, or an empty one: read the file names
        rows = [a for n in sorted(os.listdir(path)) if n.endswith(ARTIFACT_SUFFIXES)
                for a in [_from_name(path, n)] if a is not None]
    if not rows:
        raise FolderError(f"{folder}: no profdsl manifest and no profdsl trace files")
    return rows
