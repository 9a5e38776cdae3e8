"""The torch.profiler backend: one ``torch.profiler.profile`` per capture.

Facts this is built around (torch 2.13, see docs/concepts.md): a capture is started and stopped
on one thread; regions on other threads are captured only with ``profile_all_threads`` (a
capture of *every thread*, run on the session thread); with a schedule the trace-ready handler
also fires for windows that recorded nothing, which are dropped here instead of being written
(verl's bugs B1, B2); an own-thread capture can pause and resume collection
(``toggle_collection_dynamic``), which is how mini-batches a continuous step's schedule leaves
out stay out of its trace (under ``profile_all_threads`` torch's toggle fails its own internal
assert: such captures are not pausable). torch's export escapes no string it writes
(``add_metadata_json`` even rewrites ``\\`` to ``/``), so profdsl's metadata is not handed to
torch: it is computed when a trace is ready and added to the file by the collecting layer.

Once torch has stopped recording a trace (``prof.stop()``, or a window's end), its results are
handed over whole: the runtime's writer has torch write them as JSON (``export_chrome_trace``)
and drops them, on its own thread, off the training thread (measured in docs/performance.md).
profdsl reads nothing else of torch's results (no ``events()``, no ``key_averages``: the region
names a trace holds are the session's own, :mod:`profdsl.runtime.slot.region_book`), so its
captures ask torch not to build Python event objects at stop (``trace_only``, torch >= 2.13;
torch turns it off itself with ``with_stack``), and bound any post-processing torch still does
by ``TorchOptions.export_timeout_s`` (``post_processing_timeout_s``).

Each trace is handed over with what the capture knows of its completeness
(:class:`~profdsl.core.completeness.Expect`): the device whose activity it should hold, and
whether torch stopped collecting it early (``ProfilerAction.DEVICE_STOPPED``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from profdsl.capture.base import CaptureRefusedError, Describe, Held, Runner, Sink
from profdsl.capture.runner import SessionThread
from profdsl.config import Schedule, TorchOptions
from profdsl.core.completeness import Expect
from profdsl.core.labels import encode
from profdsl.core.log import once
from profdsl.core.schedule import action_at, cycle_of
from profdsl.core.trace_size import MB, SizeBook
from profdsl.records.meta import trace_header

__all__ = ["CALL_TIMEOUT_S", "STOP_TIMEOUT_S", "TorchBackend", "TorchSession"]

#: How long a caller waits for a session to start or for a mini-batch step.
CALL_TIMEOUT_S = 120.0
#: How long ``stop`` waits for a session to stop and export (large traces take minutes).
STOP_TIMEOUT_S = 900.0

# torch warns about this once per process; profdsl writes one file per window on purpose.
warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)


def now_ms() -> int:
    """Wall-clock milliseconds: a trace's time in its name."""
    return time.time_ns() // 1_000_000


class TorchBackend:
    """Opens torch.profiler captures with one role's options."""

    tool = "torch"

    def __init__(self, options: TorchOptions) -> None:
        self.options = options
        self.all_threads = options.all_threads
        self.sizes: SizeBook | None = SizeBook()  # this role's traces, as measured
        limit = options.max_trace_mb
        self.max_trace_bytes = None if limit is None else round(limit * MB)

    @property
    def every_thread_possible(self) -> bool:
        """Whether this torch can record every thread (``profile_all_threads``, torch >= 2.7)."""
        return _all_threads_config() is not None

    def open(
        self,
        *,
        rank: int,
        schedule: Schedule | None,
        describe: Describe,
        sink: Sink,
        runner: Runner,
        every_thread: bool = False,
    ) -> TorchSession:
        """Start a capture on ``runner``.

        Raises:
            CaptureRefusedError: torch refused (logged once).
        """
        session = TorchSession(
            self.options,
            rank=rank,
            schedule=schedule,
            describe=describe,
            sink=sink,
            runner=runner,
            every_thread=every_thread,
        )
        try:
            session.start()
        except Exception as exc:
            once(
                f"torch-start:{type(exc).__name__}",
                logging.ERROR,
                "[profdsl rank %s] could not start the torch profiler: %r",
                rank,
                exc,
            )
            raise CaptureRefusedError(f"the torch profiler could not start: {exc}") from exc
        return session


class TorchSession:
    """One torch.profiler capture; every torch call runs on its runner's thread."""

    def __init__(
        self,
        options: TorchOptions,
        *,
        rank: int,
        schedule: Schedule | None,
        describe: Describe,
        sink: Sink,
        runner: Runner,
        every_thread: bool = False,
    ) -> None:
        self.rank, self.schedule = rank, schedule
        self.every_thread = every_thread
        self.pausable = not every_thread
        self._options, self._describe, self._sink, self._runner = options, describe, sink, runner
        self._pending: list[int] = []  # recorded mini-batches of the window being written
        self._blocked_s = 0.0  # the caller's time held up by this session since the last trace
        self._start_s: float | None = None  # its start's part of that, until its first trace
        self._call_began = time.perf_counter()
        self._window_ms = now_ms()
        self._prof: Any = None
        self._collecting = True
        self._owner = threading.get_ident()  # inline sessions: torch calls only from this thread
        self._device: str | None = None  # the device whose activity is recorded ("cuda"), if any
        self._stopped_early: str | None = None  # why torch's device collection stopped early
        self._stepped = -1  # a scheduled capture: the mini-batch its schedule last stepped past

    def start(self) -> None:
        """Start the profiler; on timeout, stop it whenever it does start."""
        self._call_began = time.perf_counter()
        try:
            self._runner.call(self._start, timeout=CALL_TIMEOUT_S)
        except TimeoutError:
            self._runner.submit(self._abandon)  # runs after the late _start: no orphan profiler
            raise
        finally:
            self._start_s = time.perf_counter() - self._call_began
            self._blocked_s += self._start_s

    def owned_here(self) -> bool:
        """Whether the calling thread may drive the capture."""
        return isinstance(self._runner, SessionThread) or threading.get_ident() == self._owner

    def advance(self, index: int) -> None:
        """Scheduled: mini-batch ``index`` ended."""
        if self.schedule is not None:
            self._on_runner(self._advance, CALL_TIMEOUT_S, "schedule step", index)

    def set_collecting(self, on: bool) -> None:
        """Pause or resume collection of ops, regions and device activity."""
        self._on_runner(self._toggle, CALL_TIMEOUT_S, "collection toggle", on)

    def stop(self) -> None:
        """Stop the profiler and write what it recorded."""
        self._on_runner(self._stop, STOP_TIMEOUT_S, "stop")

    # -- on the runner's thread --------------------------------------------------------------
    def _start(self) -> None:
        import torch
        from torch.profiler import profile

        # Checked here, where the session runs, after any earlier session of ours has stopped.
        if _profiler_running():
            raise RuntimeError(
                "another torch profiler is already running in this process; "
                "profdsl will not start a second one (torch allows one at a time)"
            )
        options = self._options
        self._device = _device_recorded(options, self.rank)
        kwargs: dict[str, Any] = dict(
            activities=_activities(self._device),
            record_shapes="shapes" in options.contents,
            profile_memory="memory" in options.contents,
            with_stack="stack" in options.contents,
            on_trace_ready=self._on_trace_ready,
        )
        kwargs.update(_bounded_exit(options, every_thread=self.every_thread))
        if self.schedule is not None:
            s = self.schedule
            with warnings.catch_warnings():  # "won't be using warmup": warmup=0 is a choice
                warnings.simplefilter("ignore", UserWarning)
                kwargs["schedule"] = torch.profiler.schedule(
                    skip_first=s.skip_first, wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat
                )
        prof = profile(**kwargs)
        prof.record_steps = False  # no ProfilerStep#n rows: profdsl names its own regions
        self._prof = prof  # before start: an interrupt inside it still leaves it reachable to stop
        try:
            prof.start()
        except BaseException:
            self._stop_anyway(prof)
            raise

    def _abandon(self) -> None:
        """Stop a profiler whose start came too late for its caller."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()
            prof.profiler = None

    def _header(self, window: tuple[int, int] | None) -> dict[str, Any]:
        """The metadata of the trace of ``window`` (None: the whole session), as it is now."""
        # torch adds its own distributedInfo when a process group is up
        return trace_header(self._describe(window), distributed=not _distributed_initialized())

    def _advance(self, index: int) -> None:
        if self.schedule is None or self._prof is None:  # stopped meanwhile: nothing to advance
            return
        # A mini-batch that ran while torch's device collection was stopped is in no trace:
        # torch recorded nothing of it (its cycle's trace was handed over when it stopped).
        self._stepped = index
        if action_at(self.schedule, index).records and not _device_stopped(self._prof):
            if not self._pending:
                self._window_ms = now_ms()
            self._pending.append(index)
        self._prof.step()

    def _toggle(self, on: bool) -> None:
        from torch.profiler import ProfilerActivity

        if self._prof is None or on == self._collecting:
            return
        self._collecting = on
        # All device kinds, CPU included: torch warns about a partial toggle with GPU activity on.
        self._prof.toggle_collection_dynamic(on, [ProfilerActivity.CPU, ProfilerActivity.CUDA, ProfilerActivity.XPU])

    def _on_trace_ready(self, prof: Any) -> None:
        pending, self._pending = self._pending, []
        window = (pending[0], pending[-1]) if pending else None
        if self.schedule is not None and not pending:
            window = _stopped_window(self.schedule, self._stepped, prof)
            if window is None:
                return  # a window that recorded no mini-batch: torch fires anyway, nothing to write
            self._window_ms = now_ms()  # torch lost the window it was about to record: say so
        # The window's results, held whole (torch starts the next window with a new object):
        # their JSON is written, and they are dropped, wherever the sink has ``write`` called.
        results = prof.profiler
        write = functools.partial(_write_events, results.export_chrome_trace, self._header(window))
        # the caller's time held up so far for this trace: earlier calls, and this one until now
        ending = time.perf_counter() - self._call_began
        held = Held(self._blocked_s + ending, self._start_s, ending)
        self._blocked_s, self._start_s = 0.0, None
        self._sink(write, window, self._window_ms, held, self._expect(prof, window))
        self._call_began = time.perf_counter()  # the rest of this call counts for the next trace

    def _expect(self, prof: Any, window: tuple[int, int] | None) -> Expect:
        """What the trace torch just handed over should hold: the device activity recorded, and
        whether torch stopped collecting it before the window's end (its ``DEVICE_STOPPED``
        state, or, without a schedule, kineto's stopped flag read before the stop)."""
        stopped = self._stopped_early
        if _device_stopped(prof):
            where = f" during mini-batches {window[0]}-{window[1]}" if window else ""
            stopped = (
                f"torch's schedule entered DEVICE_STOPPED{where} (kineto stopped the device collection, "
                "e.g. a CUPTI buffer overflow); the rest of the window was not recorded"
            )
        return Expect(device=self._device, stopped=stopped)

    def _stop(self) -> None:
        prof = self._prof
        if prof is None:
            return
        try:
            self._toggle(True)  # stopped inside a left-out mini-batch: stop with collection on
            self._prof = None
            self._stopped_early = _kineto_stopped(self._device)
            prof.stop()
        except BaseException:
            self._stop_anyway(prof)  # an interrupt (not held here: another thread's) cut it short
            raise
        finally:
            self._prof = None
            # torch's profile object is a reference cycle, freed by the garbage collector at any
            # time, on any thread; freeing its kineto results then (while another session starts)
            # crashed the process. Drop them here, now, on the session's thread.
            prof.profiler = None

    @staticmethod
    def _stop_anyway(prof: Any) -> None:
        """After an interrupt inside torch's start or stop: when torch's profiler still runs,
        stop it (its events are lost; a profiler left running blocks every later capture and
        crashes the process at exit)."""
        if not _profiler_running():
            return
        try:
            prof.stop()
        except Exception as exc:
            once(
                "torch-stop-anyway",
                logging.ERROR,
                "profdsl: torch's profiler could not be stopped after an interrupt: %r",
                exc,
            )

    def _on_runner(self, fn: Any, timeout: float, what: str, *args: Any) -> None:
        """Run a session call where the session lives (its time counts as the caller's, held up
        by profiling); a failure is logged once, never raised."""
        self._call_began = time.perf_counter()
        try:
            self._runner.call(fn, *args, timeout=timeout)
        except Exception as exc:
            once(
                f"torch-{what}:{type(exc).__name__}",
                logging.ERROR,
                "[profdsl rank %s] torch profiler %s failed: %r",
                self.rank,
                what,
                exc,
            )
        finally:
            self._blocked_s += time.perf_counter() - self._call_began


def _write_events(export: Callable[[str], object], header: dict[str, Any], path: str) -> dict[str, Any]:
    """torch's export of the events to ``path`` (plain JSON); returns the metadata to add.

    Raises:
        OSError: torch wrote no file (it logs a failed write instead of raising).
    """
    with _plain_path(path) as target:
        export(target)
    if not os.path.exists(path):
        # torch writes PATH.tmp, then renames it. On a failed write it keeps PATH.tmp open (and
        # never closes it): emptied first, the file gives its space back once removed.
        with suppress(OSError):
            os.truncate(f"{path}.tmp", 0)
        with suppress(OSError):
            os.remove(f"{path}.tmp")
        raise OSError(f"torch wrote no trace file {path!r} (see its log)")
    return header


@contextmanager
def _plain_path(path: str) -> Iterator[str]:
    """A name of ``path`` that torch can write: torch copies it unescaped into the trace
    (``traceName``) and rewrites ``\\`` in it when it renames; where the folder's name holds
    such characters, the file is named through an open descriptor of the folder (Linux)."""
    folder, base = os.path.split(path)
    if encode(path) == path or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    fd = os.open(folder or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        yield f"/proc/self/fd/{fd}/{base}"
    finally:
        os.close(fd)


def _device_recorded(options: TorchOptions, rank: int) -> str | None:
    """The device whose activity a capture records (``"cuda"``), or None. Asked for but absent
    from this machine: said once, at INFO (a CPU run is not a fault), and its traces are ``ok``
    without it."""
    import torch

    if not options.cuda:
        return None
    if torch.cuda.is_available():
        return "cuda"
    once(
        "torch-no-cuda",
        logging.INFO,
        "[profdsl rank %s] CUDA activity is asked for (TorchOptions.contents empty or naming 'cuda'), "
        "but this machine has no CUDA device: traces record CPU activity only",
        rank,
    )
    return None


def _activities(device: str | None) -> list[Any]:
    """torch's activities of a capture: CPU (profdsl's regions are CPU events), and CUDA when
    its activity is recorded."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])


def _bounded_exit(options: TorchOptions, *, every_thread: bool) -> dict[str, Any]:
    """The ``torch.profiler.profile`` arguments that bound a capture's stop: ``trace_only``
    (no Python event objects built at stop; profdsl only exports) combined with
    ``profile_all_threads`` in one experimental config, and ``post_processing_timeout_s`` tied
    to ``export_timeout_s``. Only what this torch accepts."""
    from torch.profiler import profile

    kwargs: dict[str, Any] = {}
    # torch turns trace_only off with with_stack (stacks need the event objects), and warns
    experimental = _experimental_config(every_thread=every_thread, trace_only="stack" not in options.contents)
    if experimental is not None:
        kwargs["experimental_config"] = experimental
    if _takes_post_processing_timeout(profile):
        kwargs["post_processing_timeout_s"] = float(options.export_timeout_s)
    return kwargs


@functools.cache
def _takes_post_processing_timeout(profile: Any) -> bool:
    """Whether this torch's ``profile`` bounds its post-processing (torch >= 2.13); asked once
    (a capture's start is on the training thread's clock)."""
    return "post_processing_timeout_s" in inspect.signature(profile.__init__).parameters


@functools.cache
def _trace_only_possible() -> bool:
    """Whether this torch's ``_ExperimentalConfig`` takes ``trace_only`` (torch >= 2.13); asked
    once."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        _ExperimentalConfig(trace_only=True)
    except (ImportError, TypeError):  # torch < 2.13: events are built at stop
        return False
    return True


def _experimental_config(*, every_thread: bool, trace_only: bool) -> Any:
    """One ``_ExperimentalConfig`` holding what is asked and this torch can do (every thread:
    torch >= 2.7; ``trace_only``: torch >= 2.13), or None when nothing is."""
    flags: dict[str, bool] = {}
    if every_thread and _all_threads_config() is not None:
        flags["profile_all_threads"] = True
    if trace_only and _trace_only_possible():
        flags["trace_only"] = True
    if not flags:
        return None
    from torch._C._profiler import _ExperimentalConfig

    make: Any = _ExperimentalConfig  # keywords this torch's stubs may not list
    return make(**flags)


def _device_stopped(prof: Any) -> bool:
    """Whether torch's scheduled profiler is in its ``DEVICE_STOPPED`` state (torch >= 2.13).

    torch 2.13's ``torch/profiler/profiler.py``: ``ProfilerAction.DEVICE_STOPPED = 4`` (line 658)
    is set by ``profile.step()`` (lines 1207-1225) when ``torch.autograd._is_kineto_stopped()``,
    a device activity is recorded (``use_device``) and the previous action was WARMUP or RECORD;
    its entry transitions (lines 1067-1075) call ``stop_trace`` and then ``_trace_ready``, so
    ``on_trace_ready`` runs with ``current_action`` already ``DEVICE_STOPPED``, and the trace it
    is handed holds the window only up to the stop (nothing from a WARMUP entry). The state
    absorbs the rest of the cycle without another callback (lines 1076-1091)."""
    action = getattr(getattr(prof, "current_action", None), "name", None)
    return action == "DEVICE_STOPPED"


def _stopped_window(schedule: Schedule, index: int, prof: Any) -> tuple[int, int] | None:
    """The window torch lost whole: its schedule entered ``DEVICE_STOPPED`` from WARMUP when it
    stepped past mini-batch ``index`` (torch 2.13, ``torch/profiler/profiler.py`` lines
    1055-1071: the callback fires then, "the trace will be empty (no recording ran)"), so the
    active mini-batches of the cycle ahead are recorded by nobody. None otherwise."""
    if not _device_stopped(prof):
        return None
    cycle = cycle_of(schedule, index + 1)
    if cycle is None:
        return None
    first = schedule.skip_first + cycle * schedule.cycle_len + schedule.wait + schedule.warmup
    return first, first + schedule.active - 1


def _kineto_stopped(device: str | None) -> str | None:
    """Before an unscheduled capture stops: why its device collection had already stopped
    (kineto's stopped flag, torch's own test in ``profile.step()``), or None. Read only where a
    device activity is recorded: torch's flag may be stale from another profiler otherwise."""
    if device is None:
        return None
    try:
        from torch.autograd import _is_kineto_stopped  # type: ignore[attr-defined]

        stopped = bool(_is_kineto_stopped())
    except Exception:  # torch < 2.13: no such flag
        return None
    if not stopped:
        return None
    return "kineto's device collection had stopped before the capture ended (e.g. a CUPTI buffer overflow)"


def _all_threads_config() -> Any:
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):  # torch < 2.7: only the starting thread is captured
        once(
            "torch-all-threads",
            logging.WARNING,
            "profdsl: this torch cannot profile all threads; regions on threads other than the "
            "profiler's are not captured (upgrade to torch >= 2.7)",
        )
        return None


def _profiler_running() -> bool:
    """Whether a torch profiler runs in this process (at a capture's start: one profdsl did not
    start, and a second would crash the process)."""
    import torch.autograd.profiler as autograd_profiler

    return bool(getattr(autograd_profiler, "_is_profiler_enabled", False))


def _distributed_initialized() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())
