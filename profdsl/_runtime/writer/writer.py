"""The writer: the one thread of a process that writes into save_path (docs/architecture.md).

Every trace finish, manifest record, metrics log line, move of another tool's file and
finish-hook start is a
:class:`Job`, run on the writer's thread in the order submitted: a job runs after every job
submitted before it, so a hook submitted after a session's trace sees that trace.

The writer's thread is a daemon, started at the first job. Nothing else of the process waits on
it except through :meth:`Writer.wait` and its kin, always bounded, in slices (a signal for the
main thread is seen within one). When a wait runs out at the finish hook or at exit,
:meth:`Writer.give_up` revokes the queued jobs of the kinds given up, and the running one when it
is of those kinds and has committed nothing yet. A revoked job can no longer *commit* (rename a
file into save_path, append a record: both go through :meth:`CommitGuard.commit`, under the writer's
commit lock)
and records its own loss instead; when the running job is revoked, a fresh thread goes on with
the queue and the stuck one ends after its job. So each job ends in exactly one record.

An export *settles* once the part of it that only this process can do is done: torch's events
are on disk (:meth:`CommitGuard.settle`); what is left (compressing, naming, recording) needs
nothing but that file. Any other job settles when it is done. The last profiled step with no
finish hook to wait for waits until its jobs settle (:meth:`Writer.wait_settled`;
docs/architecture.md, "What a caller waits for").
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from profdsl._runtime.writer.waits import Waits
from profdsl.core._log import failing_once, once

__all__ = ["COMMIT_WAIT_S", "RECORD_BUDGET_S", "CommitGuard", "Job", "Ticket", "Writer"]

T = TypeVar("T")

#: How long a wait for a record or a move's bookkeeping may last (a disk that stops answering).
RECORD_BUDGET_S = 60.0
#: How long a give-up waits for a commit in progress (a rename, an append) before leaving the job
#: that makes it to finish on its own.
COMMIT_WAIT_S = 5.0


class Job(Protocol):
    """One piece of the writer's work.

    Attributes:
        kind: ``"export"`` (a trace being finished), ``"record"``, ``"log"`` (a metrics log
            line), ``"move"`` or ``"hook"``.
        budget_s: how long a wait for it may last once it runs (its own bound: an export's
            ``export_timeout_s``, a move's wait for its files).
    """

    kind: str
    budget_s: float

    def run(self, guard: CommitGuard) -> None:
        """Do the work, committing through ``guard``; never raises an ``Exception``."""

    def revoke(self, guard: CommitGuard) -> None:
        """The job was given up: record its loss through ``guard``."""


class Ticket:
    """A submitted job's ticket (what :meth:`Writer.submit` returns and :meth:`Writer.wait`
    takes): the job, whether it was revoked or committed, when it is done, when it began
    running, and when it settled (None: not yet); ``kept_s``: the seconds callers waited for it
    in waits now over and, once it settled, until then (a given-up job's record job keeps its)."""

    __slots__ = ("committed", "done", "job", "kept_s", "revoked", "settled", "started")

    def __init__(self, job: Job, kept_s: float = 0.0) -> None:
        self.job, self.done, self.started = job, threading.Event(), 0.0
        self.revoked = self.committed = False
        self.settled: float | None = None
        self.kept_s = kept_s

    @property
    def charged_from(self) -> float:
        """Since when a wait going on is charged to it (and not kept yet): its settling, else its start."""
        return self.started if self.settled is None else self.settled


class _Queue:
    """The writer's jobs not done: the one running, then those queued, in submission order.
    Guarded by the writer's condition: every method is called with it held (docs/architecture.md,
    "Locks")."""

    __slots__ = ("queued", "running")

    def __init__(self) -> None:
        self.queued: collections.deque[Ticket] = collections.deque()
        self.running: Ticket | None = None

    def tickets(self) -> list[Ticket]:
        """Every ticket not done, the running one first."""
        return ([self.running] if self.running is not None else []) + list(self.queued)

    def upto(self, ticket: Ticket) -> list[Ticket] | None:
        """The tickets not done up to ``ticket``'s, in order; None when it is done."""
        tickets = self.tickets()
        return tickets[: tickets.index(ticket) + 1] if ticket in tickets else None

    def revoke(self, kinds: frozenset[str], *, running: bool) -> list[Ticket]:
        """Revoke the queued jobs of ``kinds`` and, with ``running``, the running one (which is
        no longer this queue's); the job recording each one's loss (:class:`_Revoked`) is queued
        first. Returns the revoked tickets."""
        revoked = [e for e in self.queued if e.job.kind in kinds]
        if running and self.running is not None:
            revoked.insert(0, self.running)
            self.running = None
        for ticket in revoked:
            ticket.revoked = True
        self.queued = collections.deque(
            [Ticket(_Revoked(e), e.kept_s) for e in revoked] + [e for e in self.queued if not e.revoked]
        )
        return revoked


class CommitGuard:
    """What the job being run commits with (a rename into save_path, a record): a commit
    happens only while that job is not revoked, and never at the same time as a give-up (both
    take the writer's ``commit_lock``)."""

    __slots__ = ("_writer", "ticket")

    def __init__(self, writer: Writer, ticket: Ticket) -> None:
        self._writer, self.ticket = writer, ticket

    def waited(self) -> float:
        """Seconds callers have waited for this job (:meth:`Waits.waited`): the waits over, and
        those going on, before it settled and since (a wait that went on past the settling
        counted once)."""
        ticket = self.ticket
        with self._writer._cond:
            return ticket.kept_s + self._writer.waits.waited(ticket.charged_from)

    def settle(self) -> None:
        """What only this process can do for the job is done (an export: torch's events are on
        disk): a caller waiting for that (:meth:`Writer.wait_settled`) goes on, and the time
        waited for it so far is kept as its own."""
        writer, ticket = self._writer, self.ticket
        with writer._cond:
            ticket.kept_s += writer.waits.waited(ticket.started)
            ticket.settled = time.perf_counter()
            writer._cond.notify_all()

    def commit(self, action: Callable[[], T]) -> T | None:
        """Run ``action`` (a rename, a record) unless the job was revoked; None when revoked."""
        with self._writer.commit_lock:
            if self.ticket.revoked:
                return None
            result = action()
            self.ticket.committed = True
            return result


class _Revoked:
    """A revoked job, run first by the writer: it records the job's loss."""

    __slots__ = ("_ticket", "budget_s", "kind")

    def __init__(self, ticket: Ticket) -> None:
        self._ticket, self.kind, self.budget_s = ticket, "record", RECORD_BUDGET_S

    def run(self, guard: CommitGuard) -> None:
        try:
            with failing_once("writer-revoke", "profdsl: recording a given-up %s failed: %r", self._ticket.job.kind):
                self._ticket.job.revoke(guard)
        finally:
            self._ticket.done.set()

    def revoke(self, guard: CommitGuard) -> None:
        self.run(guard)


class Writer:
    """One process's writer (see the module docstring)."""

    def __init__(self) -> None:
        self.commit_lock = threading.Lock()
        self.generation = 0  # a thread whose generation is past takes no more jobs
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()  # re-entrant lock
        self._queue = _Queue()
        self._thread: threading.Thread | None = None
        self.waits = Waits(self._cond, self._left)  # the callers waiting on its jobs

    def _left(self, since: float, rest: float | None) -> None:
        """A caller's wait ended (under the condition; the waits went on since ``since``, the
        others since ``rest``): the running job keeps the time only that wait was charged to it,
        so that a wait that ran out or was interrupted before the job was recorded still counts."""
        ticket = self._queue.running
        if ticket is not None:
            mark = ticket.charged_from
            ticket.kept_s += max(0.0, max(time.perf_counter() if rest is None else rest, mark) - max(since, mark))

    # -- submitting and looking ---------------------------------------------------------------
    def submit(self, job: Job) -> Ticket:
        """Queue ``job``; returns its ticket for :meth:`wait`."""
        ticket = Ticket(job)
        with self._cond:
            self._queue.queued.append(ticket)
            if self._thread is None:
                self._start_thread()
            self._cond.notify_all()
        return ticket

    def tail(self) -> Ticket | None:
        """The ticket of the job submitted last, if it is not done: waiting for it is waiting
        for everything submitted so far."""
        with self._cond:
            return self._queue.queued[-1] if self._queue.queued else self._queue.running

    def jobs(self, kind: str) -> list[Job]:
        """The jobs of ``kind`` queued or running."""
        with self._cond:
            return [e.job for e in self._queue.tickets() if e.job.kind == kind]

    def budget(self, ticket: Ticket | None = None) -> float:
        """How long a wait for ``ticket`` (None: every job submitted so far) may last: for each
        kind of job up to it, the longest budget of that kind (the exports share one wait, as
        do the moves)."""
        with self._cond:
            tickets = (None if ticket is None else self._queue.upto(ticket)) or self._queue.tickets()
            longest: dict[str, float] = {}
            for ticket in tickets:
                longest[ticket.job.kind] = max(longest.get(ticket.job.kind, 0.0), ticket.job.budget_s)
            return sum(longest.values())

    # -- waiting ------------------------------------------------------------------------------
    def wait(self, ticket: Ticket | None = None, *, timeout: float) -> bool:
        """Wait until ``ticket``'s job is done (None: every job submitted so far), at most
        ``timeout`` seconds; False when the wait ran out. The wait is charged to the jobs it
        waited for (:meth:`Waits.waited <profdsl._runtime.writer.waits.Waits.waited>`)."""
        target = self.tail() if ticket is None else ticket
        return target is None or self.waits.until(target.done.is_set, timeout)

    def wait_exports(self) -> bool:
        """Wait until no export is queued or running, at most the longest ``budget_s`` of those
        (the exports share one wait); False when the wait ran out."""
        timeout = max((job.budget_s for job in self.jobs("export")), default=0.0)
        return self.waits.until(lambda: not self.jobs("export"), timeout)

    def wait_settled(self, ticket: Ticket, *, timeout: float) -> bool:
        """Wait until every job up to ``ticket``'s has settled (an export once torch's events are
        on disk, any other job once done), at most ``timeout`` seconds; False when it ran out."""

        def settled() -> bool:
            with self._cond:
                return all(e.settled is not None for e in self._queue.upto(ticket) or [])

        return self.waits.until(settled, timeout)

    def wait_below(self, kind: str, limit: int, timeout: float) -> bool:
        """Wait until fewer than ``limit`` jobs of ``kind`` are in flight, at most ``timeout``
        seconds; False when the wait ran out."""
        return self.waits.until(lambda: len(self.jobs(kind)) < limit, timeout, charged=False)

    # -- giving up ----------------------------------------------------------------------------
    def give_up(self, kinds: frozenset[str] = frozenset({"export"})) -> int:
        """Revoke the queued jobs of ``kinds``, and the running one when it is of ``kinds`` and
        has committed nothing yet; their losses are recorded first. A commit in progress (a disk
        that stopped answering) is waited for at most ``COMMIT_WAIT_S``; past that the running job is
        left to finish on its own. Returns how many were revoked."""
        locked = self.commit_lock.acquire(timeout=COMMIT_WAIT_S)
        try:
            with self._cond:
                running = self._queue.running
                take_running = locked and running is not None and running.job.kind in kinds and not running.committed
                if take_running and running is not None:  # the waits for it so far are its record's
                    running.kept_s += self.waits.waited(running.charged_from)
                revoked = self._queue.revoke(kinds, running=take_running)
                if take_running:  # the stuck thread ends after its job; a fresh one goes on
                    self._start_thread()
                self._cond.notify_all()
            return len(revoked)
        finally:
            if locked:
                self.commit_lock.release()

    # -- the thread ---------------------------------------------------------------------------
    def _start_thread(self) -> None:
        self.generation += 1
        self._thread = threading.Thread(
            target=self._loop, args=(self.generation,), name=f"profdsl-writer-{self.generation}", daemon=True
        )
        self._thread.start()

    def _loop(self, generation: int) -> None:
        while True:
            with self._cond:
                while not self._queue.queued and self.generation == generation:
                    self._cond.wait()
                if self.generation != generation:
                    return  # given up (or forgotten): a newer thread owns the queue
                ticket = self._queue.running = self._queue.queued.popleft()
                ticket.started = time.perf_counter()
            try:
                ticket.job.run(CommitGuard(self, ticket))
            except BaseException as exc:  # jobs never raise; this is the last guard
                once("writer-job", logging.ERROR, "profdsl: a %s job failed: %r", ticket.job.kind, exc)
            finally:
                with self._cond:
                    if self._queue.running is ticket:
                        self._queue.running = None
                    ticket.done.set()
                    self._cond.notify_all()  # waiters look again

    # -- tests and fork -----------------------------------------------------------------------
    def forget(self) -> None:
        """Start afresh: no thread, nothing queued (a forked child; tests). A thread of the old
        queue, if one runs here, takes no more jobs."""
        self.commit_lock = threading.Lock()
        self.generation += 1
        self._reset()
