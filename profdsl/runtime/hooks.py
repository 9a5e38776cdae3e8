"""The finish-hook rendezvous: when the hook of a save_path is owed, and that it runs once.

Per process and save_path, a *round* gathers everyone who may still add an artifact there:

- *members*: the roles (profilers) writing there; each *arrives* after its last profiled step
  (or at ``close``), handing in its hook job if it has one;
- *writers*: capture sessions not yet written (a discrete stage still open on another thread, a
  session whose stop was deferred to its own thread); each is *released* once its trace exists
  or its loss is recorded.

The hook runs when every member has arrived and every writer is released: after the last
artifact of the round exists, whichever order those events come in. The first job runs, the
others record a skip. A member or writer that comes after the hook ran opens a new round, whose
hook runs again after its own artifacts (a trainer that re-creates its profilers).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable

__all__ = ["HookRendezvous"]

#: ``job(run, steps)``: a role's hook; ``run`` False means another role's hook already ran (record
#: a skip); ``steps``: the profiled steps of every role of the round.
Job = Callable[[bool, list[int]], None]


class _Round:
    """The roles and sessions of this process writing into one save_path, and the hooks owed."""

    def __init__(self) -> None:
        self.members: weakref.WeakSet[object] = weakref.WeakSet()
        self.arrived: weakref.WeakSet[object] = weakref.WeakSet()
        self.writers: set[object] = set()  # sessions not yet written
        self.jobs: list[Job] = []
        self.steps: set[int] = set()
        self.ran = False

    def ready(self) -> Callable[[], None]:
        """What to run now: the jobs, once every member arrived, no writer is left and some job
        is owed; otherwise nothing."""
        if self.ran or not self.jobs or self.writers or any(
                m not in self.arrived for m in self.members):
            return _nothing
        self.ran = True
        jobs, self.jobs, steps = self.jobs, [], sorted(self.steps)
        return lambda: _run(jobs, steps)


class HookRendezvous:
    """Per save_path: who may still write there, and the hooks owed when all are done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rounds: dict[str, _Round] = {}
        self.exiting = False  # the interpreter exits: a hook due now runs in the foreground

    @staticmethod
    def key(save_path: str) -> str:
        """Which save_paths are one (the same folder through any path)."""
        return os.path.realpath(save_path)

    def _round(self, save_path: str, *, joining: bool) -> _Round:
        key = self.key(save_path)
        current = self._rounds.get(key)
        if current is None or (joining and current.ran):
            current = self._rounds[key] = _Round()
        return current

    def join(self, save_path: str, member: object) -> None:
        """``member`` (a role) may write into ``save_path``: the hook waits for it."""
        with self._lock:
            self._round(save_path, joining=True).members.add(member)

    def arrive(self, save_path: str, member: object, job: Job | None,
               steps: Iterable[int] = ()) -> None:
        """``member`` is done with ``save_path`` after profiling ``steps``; ``job`` is its hook,
        if it has one."""
        with self._lock:
            current = self._round(save_path, joining=False)
            current.arrived.add(member)
            current.steps.update(steps)
            if job is not None:
                current.jobs.append(job)
            due = current.ready()
        due()

    def leave(self, save_path: str, member: object, steps: Iterable[int] = ()) -> None:
        """``member`` was replaced (a profiler re-created for its role): the hook no longer
        waits for it and it owes none, but the steps it profiled are still the round's."""
        with self._lock:
            current = self._round(save_path, joining=False)
            current.members.discard(member)
            current.steps.update(steps)
            due = current.ready()
        due()

    def hold(self, save_path: str, writer: object) -> None:
        """A capture session writing into ``save_path`` started: the hook waits for its trace."""
        with self._lock:
            self._round(save_path, joining=True).writers.add(writer)

    def release(self, save_path: str, writer: object) -> Callable[[], None]:
        """``writer``'s trace exists (or its loss is recorded). Returns what to run next (the
        hook, when this was the last thing it waited for): the caller runs it once it holds no
        lock of its own."""
        with self._lock:
            current = self._rounds.get(self.key(save_path))
            if current is None or writer not in current.writers:
                return _nothing
            current.writers.discard(writer)
            return current.ready()

    def clear(self) -> None:
        """Forget every save_path (tests; a forked child owes its parent's hooks nothing)."""
        self._lock = threading.Lock()
        self._rounds = {}
        self.exiting = False


def _run(jobs: list[Job], steps: list[int]) -> None:
    """The first job runs the hook; the others record that it already ran."""
    for index, job in enumerate(jobs):
        job(index == 0, steps)


def _nothing() -> None:
    """Nothing is due."""
