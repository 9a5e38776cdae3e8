"""The writer: the one thread of a process that writes into save_path (docs/architecture.md).

Every trace finish, manifest record, metrics log line, move of another tool's file and
finish-hook run is a
:class:`Job`, run on the writer's thread in the order submitted: a job runs after every job
submitted before it, so a hook submitted after a session's trace sees that trace.

The writer's thread is a daemon, started at the first job. Nothing else of the process waits on
it except through :meth:`Writer.wait`, always bounded. When a wait runs out at ``close()`` or at
exit, :meth:`Writer.give_up` revokes the job still running and the exports still queued: a
revoked job can no longer *commit* (rename a file into save_path, append a record: both happen
through :meth:`Pen.commit`, under the writer's pen), each records its own loss instead, and a
fresh thread goes on with the jobs behind them. So each job ends in exactly one record, written
by exactly one thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from profdsl.core.log import once

__all__ = ["Job", "Pen", "Writer"]

T = TypeVar("T")

#: The longest a wait goes without looking for a signal (Ctrl-C) delivered to another thread.
_SLICE_S = 0.2


class Job(Protocol):
    """One piece of the writer's work.

    Attributes:
        kind: ``"export"`` (a trace being finished), ``"record"``, ``"log"`` (a metrics log
            line), ``"move"`` or ``"hook"``.
        budget_s: how long a wait for it may last once it runs (its own bound: an export's
            ``export_timeout_s``, a hook's ``timeout_s`` plus the time to kill it).
    """

    kind: str
    budget_s: float

    def run(self, pen: Pen) -> None:
        """Do the work, committing through ``pen``; never raises an ``Exception``."""

    def revoke(self, pen: Pen) -> None:
        """The job was given up (at ``close()`` or exit): record its loss through ``pen``."""


class Pen:
    """What a job commits with: a commit happens only while the job's writer is the current one
    (not given up), and never at the same time as a give-up."""

    __slots__ = ("_generation", "_writer", "started")

    def __init__(self, writer: Writer, generation: int) -> None:
        self._writer, self._generation = writer, generation
        self.started = 0.0  # when the job being run began

    def waited(self) -> float:
        """Seconds a caller has waited for the job being run (:meth:`Writer.waited`)."""
        return self._writer.waited(self.started)

    @property
    def revoked(self) -> bool:
        """Whether the writer this pen belongs to was given up."""
        return self._generation != self._writer.generation

    def commit(self, action: Callable[[], T]) -> T | None:
        """Run ``action`` (a rename, a record) unless revoked; None when revoked."""
        with self._writer.pen_lock:
            if self.revoked:
                return None
            return action()


class _Entry:
    """A submitted job, its state and its waiters' clock."""

    __slots__ = ("done", "job", "started")

    def __init__(self, job: Job) -> None:
        self.job, self.done, self.started = job, threading.Event(), 0.0


class Writer:
    """One process's writer (see the module docstring)."""

    def __init__(self) -> None:
        self.pen_lock = threading.Lock()
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[_Entry] = collections.deque()
        self._running: _Entry | None = None
        self._thread: threading.Thread | None = None
        self._waiters: dict[int, float] = {}  # thread ident -> when it began waiting

    # -- submitting -------------------------------------------------------------------------
    def submit(self, job: Job) -> _Entry:
        """Queue ``job``; returns its ticket for :meth:`wait`."""
        entry = _Entry(job)
        with self._cond:
            self._queue.append(entry)
            if self._thread is None:
                self._start_thread()
            self._cond.notify_all()
        return entry

    def tail(self) -> _Entry | None:
        """The ticket of the job submitted last, if it is not done: waiting for it is waiting
        for everything submitted so far."""
        with self._cond:
            return self._queue[-1] if self._queue else self._running

    def jobs(self, kind: str) -> list[Job]:
        """The jobs of ``kind`` queued or running."""
        with self._cond:
            entries = ([self._running] if self._running is not None else []) + list(self._queue)
            return [e.job for e in entries if e.job.kind == kind]

    def in_flight(self, kind: str) -> int:
        """How many jobs of ``kind`` are queued or running."""
        with self._cond:
            return self._count(kind)

    def wait_below(self, kind: str, limit: int, timeout: float) -> bool:
        """Wait until fewer than ``limit`` jobs of ``kind`` are in flight, at most ``timeout``
        seconds; False when the wait ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count(kind) < limit, timeout)

    def _count(self, kind: str) -> int:
        running = self._running is not None and self._running.job.kind == kind
        return running + sum(1 for e in self._queue if e.job.kind == kind)

    # -- waiting ----------------------------------------------------------------------------
    def wait(self, ticket: _Entry | None = None, *, timeout: float) -> bool:
        """Wait until ``ticket``'s job is done (None: every job submitted so far), at most
        ``timeout`` seconds; False when the wait ran out. The calling thread's wait is charged
        to the jobs it waited for (:meth:`waited`)."""
        with self._cond:
            target = ticket if ticket is not None else (self._queue[-1] if self._queue else self._running)
        if target is None:
            return True
        return self._waiting(target.done.is_set, timeout)

    def wait_kind(self, kind: str, *, timeout: float) -> bool:
        """Wait until no job of ``kind`` is queued or running, at most ``timeout`` seconds."""
        return self._waiting(lambda: self.in_flight(kind) == 0, timeout)

    def _waiting(self, done: Callable[[], bool], timeout: float) -> bool:
        if done():
            return True
        me = threading.get_ident()
        with self._cond:
            self._waiters.setdefault(me, time.perf_counter())
        deadline = time.monotonic() + timeout
        try:
            with self._cond:
                # In slices: a signal delivered to another thread is seen here within one.
                while not done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(min(_SLICE_S, remaining))
            return True
        finally:
            with self._cond:
                self._waiters.pop(me, None)

    def waited(self, started: float) -> float:
        """Seconds a caller has waited for the job that started running at ``started`` (the
        earliest wait still going on, from when it or the job began): a job's share of the
        training thread's blocked time."""
        with self._cond:
            if not self._waiters:
                return 0.0
            since = max(min(self._waiters.values()), started)
        return max(0.0, time.perf_counter() - since)

    def budget(self, ticket: _Entry | None = None) -> float:
        """How long a wait for ``ticket`` (None: every job submitted so far) may last: for each
        kind of job before it, the longest budget of that kind (the exports share one wait, as
        do the moves; the hook has its own)."""
        with self._cond:
            entries = ([self._running] if self._running is not None else []) + list(self._queue)
            if ticket is not None and ticket in entries:
                entries = entries[:entries.index(ticket) + 1]
            longest: dict[str, float] = {}
            for entry in entries:
                longest[entry.job.kind] = max(longest.get(entry.job.kind, 0.0), entry.job.budget_s)
            return sum(longest.values())

    def budget_of(self, kind: str) -> float:
        """The longest ``budget_s`` of the jobs of ``kind`` queued or running."""
        return max((job.budget_s for job in self.jobs(kind)), default=0.0)

    # -- giving up --------------------------------------------------------------------------
    def give_up(self, kinds: frozenset[str] = frozenset({"export"})) -> int:
        """Revoke the job running now and the queued jobs of ``kinds``; a fresh thread records
        their losses first, then goes on with the other queued jobs. Returns how many were
        revoked."""
        with self.pen_lock, self._cond:
            revoked = [e for e in self._queue if e.job.kind in kinds]
            if self._running is not None:
                revoked.insert(0, self._running)
            if not revoked:
                return 0
            self.generation += 1
            rest = collections.deque(e for e in self._queue if e.job.kind not in kinds)
            self._queue = collections.deque(_Entry(_Revoked(e)) for e in revoked)
            self._queue.extend(rest)
            self._running = None
            self._start_thread()
            self._cond.notify_all()
        return len(revoked)

    # -- the thread -------------------------------------------------------------------------
    def _start_thread(self) -> None:
        generation = self.generation
        self._thread = threading.Thread(target=self._loop, args=(generation,),
                                        name=f"profdsl-writer-{generation}", daemon=True)
        self._thread.start()

    def _loop(self, generation: int) -> None:
        pen = Pen(self, generation)
        while True:
            with self._cond:
                while not self._queue and self.generation == generation:
                    self._cond.wait()
                if self.generation != generation:
                    return  # given up: a newer thread owns the queue
                entry = self._running = self._queue.popleft()
                entry.started = pen.started = time.perf_counter()
            try:
                entry.job.run(pen)
            except BaseException as exc:  # jobs never raise; this is the last guard
                once("writer-job", logging.ERROR, "profdsl: a %s job failed: %r", entry.job.kind, exc)
            finally:
                with self._cond:
                    if self._running is entry:
                        self._running = None
                    if self.generation == generation:
                        entry.done.set()
                    self._cond.notify_all()  # waiters look again

    # -- tests and fork ---------------------------------------------------------------------
    def forget(self) -> None:
        """Start afresh: no thread, nothing queued (a forked child; tests). Jobs of the old
        thread, if one runs, can no longer commit."""
        self.pen_lock = threading.Lock()
        self.generation += 1
        self._reset()


class _Revoked:
    """A revoked job: run first by the fresh thread, it records the job's loss."""

    __slots__ = ("_entry", "budget_s", "kind")

    def __init__(self, entry: _Entry) -> None:
        self._entry, self.kind, self.budget_s = entry, "record", 60.0

    def run(self, pen: Pen) -> None:
        try:
            self._entry.job.revoke(pen)
        except Exception as exc:
            once("writer-revoke", logging.ERROR, "profdsl: recording a given-up %s failed: %r",
                 self._entry.job.kind, exc)
        finally:
            self._entry.done.set()  # the writer's loop notifies the waiters when this job ends

    def revoke(self, pen: Pen) -> None:
        self.run(pen)
