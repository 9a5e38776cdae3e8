"""How big a trace will be: its bytes of plain JSON (what a viewer loads) per mini-batch, or per
trace when a trace records no mini-batch, measured on earlier traces, and the estimate of a trace
to come (``TorchOptions.max_trace_mb``, ``profdsl plan``): the rule, and why it errs high, as
docs/configuration.md ("Trace size") says.

Examples:
    >>> book = SizeBook()
    >>> book.estimate("update", 4) is None  # nothing measured yet
    True
    >>> book.learn("update", json_bytes=3_000_000, mini_batches=2)
    >>> book.estimate("update", 4), book.estimate("update", None)
    (6000000, 3000000)

Its sizes are bytes; the budget's unit and how it prints one are ``core/_units`` (``MB``,
``mb_text``).
"""

from __future__ import annotations

import attrs

__all__ = ["Sample", "SizeBook"]


@attrs.frozen
class Sample:
    """One measured trace: its size as plain JSON and the mini-batches it recorded (0: none)."""

    json_bytes: int
    mini_batches: int


class SizeBook:
    """The sizes of one role's traces, per stage (None: its step traces), as measured in this
    process (the last trace of each counts). ``learn`` is called on the writer's thread, the
    estimates are read on the training thread: each is one dictionary operation."""

    def __init__(self) -> None:
        self._last: dict[str | None, Sample] = {}

    def learn(self, stage: str | None, *, json_bytes: int, mini_batches: int) -> None:
        """A trace of ``stage`` was written: ``json_bytes`` of plain JSON for ``mini_batches``."""
        self._last[stage] = Sample(json_bytes=json_bytes, mini_batches=mini_batches)

    def samples(self) -> dict[str | None, Sample]:
        """The last trace measured of each stage."""
        return dict(self._last)

    def sample(self, stage: str | None) -> Sample | None:
        """The last trace measured for ``stage``, if any."""
        return self._last.get(stage)

    def estimate(self, stage: str | None, mini_batches: int | None) -> int | None:
        """The likely size of a trace of ``stage`` with ``mini_batches`` (None or 0: as many as the
        last one's, or a whole trace of no mini-batch), or None before a first trace of it."""
        sample = self._last.get(stage)
        if sample is None or not mini_batches or not sample.mini_batches:
            return None if sample is None else sample.json_bytes
        return round(sample.json_bytes / sample.mini_batches * mini_batches)
