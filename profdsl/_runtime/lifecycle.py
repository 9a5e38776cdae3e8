"""A :class:`~profdsl._runtime.profiler.Profiler`'s lifecycle: where it is (one :class:`Where`),
and one table of what each call does from there (torch.profiler's ``action_map`` is the model).

Every call (``start(n)``, ``start(S)`` while step S is open, ``stop()``, ``close()``) looks up
its row in :data:`TABLE` by the profiler's :class:`Phase` and runs the row's actions in order
(:meth:`Lifecycle.call`). An action is either a plain one (a log line for misuse, handing back a
session left to this thread) or a step boundary (begin a step, end it, finish), and every
boundary is crossed the same way: its bookkeeping and the step events it makes
(:class:`~profdsl._runtime.step_events.StepEvents`) run with the main thread's signals held (a
signal meanwhile is delivered once the boundary is crossed), then the calling thread waits,
bounded, for what the boundary left on the writer (docs/architecture.md, "What a caller waits
for"), then what follows the boundary runs (a step's timings are published). Misuse is logged
and ignored, never raised into training.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple, SupportsIndex

import attrs

from profdsl._runtime.meter import NULL_METER, StepMeter
from profdsl._runtime.role_capture import RoleCapture
from profdsl._runtime.step import StepContext
from profdsl._runtime.step_events import StepEvents
from profdsl._runtime.writer.jobs import traces_into
from profdsl.config._checks import to_index
from profdsl.errors import ConfigError

if TYPE_CHECKING:
    from profdsl._runtime.plan import RolePlan
    from profdsl._runtime.process import Process
    from profdsl._runtime.step import Closable
    from profdsl._runtime.step_events import Outstanding
    from profdsl.config import ProfilerConfig
    from profdsl.metrics._exporters import OnStep
    from profdsl.metrics._timings import StepTimings

__all__ = ["TABLE", "TURN_WAIT_S", "Call", "Lifecycle", "Phase", "State", "Turns", "Where"]


class State(enum.Enum):
    """Where a :class:`~profdsl._runtime.profiler.Profiler`'s capture is in its lifecycle: idle
    (nothing captured yet), armed (discrete stages of this step will capture), recording (this
    continuous step is captured), stopped (between captured steps, or in a step not captured
    after one), closed."""

    IDLE = "idle"
    ARMED = "armed"
    RECORDING = "recording"
    STOPPED = "stopped"
    CLOSED = "closed"


class Phase(enum.Enum):
    """The row of :data:`TABLE` a profiler is on: between steps, in a numbered step, in a step
    whose number was no step number (it is not profiled), or closed."""

    OUTSIDE = "outside a step"
    IN_STEP = "in a numbered step"
    UNNUMBERED = "in a step with no number"
    CLOSED = "closed"


class Call(enum.Enum):
    """What the loop asked: its column of :data:`TABLE`."""

    START = "start(n)"
    START_OPEN = "start(S) while step S is open"
    STOP = "stop()"
    CLOSE = "close()"


@attrs.frozen
class Where:
    """Where a profiler is, as one value (replaced whole at each change): its capture's
    ``state``, the numbered ``step`` open (None: none), and whether a step is open at all (one
    with no number is open with ``step`` None)."""

    state: State = State.IDLE
    step: int | None = None
    open: bool = False

    @property
    def phase(self) -> Phase:
        """Its row of the table."""
        if self.state is State.CLOSED:
            return Phase.CLOSED
        if self.step is not None:
            return Phase.IN_STEP
        return Phase.UNNUMBERED if self.open else Phase.OUTSIDE

    @property
    def capturing(self) -> bool:
        """Whether the step open is captured (armed or recording)."""
        return self.state is State.ARMED or self.state is State.RECORDING


#: What a step boundary ended: the step's timings (None when it was not timed) and whether the
#: step was captured.
Ended = tuple["StepTimings | None", bool]


class Boundary(NamedTuple):
    """A step boundary of the table: ``cross`` (with signals held; returns what to wait for on
    the writer, and what it ended), whether it is the last one (``closing``: every hook still
    owed is waited for), and ``after`` (once the wait is over; None: nothing)."""

    cross: Callable[[Lifecycle, int | None], tuple[Outstanding | None, Ended | None]]
    closing: bool
    after: Callable[[Lifecycle, Ended | None], StepTimings | None] | None


class Lifecycle:
    """One role's lifecycle in one process: ``where`` it is, the step registered where the DSL
    finds it (``step``), the calls' ``turns``, and the parts each boundary drives, built here
    from the plan: ``capture``, ``steps`` and ``meter`` (``device``: whether it times device
    work). ``config`` is only handed to each step (``rollout_window`` reads it)."""

    def __init__(
        self,
        owner: Closable,
        *,
        config: ProfilerConfig,
        plan: RolePlan,
        process: Process,
        on_step: OnStep | None = None,
        device: bool = True,
    ) -> None:
        self.owner, self.config, self.plan, self.process = owner, config, plan, process
        self.turns = Turns()
        self.capture = RoleCapture(plan, process.slot)
        self.steps = StepEvents(plan, self.capture, process)
        self.meter = (
            StepMeter(plan, on_step, device=device, servers=process.servers) if plan.metrics.enabled else NULL_METER
        )
        self.where = Where()
        self.step: StepContext | None = None  # the step open, while it has anything on

    def call(self, call: Call, asked: SupportsIndex | None = None) -> StepTimings | None:
        """The loop's ``call`` (``asked``: ``start``'s argument), in its turn (nothing in a forked
        child), carried out from where the profiler is: ``start(S)`` while step S is open is its
        own column; the timings of a step it ended, if any."""
        if self.turns.inherited:
            return None
        ended: StepTimings | None = None
        with self.turns.turn(self.plan):
            number = None  # start's argument as a step number
            if call is Call.START and self.where.phase is not Phase.CLOSED:
                number = _step_number(self, asked)
                call = Call.START_OPEN if number is not None and number == self.where.step else call
            for action in TABLE[(self.where.phase, call)]:
                if isinstance(action, Boundary):
                    with self.process.signals.deferred():  # a signal meanwhile: delivered once it is crossed
                        outstanding, what = action.cross(self, number)
                    if outstanding is not None:  # bounded: docs/architecture.md, "What a caller waits for"
                        outstanding.wait(self.process, closing=action.closing)
                    if action.after is not None:
                        ended = action.after(self, what)
                else:
                    action(self, asked, number)
        return ended

    def _begin(self, number: int | None) -> tuple[Outstanding | None, Ended | None]:
        """Step ``number`` begins (None: a step with no number, never profiled). What is
        outstanding here is a capture the loop walked out of (its last profiled step): the step
        that begins now opens none, so waiting after beginning it is the same."""
        self.where = Where(self.where.state, None, number is None)
        profiled, outstanding = self.steps.begin(number)
        if number is not None:
            self._register(number, profiled)
        return outstanding, None

    def _register(self, number: int, profiled: bool) -> None:
        """Step ``number`` is open: captured when its capture is open, timed when metrics are on,
        and registered once when it has anything on."""
        self.where = Where(self.where.state, number, True)
        recorder = None
        if self.capture.selected and self.steps.tracker.is_open:
            self.where = Where(State.ARMED if self.plan.capture.discrete else State.RECORDING, number, True)
            recorder = self.capture.open(number, self.steps.claim, self.steps.note)
        root = self.meter.begin(number)
        if profiled or recorder is not None or root is not None:
            self.step = step = StepContext(
                self.plan,
                number,
                config=self.config,
                writer=self.process.writer,
                profiled=profiled,
                recorder=recorder,
                root=root,
            )
            self.process.registry.activate(step)

    def _unregister(self) -> None:
        """The step leaves the registry: no entry finds it any more."""
        step, self.step = self.step, None
        if step is not None:
            self.process.registry.deactivate(step)

    def _end(self, number: int | None) -> tuple[Outstanding | None, Ended | None]:
        """The step open ends: its capture (a run of continuous steps keeps its capture between
        steps), its timings."""
        step, traced = self.where.step, self.where.capturing
        self.where = Where(State.IDLE if self.where.state is State.IDLE else State.STOPPED)
        self._unregister()
        timings = self.meter.end()
        self.capture.end()
        return self.steps.end(step), (timings, traced)

    def _ended(self, ended: Ended | None) -> StepTimings | None:
        """After the step's capture has ended: its timings to the exporters, ``on_step``, the
        metrics log and the slow-step check."""
        timings, traced = ended or (None, False)
        if timings is None:
            return None
        self.meter.publish(timings)
        if self.plan.metrics.log:
            self.process.logs.write(self.plan, timings, traced=traced)
        self.steps.timed(timings, traced=traced)
        return timings

    def _finish(self, number: int | None) -> tuple[Outstanding | None, Ended | None]:
        """Training is over: the step open (if any) is dropped, what is open is closed, and what
        cannot be ended here is recorded. Interrupted (Ctrl-C), the profiler is not closed: the
        next ``close()`` finishes."""
        where = self.where
        self.where = Where(
            State.IDLE if where.state is State.IDLE else State.STOPPED, None, where.open and where.step is None
        )
        self._unregister()
        self.meter.close()
        self.capture.end()
        outstanding = self.steps.finish()
        self.process.slot.abandon("close()", role=self.plan.role)
        return outstanding, None

    def _closed(self, ended: Ended | None) -> None:
        self.where = Where(State.CLOSED)
        self.process.live.discard(self.owner)
        folder = os.path.abspath(self.plan.save_path)
        if self.process.log.seen(traces_into(folder)):  # this process wrote traces there
            self.plan.say(
                logging.INFO,
                "closed; the traces are in %s (profdsl ls, check, summary)",
                folder,
                key=f"closed-into:{folder}",
            )


#: How long a call waits for another thread's call on the same profiler before going on anyway
#: (a thread stuck inside one must not hang the others, or the exit).
TURN_WAIT_S = 60.0


class Turns:
    """A profiler's calls, one at a time when several threads make them (bounded:
    :data:`TURN_WAIT_S`; re-entrant: a signal handler on the main thread may call ``close()``
    inside one of them), and none in a forked child: it inherits the profiler but no duty (the
    parent profiles, stops and owes the hook)."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.RLock()

    @property
    def inherited(self) -> bool:
        """Whether this is a forked child's copy."""
        return os.getpid() != self._pid

    @contextlib.contextmanager
    def turn(self, plan: RolePlan) -> Iterator[None]:
        """This call's turn (``plan``: whose, for the log)."""
        mine = self._lock.acquire(timeout=TURN_WAIT_S)
        if not mine:
            plan.say(
                logging.ERROR,
                "another thread's call on this Profiler has not returned for %gs; going on without waiting for it",
                TURN_WAIT_S,
                key=f"turn:{id(self)}",
            )
        try:
            yield
        finally:
            if mine:
                self._lock.release()


def _step_number(lifecycle: Lifecycle, step: SupportsIndex | None) -> int | None:
    """``step`` as a plain int, or None (logged once per profiler) when it is no step number."""
    try:
        return to_index("step", step)
    except ConfigError as exc:
        lifecycle.plan.say(
            logging.WARNING,
            "not a step number (%s): such a step is not profiled",
            exc,
            key=f"step-number:{id(lifecycle.owner)}",
        )
        return None


# The plain actions of the table: a session handed back, a log line for misuse.

#: A plain action of the table: ``(lifecycle, start's argument, it as a step number)``.
Action = Callable[[Lifecycle, SupportsIndex | None, int | None], None]


def _hand_back(lifecycle: Lifecycle, asked: SupportsIndex | None, number: int | None) -> None:
    """End a session this thread owns that a call from another thread could not end (its
    ``close()``, or the end of a step it could not stop)."""
    lifecycle.process.slot.flush()


def _say(key: str | None, level: int, message: str, *values: str) -> Action:
    """A plain action that logs misuse: ``message`` after the profiler's rank and role, with
    the call's ``values`` (``asked``: start's argument, ``number``: it as a step number,
    ``open``: the step open); once per profiler under ``key``, or every time (None)."""

    def say(lifecycle: Lifecycle, asked: SupportsIndex | None, number: int | None) -> None:
        known = dict(asked=asked, number=number, open=lifecycle.where.step)
        once_key = None if key is None else f"{key}:{id(lifecycle.owner)}"
        lifecycle.plan.say(level, message, *(known[v] for v in values), key=once_key)

    return say


_closed_start = _say("closed-start", logging.WARNING, "start(%s) after close() ignored", "asked")
_started_again = _say(
    "start-again",
    logging.INFO,
    "start(%s) while step %s is already open: ignored (the step goes on)",
    "number",
    "number",
)
_start_while_open = _say(None, logging.WARNING, "start(%s) while step %s is open; stopping it", "asked", "open")
_unstarted_stop = _say(None, logging.WARNING, "stop() without start() ignored")


def _leave_unnumbered(lifecycle: Lifecycle, asked: SupportsIndex | None, number: int | None) -> None:
    lifecycle.where = attrs.evolve(lifecycle.where, open=False)


_BEGIN = Boundary(Lifecycle._begin, False, None)
_END = Boundary(Lifecycle._end, False, Lifecycle._ended)
_FINISH = Boundary(Lifecycle._finish, True, Lifecycle._closed)

#: The lifecycle: for each phase and call, the actions run in order.
TABLE: dict[tuple[Phase, Call], tuple[Boundary | Action, ...]] = {
    (Phase.OUTSIDE, Call.START): (_BEGIN,),
    (Phase.OUTSIDE, Call.STOP): (_hand_back, _unstarted_stop),
    (Phase.OUTSIDE, Call.CLOSE): (_FINISH,),
    (Phase.IN_STEP, Call.START): (_start_while_open, _END, _BEGIN),
    (Phase.IN_STEP, Call.START_OPEN): (_started_again,),
    (Phase.IN_STEP, Call.STOP): (_END,),
    (Phase.IN_STEP, Call.CLOSE): (_FINISH,),
    (Phase.UNNUMBERED, Call.START): (_BEGIN,),
    (Phase.UNNUMBERED, Call.STOP): (_hand_back, _leave_unnumbered),
    (Phase.UNNUMBERED, Call.CLOSE): (_FINISH,),
    (Phase.CLOSED, Call.START): (_hand_back, _closed_start),
    (Phase.CLOSED, Call.STOP): (_hand_back,),
    (Phase.CLOSED, Call.CLOSE): (_hand_back,),
}
