"""Everything profdsl keeps per process, behind one object (docs/architecture.md):

- ``registry``: the steps the DSL may use (one ``StepContext`` per role's step with anything on),
  and the open entries;
- ``slot``: the one capture session of the process, and whom it belongs to;
- ``writer``: the one thread that writes into save_path;
- ``rounds``: when each save_path's finish hook is owed;
- ``live``: profilers not yet closed, closed at interpreter exit (a loop that forgets ``close()``
  still has its last session written and an owed finish hook run);
- ``servers``: the Prometheus endpoints of the always-on metrics (which take ``POST /profile``);
- ``inbox``: the capture requests delivered to this process, and the request folders it watches;
- ``logs``: the metrics logs it appends to (through the writer);
- ``log``: the keys already logged once.

A :class:`~profdsl._runtime.profiler.Profiler` is given its process (this process's one,
:data:`PROCESS`, by default). :data:`PROCESS` is one object for the life of the process (as
structlog's ``_CONFIG``): the DSL reads ``PROCESS.registry`` at every entry and keeps no part of
it, so a reset and the after-fork rule *replace* the registry instead of scrubbing it in place
(the slot, the writer and the rounds, which a profiler's parts hold, are reset by their own
methods). One after-fork rule: a forked child (a DataLoader worker) inherits none of it. One
reset for tests: :func:`profdsl.testing.reset`. One ordered shutdown, at exit:
:meth:`Process.exit`.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import TYPE_CHECKING, Any

from profdsl._runtime import context
from profdsl._runtime.inbox import Inbox
from profdsl._runtime.metrics_log import MetricsLogs
from profdsl._runtime.registry import Registry
from profdsl._runtime.slot.interrupts import Signals
from profdsl._runtime.slot.slot import CaptureSlot
from profdsl._runtime.writer.hook import stop_hooks
from profdsl._runtime.writer.rounds import HookRounds
from profdsl._runtime.writer.writer import RECORD_BUDGET_S, Writer
from profdsl.core._log import ONCE, OnceLog, logger
from profdsl.metrics._prometheus import Servers
from profdsl.metrics._tree import close

if TYPE_CHECKING:
    from profdsl._runtime.step import Closable

__all__ = ["PROCESS", "Process"]

#: Every job kind the writer may be given up on at exit.
_ALL = frozenset({"export", "record", "log", "move", "hook"})


class Process:
    """The process-wide state of profdsl (see the module docstring)."""

    # (slots: the DSL reads ``registry`` through it at every entry)
    __slots__ = ("inbox", "live", "log", "logs", "registry", "rounds", "servers", "signals", "slot", "writer")

    def __init__(self) -> None:
        self.registry = Registry()
        self.writer = Writer()
        self.rounds = HookRounds(self.writer)
        self.signals = Signals()  # the main thread's signal holds (_runtime/slot/interrupts.py)
        self.slot = CaptureSlot(self.writer, self.rounds, self.signals)
        self.live: set[Closable] = set()  # strong: a profiler dropped unclosed still owes its hook
        self.inbox = Inbox()
        self.logs = MetricsLogs(self.writer)
        self.servers = Servers(on_profile=self.inbox.from_http, gate=self.inbox.gate)
        self.log: OnceLog = ONCE

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # A decorated function pickled by value (Ray ships classes defined in __main__) names the
        # process state: on the other side it is that process's own, not a copy.
        return (_this_process, ())

    def exit(self) -> None:
        """At interpreter exit, in order: close every profiler not yet closed (their hooks run);
        record the session that cannot be ended here (its owner thread never came back); let
        the writer finish the traces, bounded by their ``export_timeout_s``, then give up those
        still going (recorded ``incomplete``) and let it record and run what is left (the hooks,
        bounded by their ``timeout_s``: a hook's process group is killed then, and recorded).
        An interrupt meanwhile stops the hooks and gives up everything, recorded, and goes on."""
        writer = self.writer
        if isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):  # died on Ctrl-C
            stop_hooks(self.rounds.unfinished(), "KeyboardInterrupt: the interpreter exited while the hook ran")
        try:
            for profiler in list(self.live):
                try:
                    profiler.close()
                except Exception as exc:  # interpreter exit: say it and go on with the others
                    logger.error("profdsl: closing %s at exit failed: %s", profiler.role, exc)
            try:
                self.slot.abandon("the process exited")
            except Exception as exc:
                logger.error("profdsl: stopping the last session at exit failed: %s", exc)
            if not writer.wait_exports():
                writer.give_up()
            for job in self.rounds.unfinished():
                if not job.wait():
                    job.stop("still running when the process exited past its timeout")
            if not writer.wait(timeout=writer.budget()):
                writer.give_up(_ALL)
                writer.wait(timeout=RECORD_BUDGET_S)
        except BaseException as exc:
            stop_hooks(self.rounds.unfinished(), f"{type(exc).__name__} while the process exited")
            writer.give_up(_ALL)  # what is still going is recorded lost
            writer.wait(timeout=RECORD_BUDGET_S)
            raise

    def reset(self) -> None:
        """Forget every profiler, recorder, open entry, step being timed, hook round and logged
        key; stop an open session (when this thread owns it) and the Prometheus endpoints, and
        let the writer finish what it was given. Profilers forgotten here are not closed at exit.

        What other contexts (threads, tasks) still hold open is theirs to end: a ``with`` entry
        with a handle stays listed in the new registry (``opened``), so that its exit still
        closes what it opened there (a stage's capture, on its owner thread); the forgotten steps
        end as the DSL sees them (their metrics trees closed), so that an entry left open
        elsewhere takes nothing of a later step."""
        self.slot.reset()
        self.writer.wait(timeout=self.writer.budget())
        old, mine = self.registry, set(context.walk(context.STACK.get()))
        for step in old.steps:
            if step.root is not None:
                close(step.root)
        registry = Registry()
        registry.opened.update((entry, None) for entry in list(old.opened) if entry not in mine)
        self.registry = registry
        for entry in list(registry.opened):  # (after the switch: one ended meanwhile unlisted itself from either)
            if not entry.live:
                registry.opened.pop(entry, None)
        registry.refresh()
        self.rounds.clear()
        self.live.clear()
        self.inbox.clear()
        self.logs.clear()
        self.servers.close()
        self.log.clear()

    def after_fork_in_child(self) -> None:
        """A forked child inherits profiler objects but not the sessions or threads behind them:
        it profiles nothing, owes no hook, writes nothing of its parent's, and logs afresh. Nor
        the forking thread's open entries: what the child times nests in none of them (in the
        copy of the parent's step tree, whose lock another thread may have held at the fork)."""
        context.clear()
        self.rounds.clear()
        self.writer.forget()
        self.slot.forget()
        self.registry = Registry()  # (the parent's lock may have been held by another thread)
        self.live.clear()
        self.inbox.clear()
        self.logs.clear()
        self.signals.after_fork()
        self.servers.after_fork()
        self.log.after_fork()


#: This process's state: what a :class:`~profdsl._runtime.profiler.Profiler` lives in unless told
#: otherwise, and what the DSL words find their recorders in.
PROCESS = Process()


def _this_process() -> Process:
    """This process's state (what a pickled :class:`Process` becomes on the other side)."""
    return PROCESS


atexit.register(PROCESS.exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PROCESS.after_fork_in_child)
