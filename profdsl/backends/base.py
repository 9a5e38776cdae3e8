"""The backend protocols, the trace label, and the null capture."""

from __future__ import annotations

from typing import Protocol

import attrs

from profdsl.config import Schedule

__all__ = ["NULL_CAPTURE", "Annotator", "Capture", "NullCapture", "Session", "TraceLabel"]


@attrs.frozen(kw_only=True)
class TraceLabel:
    """Who and what a capture session records: everything a trace's name and metadata need."""

    role: str
    stage: str | None
    step: int | None
    rank: int
    world_size: int
    save_path: str
    host: str
    pid: int
    config_hash: str
    roles: tuple[str, ...] = ()
    manifest: bool = True  # False for files that are moved (and recorded) elsewhere later


class Session(Protocol):
    """One open capture session."""

    @property
    def scheduled(self) -> bool:
        """Whether the session follows a mini-batch schedule."""

    def mini_batch_done(self) -> None:
        """One update mini-batch ended: advance the schedule."""

    def join(self, role: str) -> None:
        """Another role of this process shares the session; it stays open until all close."""

    def close(self) -> None:
        """Leave the session; the last participant stops it and writes its artifacts."""


class Capture(Protocol):
    """Opens capture sessions; at most one is open per process at a time."""

    def open(self, label: TraceLabel, schedule: Schedule | None, *, join: bool) -> Session | None:
        """Open a session, or join the open one when ``join``; None when nothing was opened."""

    def current(self) -> Session | None:
        """The session open in this process, if any."""


class Annotator(Protocol):
    """Marks named regions; ``pop`` takes what ``push`` returned."""

    def push(self, name: str) -> object:
        """Open a region."""

    def pop(self, token: object) -> None:
        """Close the region ``push`` opened."""


class NullCapture:
    """Captures nothing: the capture of a rank, step or config that is not profiled."""

    def open(self, label: TraceLabel, schedule: Schedule | None, *, join: bool) -> Session | None:
        """Open nothing."""
        return None

    def current(self) -> Session | None:
        """Nothing is ever open."""
        return None


NULL_CAPTURE = NullCapture()
