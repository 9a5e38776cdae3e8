"""One role's captures that the plan did not name (``docs/on-demand.md``): the capture requests it
takes, and the slow steps it finds itself (``ProfilerConfig.auto``).

A request is *offered* by the process's :class:`~profdsl._runtime.inbox.Inbox` on whatever
thread carried it, to the role's :class:`Demand`, which decides at once whether it takes it
(on-demand captures on, one of the roles asked, at most ``max_steps`` steps and
``max_requests`` requests, this rank asked, or this rank runs the hook for it), joins the
request's finish-hook round, and notes it. At its next step boundary, on its own thread, its
:class:`DemandSteps` *resolves* it into steps (``at_step`` when that is still to come, else the
step beginning), which the role's step events ask their
:class:`~profdsl.core.step_plan.StepTracker` for. After the request's last step (or at
``close()``), the role arrives at the round: the hook runs once every role that took it is done
(once per completed request), in the background (no step waits for it; ``close()`` does).

A step clock (a driver's: it captures nothing and runs no hook) takes the requests meant for
the rollout engines (``roles`` empty, or naming ``rollout``), whatever rank they name, so that
``rollout_window`` profiles the engines on those steps.

A slow step (:class:`SlowStepRequests`) becomes a request delivered to the inbox like any other.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable
from typing import SupportsIndex

import attrs

from profdsl._runtime.inbox import Inbox
from profdsl._runtime.plan import RolePlan
from profdsl._runtime.role_capture import RoleCapture
from profdsl._runtime.writer.hook import HookPlan
from profdsl._runtime.writer.rounds import HookRounds
from profdsl.collect._requests import new_id
from profdsl.config import AutoCapture
from profdsl.core._log import logger
from profdsl.errors import ConfigError
from profdsl.metrics._slow import SlowSteps
from profdsl.metrics._timings import StepTimings
from profdsl.records.fields import RecordError
from profdsl.records.requests import CaptureNote, CaptureRequest, capture_request

__all__ = ["ROLLOUT", "Demand", "DemandSteps", "SlowStepRequests", "deliver_request"]

#: The role name a request uses for the rollout engines (driven by a driver's step clock).
ROLLOUT = "rollout"


@attrs.define
class _Taken:
    """A request this role took: whether it traces this rank, the hook this rank runs for it,
    its steps here once resolved, and the steps of it this role began."""

    request: CaptureRequest
    traced: bool
    hook: HookPlan | None
    note: CaptureNote | None = None
    steps: range = range(0)
    began: list[int] = attrs.field(factory=list)


class Demand:
    """The capture requests one role takes: the inbox's member, answering offers on any thread
    (see the module docstring); what it takes waits in ``pending`` for the role's thread."""

    def __init__(self, plan: RolePlan, *, rounds: HookRounds, member: object, inbox: Inbox) -> None:
        self.role, self.save_path = plan.role, plan.save_path
        self.token, self.hosts = plan.demand.on_demand.token, plan.demand.on_demand.hosts
        self._plan, self._rounds, self.member, self._inbox = plan, rounds, member, inbox
        self.clock = not plan.member and plan.demand.enabled  # a driver's step clock
        self._names = {plan.role, ROLLOUT} if self.clock else {plan.role}
        self._lock = threading.Lock()
        self.pending: collections.deque[_Taken] = collections.deque()
        self._taken = 0
        self._subscribed = plan.demand.enabled
        self._watching = plan.demand.enabled and plan.demand.on_demand.enabled
        if self._subscribed:
            inbox.subscribe(self, watch=self._watching)

    def offer(self, request: CaptureRequest) -> str | None:
        """Take ``request`` (None) or say why not; never waits for the role's thread."""
        config, who = self._plan.demand, f"{self.role} (rank {self._plan.rank})"
        auto = request.source == "auto"
        if not auto and not config.on_demand.enabled:
            return f"{who}: on-demand captures are off (OnDemand.enabled)"
        if request.roles is not None and not self._names.intersection(request.roles):
            return f"{who}: not a role asked ({', '.join(request.roles)})"
        if (request.steps or 0) > config.on_demand.max_steps:
            return f"{who}: {request.steps} steps asked, at most {config.on_demand.max_steps} (OnDemand.max_steps)"
        try:  # whether the request names this rank (no ranks: the ranks the config traces)
            traced = self.clock or self._plan.selection.asks(request.ranks, self._plan.topology, self._plan.traced)
        except ConfigError as exc:
            return f"{who}: {exc}"
        hook = self._plan.request_hook(traced)
        if not traced and hook is None:
            return f"{who}: this rank was not asked"
        with self._lock:
            if not auto and self._taken >= config.on_demand.max_requests:
                return (
                    f"{who}: {self._taken} requests taken already, at most {config.on_demand.max_requests} "
                    "(OnDemand.max_requests)"
                )
            self._taken += not auto
        if self._plan.member:
            self._rounds.join(self.save_path, self.member, tag=request.id)
        self.pending.append(_Taken(request, traced, hook))
        return None

    def check(self) -> None:
        """Look for request files in the save_path (one ``stat``), when the role watches it."""
        if self._watching:
            self._inbox.check(self.save_path)

    def close(self) -> None:
        """No more requests are taken."""
        if self._subscribed:
            self._subscribed = self._watching = False
            self._inbox.unsubscribe(self)


class DemandSteps:
    """The requests one role took, at its step boundaries (its thread): each resolved into steps,
    noted, and arrived at its round once its last step ended (see the module docstring)."""

    def __init__(self, demand: Demand, plan: RolePlan, capture: RoleCapture, *, rounds: HookRounds) -> None:
        self.demand, self._plan, self._capture, self._rounds = demand, plan, capture, rounds
        self._active: dict[str, _Taken] = {}

    def poll(self, step: int) -> list[tuple[range, str]]:
        """Step ``step`` begins: look for request files, and turn the requests taken since the
        last boundary into steps; the steps to trace here, each with its request's id."""
        self.demand.check()
        asked: list[tuple[range, str]] = []
        while self.demand.pending:
            self._resolve(self.demand.pending.popleft(), step, asked)
        for taken in self._active.values():
            if step in taken.steps:
                taken.began.append(step)
        return asked

    def _resolve(self, taken: _Taken, step: int, asked: list[tuple[range, str]]) -> None:
        request = taken.request
        start = request.at_step if request.at_step is not None else step
        first, last = max(start, step), start + (request.steps or 1) - 1
        if first > last:
            self._plan.say(
                logging.WARNING,
                "capture request %s asked for steps %s-%s, which this process "
                "has passed (it is at step %s): nothing traced",
                request.id,
                start,
                last,
                step,
                key=f"request-passed:{request.id}:{id(self)}",
            )
            self._arrive(taken)
            return
        if taken.traced and not self.demand.clock and not self._capture.enable():
            taken.traced = False  # no backend (torch missing: logged once)
        covering = self._covering(taken, first, last)
        if covering is not None:  # one slow step, one capture: the rank's own and the driver's
            self._plan.say(
                logging.INFO,
                "automatic capture %s of steps %s-%s is %s's: one capture, one hook run",
                request.id,
                first,
                last,
                covering.request.id,
            )
            self._arrive(taken)
            return
        taken.note, taken.steps = request.note(first, last), range(first, last + 1)
        self._active[str(request.id)] = taken
        if taken.traced:
            asked.append((taken.steps, str(request.id)))
        if not self.demand.clock:
            self._plan.say(
                logging.INFO,
                "capture request %s: %s steps %s-%s%s",
                request.id,
                "tracing" if taken.traced else "runs the hook after",
                first,
                last,
                f" ({request.reason})" if request.reason else "",
            )

    def _covering(self, taken: _Taken, first: int, last: int) -> _Taken | None:
        """An automatic capture this role already took for the same steps, doing the same here
        (tracing, running the hook), that automatic ``taken`` would repeat; None otherwise. A
        request someone made is never folded into another: they asked for it."""
        if taken.request.source != "auto":
            return None
        for other in self._active.values():
            note = other.note
            if (
                other.request.source == "auto"
                and note is not None
                and note.steps == (first, last)
                and (other.traced, other.hook is None) == (taken.traced, taken.hook is None)
            ):
                return other
        return None

    def note(self, tag: str | None) -> CaptureNote | None:
        """Why the steps of request ``tag`` are captured (None: the plan's steps)."""
        taken = self._active.get(tag) if tag is not None else None
        return None if taken is None else taken.note

    def ended(self, step: int) -> None:
        """Step ``step`` ended (its session closed, its traces handed to the writer): the requests
        whose last step it was are done here."""
        for taken in [t for t in self._active.values() if step >= t.steps[-1]]:
            self._arrive(taken)

    def finish(self) -> None:
        """Training is over: every request taken is done here (its hook runs if any of its
        steps ran); no more requests are taken."""
        self.demand.close()
        while self.demand.pending:
            self._arrive(self.demand.pending.popleft())
        for taken in list(self._active.values()):
            self._arrive(taken)

    def _arrive(self, taken: _Taken) -> None:
        self._active.pop(str(taken.request.id), None)
        if self._plan.member:
            self._rounds.arrive(
                self._plan.save_path,
                self.demand.member,
                taken.hook if taken.began else None,
                taken.began if taken.traced else (),
                tag=taken.request.id,
                note=taken.note,
            )


class SlowStepRequests:
    """One role's slow steps, requested (``ProfilerConfig.auto``): a step with a slow watched
    stage asks, through the inbox, for this rank's next step."""

    def __init__(self, plan: RolePlan, auto: AutoCapture, inbox: Inbox) -> None:
        self.role, self._plan, self._inbox = plan.role, plan, inbox
        self.slow = SlowSteps(auto)

    def after_step(self, timings: StepTimings, *, traced: bool) -> None:
        """A step's timings are out: when a watched stage was slow against this rank's earlier
        steps, the next step of this rank is requested (``ProfilerConfig.auto``). Never raises
        (a failure is logged once)."""
        try:
            self._check(timings, traced)
        except Exception as exc:  # a slow-step check never reaches the training loop
            self._plan.say(
                logging.ERROR,
                "checking step %s for slow stages failed: %r",
                timings.step,
                exc,
                key=f"auto-capture:{self.role}",
            )

    def _check(self, timings: StepTimings, traced: bool) -> None:
        found = self.slow.observe(timings.step, {p: t.total_s for p, t in timings.stages.items()}, traced=traced)
        if found is None:
            return
        plan, step = self._plan, timings.step + 1
        reason = f"{self.role}: {found.reason()}"
        answer = self._inbox.deliver(
            CaptureRequest(
                id=f"auto-r{plan.rank}-s{step}", steps=1, ranks=(plan.rank,), at_step=step, reason=reason, source="auto"
            )
        )
        if answer.status == "accepted":  # said after it is taken: never a capture that does not happen
            then = f"tracing step {step} (automatic capture {self.slow.captures} of {self.slow.auto.max_captures})"
        else:
            then = f"step {step} is not traced ({'; '.join(answer.why) or answer.status})"
        logger.warning("[profdsl rank %s] slow step: %s; %s", plan.rank, reason, then)


def deliver_request(
    inbox: Inbox,
    steps: SupportsIndex,
    *,
    ranks: Iterable[SupportsIndex] | str | None,
    roles: Iterable[str] | None,
    at_step: SupportsIndex | None,
    reason: str | None,
    who: RolePlan,
) -> str | None:
    """``Profiler.request``: a capture request made through the API, delivered to this
    process's ``inbox``; its id, or None when it is malformed (logged as ``who``'s). Never raises."""
    try:
        request = capture_request(
            steps, ranks=ranks, roles=roles, at_step=at_step, reason=reason, source="api", request_id=new_id("api")
        )
    except RecordError as exc:
        who.say(logging.WARNING, "request(...) is no capture request (%s): ignored", exc)
        return None
    inbox.deliver(request)
    return request.id
