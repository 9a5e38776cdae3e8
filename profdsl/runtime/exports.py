"""Finishing traces off the training thread.

The training thread only stops the session and has torch write the events (which must happen on
the session's thread); :class:`Exports` does the rest on one background thread: splicing the
metadata, compressing, checking, renaming and recording (:func:`profdsl.collect.export.finish`;
zlib releases the GIL on large blocks). At most ``limit`` traces are in flight: the next one waits
for a slot (and says so once) rather than piling up events files. Each pending trace is a writer
of its save_path for the finish hook, which therefore runs after the last export; ``close()`` and
exit wait for them, and a trace still pending when that wait gives up is recorded ``incomplete``.
"""

from __future__ import annotations

import logging
import queue
import threading

from profdsl.collect.export import PendingTrace, finish
from profdsl.core.log import once
from profdsl.runtime.hooks import HookRendezvous

__all__ = ["EXPORT_LIMIT", "WAIT_S", "Exports"]


class _Job:
    """One trace in flight (compared by identity: a writer of its save_path)."""

    __slots__ = ("pending",)

    def __init__(self, pending: PendingTrace) -> None:
        self.pending = pending

#: Traces finished or waiting in the background at a time (each holds one events file on disk).
EXPORT_LIMIT = 2
#: How long ``close()`` and exit wait for the exports in flight (large traces take minutes).
WAIT_S = 900.0


class Exports:
    """One background thread finishing traces, at most ``limit`` in flight."""

    def __init__(self, hooks: HookRendezvous, limit: int = EXPORT_LIMIT) -> None:
        self._hooks, self._limit = hooks, limit
        self.forget()

    def forget(self) -> None:
        """Start afresh: nothing in flight, no thread (a forked child; tests)."""
        self._slots = threading.BoundedSemaphore(self._limit)
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._pending: set[_Job] = set()

    def submit(self, pending: PendingTrace) -> None:
        """Finish ``pending`` in the background (waiting for a slot when ``limit`` are in
        flight); the hook of its save_path waits for it."""
        if not self._slots.acquire(blocking=False):
            once("export-slots", logging.INFO, "profdsl: %s traces are being written in the "
                 "background; the next one waits for one of them", self._limit)
            self._slots.acquire()
        job = _Job(pending)
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
            self._idle.notify_all()
        self._slots.release()

    def wait(self, timeout: float) -> bool:
        """Wait until nothing is in flight; False when ``timeout`` seconds were not enough."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending, timeout)

    def give_up(self) -> list[PendingTrace]:
        """At exit, after :meth:`wait` gave up: record what is still pending as incomplete."""
        with self._idle:
            left, self._pending = list(self._pending), set()
        for job in left:
            job.pending.label.record_loss(
                "incomplete", "still being written in the background when the process exited",
                **job.pending.fields())
            self._hooks.release(job.pending.label.save_path, job)()  # lost, and recorded so
        return [job.pending for job in left]
