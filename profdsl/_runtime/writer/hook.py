"""The finish hook as the writer runs it: one :class:`HookJob` per round of a save_path (and one
per capture request: a request's round names it in ``note``, its records' ``capture`` and the
command's ``PROFDSL_CAPTURE`` / ``PROFDSL_REQUEST``).

The writer starts the job after every job submitted before it, so the command sees every trace
of its round (docs/architecture.md). The command itself runs on the job's own thread
(``profdsl-hook``, bounded by its ``timeout_s``: its process group is killed then), so that the
writer goes on with other save_paths' traces meanwhile; its records (the run, and a skip for the
round's other hooks: once per process and save_path) go back through the writer. A caller waits
for the job with :meth:`HookJob.wait`; an interrupt there, or at exit, stops it
(:func:`stop_hooks`): its group killed, the run recorded ``interrupted``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping

import attrs

from profdsl._runtime.writer.jobs import RecordJob
from profdsl._runtime.writer.waits import Waits
from profdsl._runtime.writer.writer import RECORD_BUDGET_S, CommitGuard, Ticket, Writer
from profdsl.collect import _finish_hook as finish_hook
from profdsl.collect._manifest import append_record
from profdsl.core._log import described, once
from profdsl.core._units import ms_of
from profdsl.records.manifest import HookRecord
from profdsl.records.requests import CaptureNote

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
        return dict(
            role=self.role,
            rank=self.rank,
            world_size=self.world_size,
            host=self.host,
            **self.coords,
            pid=os.getpid(),
            steps=steps,
            capture=note,
        )

    def environment(
        self, steps: list[int], note: CaptureNote | None = None, steps_file: str | None = None
    ) -> dict[str, str]:
        """What the command sees: the contract's ``PROFDSL_*`` variables, and for a request's
        hook ``PROFDSL_CAPTURE`` (what asked: ``file``, ``ray``, ``http``, ``api``, ``auto``) and
        ``PROFDSL_REQUEST`` (its id); both empty for the plan's hook."""
        env = finish_hook.hook_environment(
            os.environ,
            save_path=self.save_path,
            tool=self.tool,
            role=self.role,
            rank=self.rank,
            world_size=self.world_size,
            steps=steps,
            host=self.host,
            pid=os.getpid(),
            steps_file=steps_file,
        )
        env.update(
            PROFDSL_CAPTURE=note.source or "" if note is not None else "",
            PROFDSL_REQUEST=note.request or "" if note is not None else "",
        )
        return env


class HookJob:
    """The hook of one round: the first plan's command runs; the others record a skip."""

    kind = "hook"
    budget_s = RECORD_BUDGET_S  # on the writer it only starts: the command runs on its own thread

    def __init__(
        self, plans: list[HookPlan], steps: list[int], writer: Writer, *, note: CaptureNote | None = None
    ) -> None:
        self.plans, self.steps, self._writer, self.note = plans, steps, writer, note
        self.abort = finish_hook.Abort()
        self.background = plans[0].background
        self.run_s = plans[0].timeout_s + finish_hook.STOP_BOUND_S + RECORD_BUDGET_S  # run and record
        self.started = threading.Event()
        self.finished = threading.Event()  # its records are written
        # the seconds callers waited for it in waits over, and when the one going on began (None:
        # none goes on); one tuple, so that the hook's thread reads both at once
        self._waits: tuple[float, float | None] = (0.0, None)
        self.ticket: Ticket | None = None  # its place on the writer, once submitted

    def run(self, guard: CommitGuard) -> None:
        """On the writer, behind the round's artifacts: start the command on its own thread."""
        self.started.set()
        threading.Thread(target=self._main, name="profdsl-hook", daemon=True).start()

    def _main(self) -> None:
        """On its own thread: run the command, then hand the records to the writer and wait
        (bounded) until they are written. The run's ``blocked_ms``: how long callers waited for it
        (the last step's stop, or close()): the waits over, and the one going on."""
        first = self.plans[0]
        try:
            with finish_hook.steps_file(self.steps) as listed:
                result = finish_hook.run_command(
                    first.cmd,
                    first.environment(self.steps, self.note, listed),
                    timeout_s=first.timeout_s,
                    rank=first.rank,
                    abort=self.abort,
                )
        except BaseException as exc:  # run_command never raises an Exception; this is the last guard
            result = finish_hook.HookResult("failed", error=described(exc))
        waited_s, since = self._waits
        blocked_ms = ms_of(waited_s if since is None else waited_s + time.perf_counter() - since)
        try:
            tickets = [
                self._writer.submit(RecordJob(path, record)) for path, record in self._records(result, blocked_ms)
            ]
            self._writer.wait(tickets[-1], timeout=RECORD_BUDGET_S)
        finally:
            self.finished.set()

    def _records(self, result: finish_hook.HookResult, blocked_ms: float | None = None) -> list[tuple[str, HookRecord]]:
        """Where each record goes, and what it says: the run's (the first plan's, ``blocked_ms``
        its caller's wait), then a skip for each other plan of the round."""
        skipped = finish_hook.HookResult("skipped", error="already ran in this process for this save_path")
        outcomes = [(result, blocked_ms)] + [(skipped, None)] * (len(self.plans) - 1)
        return [
            (
                plan.save_path,
                finish_hook.hook_record(plan.save_path, outcome, blocked_ms=ms, **plan.fields(self.steps, self.note)),
            )
            for plan, (outcome, ms) in zip(self.plans, outcomes)
        ]

    def stop(self, reason: str) -> None:
        """Kill the command's process group (within ``ABORT_POLL_S``); the run is recorded
        ``interrupted`` with ``reason``."""
        self.abort.reason = reason

    def revoke(self, guard: CommitGuard) -> None:
        """Given up before it started (at exit): recorded ``interrupted``; it never runs."""
        self.stop(self.abort.reason or "given up when the process exited")
        result = finish_hook.HookResult("interrupted", error=f"{self.abort.reason}; it never ran")
        for path, record in self._records(result):
            guard.commit(functools.partial(append_record, path, record))
        self.finished.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the job has reached the writer's turn (at most ``timeout`` seconds; None:
        the writer's budget for the jobs up to it), then until it has run its command and
        written its records (at most its own ``run_s``), in slices: a signal is seen."""
        turn = self._writer.budget(self.ticket) if timeout is None else timeout
        with self.waiting():
            if not self._writer.wait(self.ticket, timeout=turn):
                return False
            return Waits.wait_event(self.finished, timeout=self.run_s)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """A caller waits for the run meanwhile: the run's ``blocked_ms`` counts this time only (a
        wait inside another, a signal handler's, once)."""
        waited_s, since = self._waits
        began = time.perf_counter()
        if since is None:
            self._waits = (waited_s, began)
        try:
            yield
        finally:
            if since is None:
                self._waits = (waited_s + time.perf_counter() - began, None)


def stop_hooks(jobs: list[HookJob], reason: str) -> None:
    """An interrupt reached a thread waiting for ``jobs``: each is stopped (its process group
    killed, the run recorded ``interrupted`` with ``reason``), and the wait for their records
    is bounded."""
    for job in jobs:
        job.stop(reason)
    try:
        for job in jobs:
            if job.started.is_set():
                with job.waiting():
                    Waits.wait_event(job.finished, timeout=finish_hook.STOP_BOUND_S + RECORD_BUDGET_S)
    except BaseException:
        once("hook-wait", logging.ERROR, "profdsl: interrupted again while the finish hook was being stopped")
