"""What a profiler does at step boundaries: follow the step plan, claim the process's capture for
continuous steps, move nsys reports in after each capture, and arrive at the finish hook's round
when the hook is owed (after every artifact of the last profiled step, its nsys reports
included, is on the writer's queue).

Steps the plan did not name are captured when a request asks (:mod:`profdsl._runtime.demand`):
requests are resolved into steps as a step begins, and a request's round is arrived at when its
last step has ended."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import attrs

from profdsl._runtime.demand import Demand, DemandSteps, SlowStepRequests
from profdsl._runtime.plan import RolePlan
from profdsl._runtime.role_capture import RoleCapture
from profdsl._runtime.slot.claims import Claim
from profdsl._runtime.writer.hook import HookJob, stop_hooks
from profdsl._runtime.writer.jobs import MoveJob
from profdsl._runtime.writer.writer import Ticket, Writer
from profdsl.collect import _relocate as relocate
from profdsl.core._log import logger, once
from profdsl.core._units import now_ms
from profdsl.core.step_plan import Event, StepTracker
from profdsl.metrics._timings import StepTimings
from profdsl.records.requests import CaptureNote

if TYPE_CHECKING:
    from profdsl._runtime.process import Process

__all__ = ["NsysReports", "Outstanding", "StepEvents"]

#: Said when a wait for the last profiled step's traces runs out.
_STILL_WRITTEN = "profdsl: the last profiled step's traces are still being written; they go on in the background"
#: At each stop, how long the move of nsys reports waits for them; at the last profiled step
#: (before the hook), how long it waits for nsys to finish converting and writing them: nsys
#: writes a report after its range ends, so a report moved at once would be missed or partial
#: (tests/test_collect_faults.py::TestNsysAtClose,
#: tests/test_artifacts.py::TestNsysWithProfiler::test_reports_moved_late_ones_at_close).
NSYS_STOP_WAIT_S = 2.0
NSYS_FINAL_WAIT_S = 30.0


@attrs.frozen
class Outstanding:
    """What a step boundary leaves its caller to wait for: the writer's jobs up to ``until``
    (the artifacts of the last profiled step, or everything at ``close()``), and the hook
    ``due``, when this made it due."""

    until: Ticket | None
    due: HookJob | None = None

    def wait(self, process: Process, *, closing: bool) -> None:
        """Wait, bounded, until the writer is through what the caller needs: the jobs up to
        ``until``, then the hook made due when the caller waits for it (not one in the
        background, but at ``closing``); at ``closing`` also every hook not finished, whoever
        made it due; otherwise (the last profiled step, no hook to wait for) until the jobs up
        to ``until`` settle (a trace: once torch's events are on disk), the rest of each trace
        going on in the background, ``close()`` waiting for it. The traces are waited for up
        to their ``export_timeout_s``; when a hook is due and they run out of time, they are
        given up (recorded ``incomplete``), so that the hook runs now, bounded by its
        ``timeout_s``. An interrupt while waiting stops the hooks (their commands killed,
        recorded ``interrupted``) and goes on (docs/architecture.md, "What a caller waits for")."""
        until, due, writer, rounds = self.until, self.due, process.writer, process.rounds
        hook = due is not None and (closing or not due.background)
        try:
            if closing:
                for job in rounds.unfinished():
                    if job is not due:
                        job.wait()
            if not closing and not hook:  # the last profiled step, no hook to wait for
                if until is not None and not writer.wait_settled(until, timeout=writer.budget(until)):
                    logger.warning(_STILL_WRITTEN)
                return
            if not hook and until is None:
                return
            if not writer.wait_exports():
                if not hook:
                    logger.warning(_STILL_WRITTEN)
                    return
                writer.give_up()
                logger.error(
                    "profdsl: traces still being written when the finish hook was due "
                    "were given up (recorded incomplete); the hook runs now"
                )
            if due is not None and hook:
                due.wait()
            else:
                writer.wait(until, timeout=writer.budget(until))
        except BaseException as exc:
            stop_hooks(rounds.unfinished(), f"{type(exc).__name__} while waiting for the finish hook")
            raise


class StepEvents:
    """One profiler's step events, carried out: the step plan's (:class:`StepTracker`) and the
    requests' at each boundary. It owns no session: it claims the slot for a continuous step and
    releases it, moves nsys reports in, and arrives at the finish hook's round."""

    def __init__(self, plan: RolePlan, capture: RoleCapture, process: Process) -> None:
        self.profiled_steps: list[int] = []
        self.claim: Claim | None = None  # continuous mode: this role's hold on the capture
        self._plan, self._capture = plan, capture
        self._slot, self._writer, self._rounds = process.slot, process.writer, process.rounds
        self._hook_owed = False  # the hook event was interrupted before it was carried out
        self._arrived = not plan.member  # a step clock never holds up another role's hook
        self.nsys = NsysReports(plan, capture, process.writer)
        if plan.member:
            process.rounds.join(plan.save_path, self)
        demand = Demand(plan, rounds=process.rounds, member=self, inbox=process.inbox)
        self.demand = DemandSteps(demand, plan, capture, rounds=process.rounds)
        auto = plan.demand.auto
        self.auto = SlowStepRequests(plan, auto, process.inbox) if auto is not None and plan.member else None
        self.tracker = StepTracker(plan.steps)

    @property
    def note(self) -> CaptureNote | None:
        """Why the step begun last is captured, when a request asked for it (None: the plan)."""
        return self.demand.note(self.tracker.capture)

    def begin(self, step: int | None) -> tuple[bool, Outstanding | None]:
        """Step ``step`` begins: whether it is profiled (None, a step without a usable number,
        never is), and what to wait for when ending a step the loop walked out of was the last
        profiled one."""
        self._slot.flush()
        if step is not None:
            for steps, tag in self.demand.poll(step):
                self.tracker.request(steps, tag)
        events = self.tracker.begin(step)
        profiled = self.tracker.profiling
        if self.tracker.hook_done and not profiled and self.tracker.plan.is_profiled(step):
            once(
                f"after-hook:{id(self)}",
                logging.WARNING,
                "profdsl: step %s is a profiled step, but it comes after the finish hook was "
                "owed (a retried step?): it is not profiled again",
                step,
            )
        if profiled and step is not None and self.tracker.capture is None:
            self.profiled_steps.append(step)  # the plan's (a request's steps are its round's)
        return profiled, self._apply(events, step)

    def end(self, step: int | None) -> Outstanding | None:
        """The current step (``step``) ends; what to wait for when it was the last profiled one.
        The requests whose last step it was are done (their hooks are not waited for)."""
        outstanding = self._apply(self.tracker.end(), None)
        if step is not None:
            self.demand.ended(step)
        return outstanding

    def finish(self) -> Outstanding:
        """Training is over: close what is open, move the last artifacts in, arrive at the
        round (an owed hook runs); what to wait for: everything on the writer's queue."""
        events = self.tracker.finish()
        if self._hook_owed and Event.HOOK not in events:
            events.append(Event.HOOK)
        outstanding = self._apply(events, None)
        self._slot.flush()
        self.nsys.move(final=True)
        self.demand.finish()
        due = self._arrive(hook=False) or (outstanding.due if outstanding is not None else None)
        return Outstanding(self._writer.tail(), due)

    def timed(self, timings: StepTimings, *, traced: bool) -> None:
        """A step's timings are out: a slow step requests the next one (``ProfilerConfig.auto``)."""
        if self.auto is not None:
            self.auto.after_step(timings, traced=traced)

    def _apply(self, events: list[Event], step: int | None) -> Outstanding | None:
        """Carry out ``events`` in order. When one is interrupted, a hook event after it stays
        owed: it runs at ``finish`` (``close()`` or exit)."""
        outstanding = None
        for index, event in enumerate(events):
            try:
                outstanding = self._carry_out(event, step) or outstanding
            except BaseException:
                self._hook_owed |= Event.HOOK in events[index:]
                raise
            if event is Event.HOOK:
                self._hook_owed = False
        return outstanding

    def _carry_out(self, event: Event, step: int | None) -> Outstanding | None:
        if event is Event.OPEN and self._capture.selected and not self._plan.capture.discrete and step is not None:
            self.claim = self._capture.claim(step, self.note)
            self._slot.claim(self.claim)
        elif event is Event.CLOSE and self.claim is not None:
            claim, self.claim = self.claim, None
            self._slot.release(claim)
            self.nsys.move(final=False)
        elif event is Event.HOOK:  # every artifact first (the last nsys reports), then the hook
            self.nsys.move(final=True)
            until = self._writer.tail()
            return Outstanding(until, self._arrive(hook=True))
        return None

    def _arrive(self, *, hook: bool) -> HookJob | None:
        """This role is done with its save_path (handing in its hook when it owes one)."""
        if self._arrived:
            return None
        self._arrived = True
        return self._rounds.arrive(self._plan.save_path, self, self._plan.hook if hook else None, self.profiled_steps)


class NsysReports:
    """One role's nsys reports, moved into its save_path by the writer after each capture (nsys
    writes them in its own folder, after its range ends)."""

    def __init__(self, plan: RolePlan, capture: RoleCapture, writer: Writer) -> None:
        self._plan, self._capture, self._writer = plan, capture, writer
        self._waited = False  # a final pass waited for conversions already

    def move(self, *, final: bool) -> None:
        """After a capture (of a role that captures with nsys here and relocates its reports):
        have the writer move this process's finished nsys reports in. A final pass (the last
        profiled step, and close) waits for reports still converting and records those it gave
        up on (once: an unchanged report recorded so is not waited for again); a later pass
        still moves a late one in (its record then supersedes the loss)."""
        plan, config = self._plan, self._plan.capture
        if not (self._capture.selected and config.tool == "nsys" and config.relocate_results):
            return
        wait_s = NSYS_FINAL_WAIT_S if final and not self._waited else 0.0  # once: at the first final pass
        self._waited |= final
        source = config.nsys_report_dir or relocate.default_nsys_dir()
        label = dict(
            role=plan.role,
            rank=plan.rank,
            world_size=plan.world_size,
            host=plan.label.host,
            **plan.topology.parallel.coords(),
        )
        pid = os.getpid()

        def reports() -> list[relocate.Move | relocate.Skip]:
            if wait_s:
                relocate.wait_converted(source, pid, wait_s)
            try:
                names = os.listdir(source)
            except OSError:
                return []  # nothing written there (yet): late reports are picked up later
            return relocate.plan_nsys(names, source_dir=source, pid=pid, label=label, time_ms=now_ms())

        self._writer.submit(
            MoveJob(
                plan.save_path,
                reports,
                wait_s=NSYS_STOP_WAIT_S,
                record_incomplete=final,
                what="nsys reports",
            )
        )
