"""The finish-hook rendezvous: the hook runs once per process and save_path, when the last role
of the process writing there is done (fused roles share one capture: the upload must wait for the
last of them)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["HookRendezvous"]

#: ``job(run)``: a role's hook; ``run`` False means another role's hook already ran (record a skip).
Job = Callable[[bool], None]


class _Group:
    """The roles of this process that write into one save_path, and the hooks they owe."""

    def __init__(self) -> None:
        self.members: weakref.WeakSet[object] = weakref.WeakSet()
        self.arrived: weakref.WeakSet[object] = weakref.WeakSet()
        self.jobs: list[Job] = []
        self.ran = False


class HookRendezvous:
    """Per save_path: who may still write there, and the hooks owed when all are done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}

    def _group(self, save_path: str) -> _Group:
        return self._groups.setdefault(os.path.realpath(save_path), _Group())

    def join(self, save_path: str, member: object) -> None:
        """``member`` (a role) may write into ``save_path``: the hook waits for it."""
        with self._lock:
            group = self._group(save_path)
            if not group.ran:
                group.members.add(member)

    def arrive(self, save_path: str, member: object, job: Job | None) -> None:
        """``member`` is done with ``save_path``; ``job`` is its hook, if it has one.

        When the last member arrives, the first job runs with ``run=True`` and every other job
        with ``run=False``.
        """
        with self._lock:
            group = self._group(save_path)
            group.arrived.add(member)
            if job is not None:
                group.jobs.append(job)
            waiting = [m for m in group.members if m not in group.arrived]
            if waiting or group.ran or not group.jobs:
                return
            group.ran = True
            jobs, group.jobs = group.jobs, []
        for index, pending in enumerate(jobs):
            pending(index == 0)

    def clear(self) -> None:
        """Forget every save_path (tests; a forked child owes its parent's hooks nothing)."""
        self._lock = threading.Lock()
        self._groups = {}
