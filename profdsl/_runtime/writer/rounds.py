"""When the finish hook is owed: one *round* per process and save_path.

A round gathers who may still add an artifact to a save_path:

- its *members*: the roles (profilers) writing there; each *arrives* after its last profiled
  step (or at ``close``), handing in its :class:`~profdsl._runtime.writer.hook.HookPlan` if this
  rank runs a hook;
- its *holds*: capture sessions started and not yet handed to the writer (a discrete stage
  still open on another thread, a session whose stop waits for its owner thread), each
  *released* once its trace is handed over or its loss recorded; and, between the parts of a
  step session a stage cut, the step's claims, released once the next part holds or none follows
  (:meth:`~profdsl._runtime.slot.open_session.OpenSession.hold_between`).

When every member has arrived and nothing holds it, the round submits its
:class:`~profdsl._runtime.writer.hook.HookJob` to the writer, behind every trace handed over
before: the hook runs after the last artifact of the round, in whatever order those events came.
A member or session that comes after the hook was submitted opens a new round, whose hook runs
again after its own artifacts (a trainer that re-creates its profilers).

A capture request (``docs/on-demand.md``) has rounds of its own, one per save_path and request
(its *tag*): the roles that took the request are its members, the sessions of its steps its open
sessions, and its hook runs once they are all done: once per completed request.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable

from profdsl._runtime.writer.hook import HookJob, HookPlan
from profdsl._runtime.writer.writer import Writer
from profdsl.records.requests import CaptureNote

__all__ = ["HookRounds"]


class _Round:
    def __init__(self) -> None:
        self.members: weakref.WeakSet[object] = weakref.WeakSet()
        self.arrived: weakref.WeakSet[object] = weakref.WeakSet()
        self.sessions: set[object] = set()
        self.plans: list[HookPlan] = []
        self.steps: set[int] = set()
        self.note: CaptureNote | None = None  # a request's round: the request
        self.submitted = False

    def complete(self) -> bool:
        return not self.submitted and not self.sessions and all(m in self.arrived for m in self.members)


class HookRounds:
    """Per save_path (and capture request, ``tag``): who may still write there, and the hook
    owed when all are done."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._lock = threading.RLock()  # re-entrant: a signal handler may call close() mid-update
        self._rounds: dict[tuple[str, str | None], _Round] = {}
        self.jobs: list[HookJob] = []  # hooks submitted, until they finish

    @staticmethod
    def key(save_path: str, tag: str | None = None) -> tuple[str, str | None]:
        """Which rounds are one: the same folder through any path, the same request (None: the
        plan's round)."""
        return os.path.realpath(save_path), tag

    def _round(self, save_path: str, tag: str | None, *, joining: bool) -> _Round:
        key = self.key(save_path, tag)
        current = self._rounds.get(key)
        if current is None or (joining and current.submitted):
            current = self._rounds[key] = _Round()
        return current

    def join(self, save_path: str, member: object, *, tag: str | None = None) -> None:
        """``member`` (a role) may write into ``save_path``: the hook waits for it."""
        with self._lock:
            self._round(save_path, tag, joining=True).members.add(member)

    def arrive(
        self,
        save_path: str,
        member: object,
        plan: HookPlan | None,
        steps: Iterable[int] = (),
        *,
        tag: str | None = None,
        note: CaptureNote | None = None,
    ) -> HookJob | None:
        """``member`` is done with ``save_path`` after profiling ``steps``; ``plan`` is its hook,
        if this rank runs one (``note``: the request of a request's round). Returns the hook
        (submitted: its ``ticket`` set) when this arrival made it due."""
        with self._lock:
            current = self._round(save_path, tag, joining=False)
            current.arrived.add(member)
            current.steps.update(steps)
            current.note = current.note or note
            if plan is not None:
                current.plans.append(plan)
            return self._submit_if_due(current)

    def hold(self, save_path: str, session: object, *, tag: str | None = None) -> None:
        """A capture session writing into ``save_path`` started (or a cut step's claims hold it
        between parts): the hook waits for it."""
        with self._lock:
            self._round(save_path, tag, joining=True).sessions.add(session)

    def release(self, save_path: str, session: object, *, tag: str | None = None) -> None:
        """``session``'s trace was handed to the writer (or its loss recorded): its round's hook
        is submitted when this made it due."""
        with self._lock:
            current = self._rounds.get(self.key(save_path, tag))
            if current is not None and session in current.sessions:
                current.sessions.discard(session)
                self._submit_if_due(current)

    def _submit_if_due(self, current: _Round) -> HookJob | None:
        """Under the lock: submit the round's hook when it is complete and one is owed."""
        if not current.complete() or not current.plans:
            return None
        current.submitted = True
        job = HookJob(current.plans, sorted(current.steps), self._writer, note=current.note)
        self.jobs = [*self.unfinished(), job]
        job.ticket = self._writer.submit(job)
        return job

    def unfinished(self) -> list[HookJob]:
        """The hooks submitted that have not finished (to stop them on an interrupt)."""
        return [job for job in self.jobs if not job.finished.is_set()]

    def clear(self) -> None:
        """Forget every save_path (tests; a forked child owes its parent's hooks nothing)."""
        self._lock = threading.RLock()
        self._rounds = {}
        self.jobs = []
