"""Everything profdsl keeps per process, behind one object: :data:`PROCESS`.

- ``registry``: the recorders the DSL may use, the profilers in a profiled step, open entries;
- ``coordinator``: the one capture session of the process, and whom it belongs to;
- ``hooks``: the finish-hook rendezvous per save_path;
- ``live``: profilers not yet closed, closed at interpreter exit (a loop that forgets ``close()``
  still flushes its last session and runs an owed finish hook);
- ``servers``: the Prometheus endpoints of the always-on metrics;
- ``log``: the keys already logged once.

One after-fork rule: a forked child (a DataLoader worker) inherits none of it. One reset for
tests: :func:`profdsl.testing.reset`.
"""

from __future__ import annotations

import atexit
import os
from typing import TYPE_CHECKING

from profdsl.core.log import ONCE, OnceLog, logger
from profdsl.metrics.prometheus import Servers
from profdsl.runtime.coordinator import Coordinator
from profdsl.runtime.exports import Exports
from profdsl.runtime.hooks import HookRendezvous
from profdsl.runtime.registry import Registry

if TYPE_CHECKING:
    from profdsl.runtime.profiler import Profiler

__all__ = ["PROCESS", "ProcessState", "registry"]


class ProcessState:
    """The process-wide state of profdsl (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.hooks = HookRendezvous()
        self.exports = Exports(self.hooks)
        self.coordinator = Coordinator(self.hooks, self.exports)
        self.live: set[Profiler] = set()  # strong: a profiler dropped unclosed still owes its hook
        self.servers = Servers()
        self.log: OnceLog = ONCE

    def close_live(self) -> None:
        """At interpreter exit: close every profiler not yet closed, then end the session still
        open (its loss is recorded when its thread never came back)."""
        self.hooks.exiting = True  # nothing would wait for a background hook started now
        for profiler in list(self.live):
            try:
                profiler.close()
            except Exception as exc:  # interpreter exit: say it and go on with the others
                logger.error("profdsl: closing %s at exit failed: %s", profiler.role, exc)
        try:
            self.coordinator.abandon()
        except Exception as exc:
            logger.error("profdsl: stopping the last session at exit failed: %s", exc)
        if not self.exports.wait():
            for pending in self.exports.give_up():
                logger.error("profdsl: the %s trace of step %s was still being written at exit",
                             pending.label.role, pending.label.step)

    def reset(self) -> None:
        """Forget every profiler, recorder, open entry, step being timed, hook and logged key; stop
        an open session (when this thread owns it) and the Prometheus endpoints, and let the
        traces being written finish. Profilers forgotten here are not closed at exit."""
        self.coordinator.reset()
        self.exports.wait()
        self.registry.clear()
        self.hooks.clear()
        self.live.clear()
        self.servers.close()
        self.log.clear()

    def after_fork_in_child(self) -> None:
        """A forked child inherits profiler objects but not the sessions or threads behind them:
        it profiles nothing, owes no hook, and logs afresh."""
        self.hooks.clear()
        self.exports.forget()
        self.coordinator.forget()
        self.registry.clear()
        self.live.clear()
        self.servers.after_fork()
        self.log.after_fork()


PROCESS = ProcessState()


def registry() -> Registry:
    """The process's registry (what a pickled registry becomes on the other side)."""
    return PROCESS.registry


atexit.register(PROCESS.close_live)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PROCESS.after_fork_in_child)
