"""The finish hook as the writer runs it: one :class:`HookJob` per round of a save_path, which
runs the command of the round's first hook (:func:`profdsl.collect.finish_hook.run_command`) and
records it, and records the others as skipped (once per process and save_path, and once per
capture request: a request's round names it in ``note``, its records' ``capture`` and the
command's ``PROFDSL_CAPTURE`` / ``PROFDSL_REQUEST``).

A job submitted after a round's last trace is behind every export of that round on the writer,
so the command sees every trace (docs/architecture.md). A thread that waits for the hook and is
interrupted (Ctrl-C) has the command's process group killed and the run recorded
``interrupted`` before the interrupt goes on (:func:`stop_hooks`).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping

import attrs

from profdsl.collect import finish_hook
from profdsl.core.log import once
from profdsl.records.schema import CaptureNote
from profdsl.runtime.writer.writer import Pen, Writer

__all__ = ["HookJob", "HookPlan", "stop_hooks"]


@attrs.frozen(kw_only=True)
class HookPlan:
    """One role's hook, as its plan resolved it: the command and who runs it."""

    save_path: str
    cmd: str
    timeout_s: float
    background: bool
    tool: str
    role: str
    rank: int
    world_size: int
    host: str
    coords: Mapping[str, int] = attrs.field(factory=dict)

    def fields(self, steps: list[int], note: CaptureNote | None = None) -> dict[str, object]:
        """The fields of this role's hook record (``note``: the request it runs for)."""
        return dict(role=self.role, rank=self.rank, world_size=self.world_size, host=self.host,
                    **self.coords, pid=os.getpid(), steps=steps, capture=note)

    def environment(self, steps: list[int], note: CaptureNote | None = None) -> dict[str, str]:
        """What the command sees: the contract's ``PROFDSL_*`` variables, and for a request's
        hook ``PROFDSL_CAPTURE`` (what asked: ``file``, ``ray``, ``http``, ``api``, ``auto``) and
        ``PROFDSL_REQUEST`` (its id); both empty for the plan's hook."""
        env = finish_hook.hook_environment(
            os.environ, save_path=self.save_path, tool=self.tool, role=self.role, rank=self.rank,
            world_size=self.world_size, steps=steps, host=self.host, pid=os.getpid())
        env.update(PROFDSL_CAPTURE=note.source or "" if note is not None else "",
                   PROFDSL_REQUEST=note.request or "" if note is not None else "")
        return env


class HookJob:
    """The hook of one round: the first plan's command runs; the others record a skip."""

    kind = "hook"

    def __init__(self, plans: list[HookPlan], steps: list[int], *, note: CaptureNote | None = None) -> None:
        self.plans, self.steps, self.note = plans, steps, note
        self.abort = finish_hook.Abort()
        self.budget_s = plans[0].timeout_s + finish_hook.STOP_BOUND_S
        self.background = plans[0].background

    def run(self, pen: Pen) -> None:
        first = self.plans[0]
        result = finish_hook.run_command(first.cmd, first.environment(self.steps, self.note),
                                         timeout_s=first.timeout_s, rank=first.rank, abort=self.abort)
        blocked_ms = round(pen.waited() * 1000, 3)
        pen.commit(lambda: finish_hook.record(first.save_path, result, blocked_ms=blocked_ms,
                                              **first.fields(self.steps, self.note)))
        self._skips(pen)

    def _skips(self, pen: Pen) -> None:
        skipped = finish_hook.HookResult("skipped", error="already ran in this process for this save_path")
        for plan in self.plans[1:]:
            pen.commit(functools.partial(finish_hook.record, plan.save_path, skipped,
                                         **plan.fields(self.steps, self.note)))

    def stop(self, reason: str) -> None:
        """Kill the command's process group (within ``ABORT_POLL_S``); the run is recorded
        ``interrupted`` with ``reason``."""
        self.abort.reason = reason

    def revoke(self, pen: Pen) -> None:
        """Given up (a wait for it ran out, or was interrupted, at exit): the command, if it
        runs, is killed; the run is recorded ``interrupted``."""
        self.stop(self.abort.reason or "given up when the process exited")
        first = self.plans[0]
        result = finish_hook.HookResult("interrupted", error=f"{self.abort.reason}; process group killed")
        pen.commit(lambda: finish_hook.record(first.save_path, result, **first.fields(self.steps, self.note)))
        self._skips(pen)


def stop_hooks(writer: Writer, reason: str) -> None:
    """An interrupt reached a thread waiting on the writer: every hook queued or running is
    stopped (its process group killed, the run recorded ``interrupted`` with ``reason``), and
    the wait for their records is bounded."""
    hooks = [job for job in writer.jobs("hook") if isinstance(job, HookJob)]
    for job in hooks:
        job.stop(reason)
    try:
        if hooks:
            writer.wait(timeout=finish_hook.STOP_BOUND_S)
    except BaseException:
        once("hook-wait", logging.ERROR, "profdsl: interrupted again while the finish hook was being stopped")
