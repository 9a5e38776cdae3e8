"""Writing one trace file into ``save_path``: collision-free, never overwriting, verified, recorded.

Two steps, which may run on different threads: :func:`write_events` has the session write its
events as plain JSON to a hidden temporary file in ``save_path`` (where the session's thread
allows it: on the writer's thread, else on the session's); :func:`finish` splices in the
metadata, compresses and checks the file (:mod:`profdsl.collect._tracefile`), reserves its final
name with an exclusive create (bumping ``part`` while the name is taken, by this or any other
process), renames it over the reservation and records it: ``ok``, or ``incomplete`` /
``truncated`` with the reason when the trace holds less than its capture was asked for
(:mod:`profdsl.core._completeness`, judged from what the check saw while streaming). What changes what ``save_path``
shows (the reservation, the rename, the record) goes through a *commit* function, which the
runtime's writer uses to refuse commits of a trace it gave up on. Nothing is written outside
``save_path`` (torch's own ``.gz`` export compresses through ``TMPDIR``). A failure is logged
once and recorded in the manifest with its reason, its temporaries removed; it never reaches the
training loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from profdsl.collect._manifest import append_record
from profdsl.collect._relocate import direct, reserve
from profdsl.collect._tracefile import COMPRESS_LEVEL, Census, compress_trace
from profdsl.config._parallel import Parallel
from profdsl.core._completeness import Expect, judge
from profdsl.core._log import described, failing_once, once
from profdsl.core._naming import PLAIN_TRACE_EXT, TEMP_PREFIX, TRACE_EXT, TraceName
from profdsl.core._units import ms_of
from profdsl.errors import ConfigError
from profdsl.records.manifest import TraceRecord
from profdsl.records.requests import CaptureNote

if TYPE_CHECKING:
    from profdsl.config import TorchOptions

__all__ = [
    "Commit",
    "ExportPolicy",
    "PendingTrace",
    "TraceLabel",
    "events_owner",
    "finish",
    "write_events",
]

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class ExportPolicy:
    """How a trace is finished: its gzip ``level`` (0: plain JSON), at most ``in_flight`` traces
    finished in the background at a time, and how long ``close()`` and exit wait for them
    (``timeout_s``). :meth:`of` reads them from the ``TorchOptions`` of the trace's config."""

    level: int = COMPRESS_LEVEL
    in_flight: int = 2
    timeout_s: float = 900.0

    @classmethod
    def of(cls, options: TorchOptions) -> ExportPolicy:
        """The policy ``options`` ask for (validated there)."""
        return cls(
            level=options.compress_level, in_flight=options.exports_in_flight, timeout_s=float(options.export_timeout_s)
        )


_WHO: Final = ("role", "stage", "step", "rank", "world_size", "part", "host", "pid")


@attrs.frozen(kw_only=True)
class TraceLabel:
    """Who and what a trace records: everything its name and manifest record need."""

    role: str
    stage: str | None
    step: int | None
    rank: int
    world_size: int
    save_path: str
    host: str
    pid: int
    config_hash: str
    roles: tuple[str, ...] = ()
    part: int | None = None
    manifest: bool = True  # False for files that are moved (and recorded) elsewhere later
    export: ExportPolicy = ExportPolicy()
    parallel: Parallel = Parallel()  # the process's parallel coordinates (tp, pp, dp, cp, ep)
    capture: CaptureNote | None = None  # why the step was captured, when the plan did not name it

    @property
    def request(self) -> str | None:
        """The capture request this trace is for (its finish-hook round), or None: the plan's."""
        return None if self.capture is None else self.capture.request

    def fields(self, **more: object) -> dict[str, Any]:
        """The fields this label gives its :class:`~profdsl.records.manifest.TraceRecord` (``more``
        added or overriding): the known parallel coordinates as ``tp`` ... ``ep``, their sizes as
        ``parallel_sizes``, and why it was captured (``capture``) when a request asked."""
        fields = dict(
            self.who(),
            roles=list(self.roles or (self.role,)),
            config_hash=self.config_hash,
            parallel_sizes=self.parallel.sizes() or None,
            capture=self.capture,
            **self.parallel.coords(),
        )
        return fields | more

    def who(self) -> dict[str, Any]:
        """The fields its trace's name and record share: role, stage, step, rank, world size,
        part, host and pid."""
        return {key: getattr(self, key) for key in _WHO}

    def loss(self, status: str, why: str, **more: object) -> TraceRecord:
        """The record of a trace of this label that does not exist: ``failed`` (``why`` as its
        error) or ``incomplete`` / ``skipped`` (``why`` as its reason)."""
        failed = status == "failed"
        return TraceRecord(
            status=status, **self.fields(error=why if failed else None, reason=None if failed else why, **more)
        )


@attrs.frozen(kw_only=True)
class PendingTrace:
    """A trace not yet finished: its events are in ``events`` (plain JSON; by default a fresh
    hidden name in ``save_path``, nothing written yet), or, while ``write`` is set, still to be
    written there by ``write(events)`` (which returns the metadata)."""

    label: TraceLabel
    window: tuple[int, int] | None
    time_ms: int
    extra: Mapping[str, object] | None = None
    events: str = attrs.field()
    header: Mapping[str, object] | None = None
    write: Callable[[str], object] | None = attrs.field(default=None, eq=False, repr=False)
    #: Milliseconds the training thread was blocked handing it over (None: not measured).
    blocked_ms: float | None = None
    #: Milliseconds of that it waited for a free export slot (None: not measured).
    wait_ms: float | None = None
    #: What its capture knew of its completeness (None: no capture said; recorded ``ok``).
    expect: Expect | None = None
    #: ``measured(json_bytes)``: told the trace's size as plain JSON once it is recorded (the
    #: role's trace-size budget learns from it).
    measured: Callable[[int], object] | None = attrs.field(default=None, eq=False, repr=False)

    @events.default
    def _events_file(self) -> str:
        return os.path.join(self.label.save_path, f"{TEMP_PREFIX}{self.label.pid}-{uuid.uuid4().hex}.json")

    def fields(self, waited_s: float = 0.0) -> dict[str, Any]:
        """The trace's record fields, but its path, status and size; ``waited_s``: seconds the
        training thread waited for it since the hand-over, added to its ``blocked_ms`` and its
        ``wait_ms``."""
        waits: dict[str, float] = {}
        if self.blocked_ms is not None:
            waits.update(blocked_ms=ms_of(waited_s, self.blocked_ms))
        if self.wait_ms is not None:
            waits.update(wait_ms=ms_of(waited_s, self.wait_ms))
        return self.label.fields(window=self.window, time_ms=self.time_ms, **waits, **(self.extra or {}))

    def name(self) -> TraceName:
        """The trace's file name (before a ``part`` is bumped), with the parallel coordinates,
        unless they would make it too long (then they are in its metadata and record only)."""
        label = self.label
        fields: dict[str, Any] = dict(
            label.who(),
            window=self.window,
            time_ms=self.time_ms,
            ext=PLAIN_TRACE_EXT if label.export.level == 0 else TRACE_EXT,
        )
        coords: dict[str, Any] = dict(label.parallel.coords())
        if coords:
            with contextlib.suppress(ConfigError):  # only past the length limit (indices past MAX_INDEX)
                return TraceName(**fields, **coords)
        return TraceName(**fields)


#: ``commit(action)``: run ``action`` (a step that changes what save_path shows: a reservation,
#: a rename, a record) and return its result, or refuse (None): the trace was given up.
Commit = Callable[[Callable[[], T]], T | None]


def write_events(pending: PendingTrace) -> PendingTrace:
    """Have the session write the events of ``pending`` (its ``write``) to its events file.

    Raises:
        Exception: the write failed (``events`` and torch's temporary removed).
    """
    if pending.write is None:
        return pending
    try:
        os.makedirs(pending.label.save_path, exist_ok=True)
        header = pending.write(pending.events)
    except BaseException:
        _remove_quietly(pending.events, f"{pending.events}.tmp")  # and torch's own temporary, if cut short
        raise
    return attrs.evolve(pending, header=header if isinstance(header, Mapping) else None, write=None)


def events_owner(name: str) -> int | None:
    """The pid of the process whose trace export left the events file ``name`` (torch's plain
    JSON, written by :func:`write_events`), or None when ``name`` is no such file."""
    if not (name.startswith(TEMP_PREFIX) and name.endswith(".json")):
        return None
    pid, _, rest = name[len(TEMP_PREFIX) :].partition("-")
    return int(pid) if pid.isdigit() and rest else None


def finish(
    pending: PendingTrace,
    *,
    commit: Commit[Any] = direct,
    waited: Callable[[], float] = lambda: 0.0,
    settled: Callable[[], object] = lambda: None,
) -> str | None:
    """The second step: write the events if not yet written, splice, compress and check the
    trace, move it under its final name and record it; the trace's path, or None when it failed
    (recorded ``failed``) or ``commit`` refused it (nothing recorded: whoever refused records
    the loss; the events file stays for that record to name). ``waited()``: seconds the
    training thread has waited for this trace here, added to its ``blocked_ms``; ``settled()``
    is called once the events are on disk (what is left needs only the files). The record's
    ``export_cpu_ms`` is the CPU time of the thread that runs this (the writer's), up to the
    record.

    Raises:
        BaseException: an interrupt (not an ``Exception``), after recording the trace
            ``incomplete``.
    """
    label = pending.label
    packed = f"{pending.events}.gz"
    began = time.perf_counter()
    cpu_began = time.thread_time()  # this thread's own CPU: the writer's, never the caller's
    census = Census(device=pending.expect is not None and pending.expect.device is not None)

    def place() -> str:
        final = reserve(label.save_path, pending.name()).format()
        path = os.path.join(label.save_path, final)
        try:
            os.replace(packed, path)
            size = os.path.getsize(path)
        except BaseException:
            _remove_quietly(path)  # reserved but not filled: an empty file would pose as a trace
            raise
        if label.manifest:
            cpu_ms = round((time.thread_time() - cpu_began) * 1000, 3)  # within the wall time below
            export_ms = round((time.perf_counter() - began) * 1000, 3)
            fields = {**pending.fields(waited()), **_completeness(pending, census)}
            append_record(
                label.save_path,
                TraceRecord(path=final, bytes=size, export_ms=export_ms, export_cpu_ms=cpu_ms, **fields),
            )
        return path

    try:  # the events written, compressed and checked, then placed
        pending = write_events(pending)
        settled()
        compress_trace(pending.events, packed, pending.header, level=label.export.level, census=census)
        path: str | None = commit(place)  # place() reads pending as written
    except BaseException as exc:
        _remove_quietly(packed)
        _failed(pending, exc, commit)
        return None
    if path is None:  # refused: given up; the events stay, named by the loss record
        _remove_quietly(packed)
        return None
    _remove_quietly(pending.events)
    _measured(pending, census.json_bytes)
    return path


def _completeness(pending: PendingTrace, census: Census) -> dict[str, Any]:
    """The record fields that say whether a written trace holds what was asked (``status``,
    ``reason``) and its size as plain JSON; a lost window is said once (per save_path) in the
    log (a truncated one was said by the budget that cut it)."""
    status, reason = judge(pending.expect, census.seen())
    if status == "incomplete":  # a truncated one was said when it was cut
        label = pending.label
        once(
            f"partial:{label.save_path}",
            logging.WARNING,
            "[profdsl rank %s] the %s trace of step %s%s is recorded %s: %s",
            label.rank,
            label.role,
            label.step,
            f" (stage {label.stage!r})" if label.stage else "",
            status,
            reason,
        )
    return dict(status=status, reason=reason, json_bytes=census.json_bytes)


def _measured(pending: PendingTrace, json_bytes: int) -> None:
    """Tell the trace's size to whoever measures this role's traces (never raises)."""
    if pending.measured is not None:
        with failing_once("trace-size", "profdsl: recording a trace's size failed: %r"):
            pending.measured(json_bytes)


def _failed(pending: PendingTrace, exc: BaseException, commit: Commit[Any]) -> None:
    """Log once, remove the events file, record the loss (``incomplete``: interrupted, then
    re-raised)."""
    label = pending.label
    once(
        f"export:{label.save_path}",
        logging.ERROR,
        "[profdsl rank %s] could not write a %s trace into %s: %s",
        label.rank,
        label.role,
        label.save_path,
        exc,
    )
    interrupted = not isinstance(exc, Exception)

    def record() -> None:
        _remove_quietly(pending.events, f"{pending.events}.tmp")  # and torch's own temporary, if cut short
        if not label.manifest:
            return
        try:
            final: str | None = pending.name().format()
        except Exception:  # a label the name refuses: recorded without a path
            final = None
        why = f"interrupted ({type(exc).__name__}) while the trace was written" if interrupted else described(exc)
        status = "incomplete" if interrupted else "failed"
        append_record(label.save_path, label.loss(status, why, intended=final, **pending.fields()))

    commit(record)
    if interrupted:
        raise exc


def _remove_quietly(*paths: str) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)
