"""A session's traces: the ``profdsl`` metadata torch writes into each, and their way to the
writer: noted as torch hands each over (inside its stop or schedule step), then handed to the
writer once torch is done, each after waiting for an export slot; or, for a session that cannot
be ended, its loss recorded instead.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from profdsl._capture.base import Held
from profdsl._runtime.slot.budget import Budget
from profdsl._runtime.slot.recording import Recording
from profdsl._runtime.slot.region_book import RegionBook
from profdsl._runtime.writer.jobs import ExportJob, RecordJob
from profdsl._runtime.writer.writer import Writer
from profdsl.collect._export import PendingTrace, TraceLabel
from profdsl.core._completeness import Expect
from profdsl.core._log import once
from profdsl.core._units import ms_of
from profdsl.records.fields import to_json
from profdsl.records.meta import TraceMeta

__all__ = ["Traces"]


class Traces:
    """The traces of one session (``kind``: ``"step"`` or ``"stage"``; ``book``: its regions;
    ``budget`` and ``recording``: whether each was cut and what it recorded), given to ``writer``."""

    def __init__(self, kind: str, book: RegionBook, writer: Writer, budget: Budget, recording: Recording) -> None:
        self.kind, self.book, self.writer, self.budget, self.recording = kind, book, writer, budget, recording
        self.missed = False  # work of its window ran on a thread it cannot see (recorded apart)
        self.dropped = False  # its loss is recorded: what it still ends is not written
        self.first = False  # the process's first session of its tool (its start pays the set-up)
        # The traces torch handed over, not yet given to the writer: each as what the capture
        # knew of it (the pending trace but its name and cost), what it held its caller, and when.
        self._ready: list[tuple[functools.partial[PendingTrace], Held, float]] = []

    def describe(self, label: TraceLabel, roles: tuple[str, ...], window: tuple[int, int] | None) -> dict[str, Any]:
        """The ``profdsl`` metadata of the trace named by ``label`` (its fused ``roles``)."""
        return to_json(
            TraceMeta(
                role=label.role,
                roles=roles,
                stage=label.stage,
                step=label.step,
                rank=label.rank,
                world_size=label.world_size,
                window=window,
                windows=self.book.windows(),
                config_hash=label.config_hash,
                host=label.host,
                pid=label.pid,
                regions=self.book.regions(window),
                parallel=label.parallel.coords(),
                parallel_sizes=label.parallel.sizes(),
                capture=label.capture,
            )
        )

    def pending(self) -> int:
        """How many traces torch handed over that are not yet given to the writer."""
        return len(self._ready)

    def sink(
        self,
        write: Callable[[str], object],
        window: tuple[int, int] | None,
        time_ms: int,
        held: Held,
        expect: Expect,
    ) -> None:
        """A trace is ready (called inside the capture's stop or schedule step): noted, to be
        handed to the writer once torch is done (:meth:`hand_over`, by the session). ``write(path)`` has torch
        write its events; ``held``: how long the capture held up its thread for it;
        ``expect``: what the capture knows of its completeness (the budget adds whether it was
        cut)."""
        cut, measured = self.budget.handed()
        expect = attrs.evolve(expect, truncated=cut, regions=self.recording.opened_regions(window), missed=self.missed)
        trace = functools.partial(
            PendingTrace, write=write, window=window, time_ms=time_ms, expect=expect, measured=measured
        )
        self._ready.append((trace, held, time.perf_counter()))

    def hand_over(self, label: TraceLabel, cut_short: str | None) -> None:
        """Hand the ready traces to the writer, each after waiting for an export slot (at most
        ``export_timeout_s``; the trace goes when the wait runs out, and the rest without
        waiting when an interrupt cuts it short, then the interrupt goes on). Each record says
        how long the training thread was blocked for its trace, and of that: the session's
        start (on its first trace; ``init_ms`` for the process's first session), the call that
        ended its recording up to this hand-over, and the wait for an export slot."""
        ready, self._ready = self._ready, []
        interrupt = None
        for trace, held, noted in ready:
            if self.dropped:
                break  # recorded lost already (its owner came back after close() or exit)
            slot_wait = time.perf_counter()
            if interrupt is None:
                try:
                    if not self.writer.wait_below("export", label.export.in_flight, label.export.timeout_s):
                        once(
                            "export-slots",
                            logging.WARNING,
                            "profdsl: every export slot stayed busy for %gs; the next trace is handed over anyway",
                            label.export.timeout_s,
                        )
                except BaseException as exc:
                    interrupt = exc
            waited_ms = ms_of(time.perf_counter() - slot_wait)
            extra: dict[str, object] = dict(windows=self.book.windows()) if self.kind == "step" else {}
            extra.update(stop_ms=ms_of(held.end_s + slot_wait - noted))
            if held.start_s is not None:
                extra["init_ms" if self.first else "start_ms"] = ms_of(held.start_s)
                self.first = False
            if cut_short:
                extra.update(note=f"stopped early: {cut_short}")
            blocked_ms = ms_of(held.total_s + time.perf_counter() - noted)
            self.writer.submit(ExportJob(trace(label=label, extra=extra, blocked_ms=blocked_ms, wait_ms=waited_ms)))
        if interrupt is not None:
            raise interrupt

    def record_loss(self, label: TraceLabel, status: str, reason: str) -> None:
        """The trace named by ``label`` is lost (``status``, ``reason``): its record goes to the
        writer."""
        once(
            f"session-lost:{label.save_path}",
            logging.ERROR,
            "[profdsl rank %s] the %s trace of step %s is lost: %s",
            label.rank,
            label.role,
            label.step,
            reason,
        )
        self.writer.submit(RecordJob(label.save_path, label.loss(status, reason)))
