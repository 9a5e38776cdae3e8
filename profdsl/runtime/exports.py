"""Finishing traces off the training thread.

The training thread only stops the session and has torch write the events (which must happen on
the session's thread); :class:`Exports` does the rest on one background thread: splicing the
metadata, compressing, checking, renaming and recording (:func:`profdsl.collect.export.finish`;
zlib releases the GIL on large blocks). At most ``in_flight`` traces (the trace's
:class:`~profdsl.collect.export.ExportPolicy`, from ``TorchOptions.exports_in_flight``) are in
flight: the next one waits for a slot (said once, and counted in its ``blocked_ms``) rather than
piling up events files. Each pending trace is a writer of its save_path for the finish hook,
which therefore runs after the last export; ``close()`` and exit wait for them (up to the
traces' ``export_timeout_s``), and a trace still pending when that wait gives up is recorded
``incomplete``, naming the events file it leaves behind.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

import attrs

from profdsl.collect.export import PendingTrace, finish
from profdsl.core.log import once
from profdsl.runtime.hooks import HookRendezvous

__all__ = ["Exports"]


class _Job:
    """One trace in flight (compared by identity: a writer of its save_path)."""

    __slots__ = ("pending",)

    def __init__(self, pending: PendingTrace) -> None:
        self.pending = pending


class Exports:
    """One background thread finishing traces, each trace's ``in_flight`` bounding how many
    may be in flight when it is submitted."""

    def __init__(self, hooks: HookRendezvous) -> None:
        self._hooks = hooks
        self.forget()

    def forget(self) -> None:
        """Start afresh: nothing in flight, no thread (a forked child; tests)."""
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._pending: set[_Job] = set()
        self._in_flight = 0  # submitted and not yet done (given-up jobs included until done)

    def submit(self, pending: PendingTrace, *, blocked_s: float = 0.0) -> None:
        """Finish ``pending`` in the background, once fewer than its ``in_flight`` traces are in
        flight; the hook of its save_path waits for it. ``blocked_s``: how long the session held
        up the training thread for this trace before; the trace's ``blocked_ms`` adds the wait
        for a slot here."""
        began = time.perf_counter()
        limit = pending.label.export.in_flight
        with self._idle:
            if self._in_flight >= limit:
                once("export-slots", logging.INFO, "profdsl: %s traces are being written in the "
                     "background; the next one waits for one of them", self._in_flight)
                self._idle.wait_for(lambda: self._in_flight < limit)
            self._in_flight += 1
        blocked_ms = round((blocked_s + time.perf_counter() - began) * 1000, 3)
        job = _Job(attrs.evolve(pending, extra={**(pending.extra or {}), "blocked_ms": blocked_ms}))
        self._hooks.hold(pending.label.save_path, job)
        with self._idle:
            self._pending.add(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="profdsl-export", daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                finish(job.pending)
            except BaseException as exc:  # finish never raises; this is the last guard
                once("export-thread", logging.ERROR, "profdsl: finishing a trace failed: %r", exc)
            finally:
                self._done(job)

    def _done(self, job: _Job) -> None:
        """``job`` is finished: run the hook when it was the last thing it waited for (still
        counted in flight, so that ``close()`` waits for the hook too), then free its slot."""
        with self._idle:
            given_up = job not in self._pending  # at exit: already recorded incomplete
        if not given_up:
            try:
                self._hooks.release(job.pending.label.save_path, job)()
            except Exception as exc:
                once("export-hook", logging.ERROR, "profdsl: the finish hook failed: %r", exc)
        with self._idle:
            self._pending.discard(job)
            self._in_flight -= 1
            self._idle.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until nothing is in flight; False when ``timeout`` seconds (default: the longest
        ``export_timeout_s`` of the traces in flight) were not enough."""
        with self._idle:
            if timeout is None:
                timeout = max((job.pending.label.export.timeout_s for job in self._pending), default=0.0)
            return self._idle.wait_for(lambda: not self._pending, timeout)

    def give_up(self) -> list[PendingTrace]:
        """At exit, after :meth:`wait` gave up: record what is still pending as incomplete (its
        events file, torch's plain JSON, stays in save_path and is named in the record)."""
        with self._idle:
            left, self._pending = list(self._pending), set()
        for job in left:
            job.pending.label.record_loss(
                "incomplete", "still being written in the background when the process exited",
                events=os.path.basename(job.pending.events), **job.pending.fields())
            self._hooks.release(job.pending.label.save_path, job)()  # lost, and recorded so
        return [job.pending for job in left]
