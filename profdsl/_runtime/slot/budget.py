"""One session's trace-size budget (``TorchOptions.max_trace_mb``): the estimate of its trace
before it starts, and the mini-batch at which a trace being recorded passes the budget.

The estimate comes from the role's earlier traces of the same stage in this process
(:class:`~profdsl.core._trace_size.SizeBook`, told each trace's size by the writer). Before a
capture starts, a trace estimated past the budget is said once (per role and stage). While it
records, each recorded mini-batch that ends adds one to the trace's count; when the estimate of
that many passes the budget, the session pauses collection for the rest of the window (the
trace is ended early at a mini-batch boundary), and the trace is recorded ``truncated`` with
the reason and its size. A capture that cannot pause (one of every thread) is never cut: that
is said once instead. Without an earlier trace nothing is estimated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from profdsl._capture.base import Backend
from profdsl.collect._export import TraceLabel
from profdsl.core._log import once
from profdsl.core._trace_size import SizeBook
from profdsl.core._units import MB, mb_text

__all__ = ["Budget"]


class Budget:
    """The trace-size bound of one session (of ``label``'s role and stage)."""

    def __init__(self, label: TraceLabel, backend: Backend) -> None:
        self.label = label
        self.sizes: SizeBook | None = backend.sizes
        self.limit: int | None = backend.max_trace_bytes
        self.batches = 0  # mini-batches recorded into the trace being recorded
        self.cut: str | None = None  # why the trace being recorded was ended early
        self._where = f"{label.role} stage {label.stage!r}" if label.stage else label.role  # for messages

    def ahead(self, mini_batches: int | None) -> None:
        """Before the capture starts: say once when its trace is likely to pass the budget."""
        if self.sizes is None or self.limit is None:
            return
        likely = self.sizes.estimate(self.label.stage, mini_batches)
        if likely is None or likely <= self.limit:
            return
        once(
            f"budget-ahead:{self.label.role}:{self.label.stage}",
            logging.WARNING,
            "[profdsl rank %s] the next %s trace will likely weigh %s of JSON (from the last one), over "
            "TorchOptions.max_trace_mb=%g: it is ended at the mini-batch where it passes the bound",
            self.label.rank,
            self._where,
            mb_text(likely),
            self.limit / MB,
        )

    def count(self) -> None:
        """A recorded mini-batch of the trace (not cut) ended where the window ends anyway:
        counted only."""
        self.batches += 1

    def recorded(self, *, pausable: bool) -> bool:
        """A recorded mini-batch of the trace (not cut: after a cut the session counts nothing,
        :mod:`~profdsl._runtime.slot.recording`) ended: True when the trace now passes the budget
        and is to be ended here (``cut`` says why); never for a capture that cannot pause."""
        self.batches += 1
        if self.sizes is None or self.limit is None:
            return False
        likely = self.sizes.estimate(self.label.stage, self.batches + 1)
        if likely is None or likely <= self.limit:
            return False
        per = _per_mini_batch(self.sizes, self.label.stage)
        if not pausable:
            once(
                f"budget-unpausable:{self.label.role}:{self.label.stage}",
                logging.WARNING,
                "[profdsl rank %s] the %s trace will pass TorchOptions.max_trace_mb=%g%s, but its capture records "
                "every thread and cannot pause: it is not ended early",
                self.label.rank,
                self._where,
                self.limit / MB,
                per,
            )
            return False
        self.cut = (
            f"ended early after {self.batches} mini-batch(es): a trace of {self.batches + 1} would weigh about "
            f"{mb_text(likely)} of JSON{per}, over TorchOptions.max_trace_mb={self.limit / MB:g}"
        )
        once(
            f"budget-cut:{self.label.role}:{self.label.stage}",
            logging.WARNING,
            "[profdsl rank %s] the %s trace of step %s is %s; the rest of its window is not recorded",
            self.label.rank,
            self._where,
            self.label.step,
            self.cut,
        )
        return True

    def handed(self) -> tuple[str | None, Callable[[int], object] | None]:
        """A trace was handed over: why it was cut (None: it was not) and the callback that
        learns its size; the next trace starts uncut, with no mini-batch counted."""
        cut, batches, sizes, stage = self.cut, self.batches, self.sizes, self.label.stage
        self.cut, self.batches = None, 0
        if sizes is None:
            return cut, None

        def learn(json_bytes: int) -> None:
            sizes.learn(stage, json_bytes=json_bytes, mini_batches=batches)

        return cut, learn


def _per_mini_batch(sizes: SizeBook, stage: str | None) -> str:
    """`` (N MB per mini-batch, measured on the last trace)``, or nothing when unknown."""
    sample = sizes.sample(stage)
    if sample is None or not sample.mini_batches:
        return ""
    return f" ({mb_text(sample.json_bytes / sample.mini_batches)} per mini-batch, measured on the last trace)"
