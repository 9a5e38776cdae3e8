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
names a trace holds are the session's own, :mod:`profdsl._runtime.slot.region_book`), so its
captures ask torch not to build Python event objects at stop (``trace_only``, torch >= 2.13;
torch turns it off itself with ``with_stack``), and bound any post-processing torch still does
by ``TorchOptions.export_timeout_s`` (``post_processing_timeout_s``).

Each trace is handed over with what the capture knows of its completeness
(:class:`~profdsl.core._completeness.Expect`): the device whose activity it should hold, and
whether torch stopped collecting it early (``ProfilerAction.DEVICE_STOPPED``).

A session's options become torch's arguments in :mod:`profdsl._capture.torch_args`; its traces
are handed over, window by window, by :mod:`profdsl._capture.torch_traces`.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any

from profdsl._capture.base import CaptureRefusedError, Describe, Runner, Sink
from profdsl._capture.runner import SessionThread
from profdsl._capture.torch_args import all_threads_possible, profile_args
from profdsl._capture.torch_traces import TorchTraces
from profdsl.config import Schedule, TorchOptions
from profdsl.core._log import failing_once, once
from profdsl.core._trace_size import SizeBook
from profdsl.core._units import MB

__all__ = ["CALL_TIMEOUT_S", "STOP_TIMEOUT_S", "TorchBackend", "TorchSession"]

#: How long a caller waits for a session to start or for a mini-batch step.
CALL_TIMEOUT_S = 120.0
#: How long ``stop`` waits for a session to stop and export (large traces take minutes).
STOP_TIMEOUT_S = 900.0

# torch warns about this once per process; profdsl writes one file per window on purpose.
warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)


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
        return all_threads_possible()

    def open(self, *, rank: int, **options: Any) -> TorchSession:
        """Start a capture on ``runner`` (:meth:`Backend.open <profdsl._capture.base.Backend.open>`).

        Raises:
            CaptureRefusedError: torch refused (logged once).
        """
        session = TorchSession(self.options, rank=rank, **options)
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
        self._options, self._runner = options, runner
        self._traces = TorchTraces(schedule, describe, sink)
        self._prof: Any = None
        self.collecting = True
        self._owner = threading.get_ident()  # inline sessions: torch calls only from this thread

    def start(self) -> None:
        """Start the profiler; on timeout, stop it whenever it does start."""
        self._traces.held.began()
        try:
            self._runner.call(self._start, timeout=CALL_TIMEOUT_S)
        except TimeoutError:  # on the session thread (an inline call never times out)
            assert isinstance(self._runner, SessionThread)
            self._runner.submit(self._stop)  # runs after the late _start: no orphan profiler
            raise
        finally:
            self._traces.held.ended(start=True)

    def owned_here(self) -> bool:
        """Whether the calling thread may drive the capture."""
        return isinstance(self._runner, SessionThread) or threading.get_ident() == self._owner

    def advance(self, index: int) -> None:
        """Scheduled (the only sessions advanced): mini-batch ``index`` ended."""
        self._on_runner(self._advance, CALL_TIMEOUT_S, "schedule step", index)

    def set_collecting(self, on: bool) -> None:
        """Pause or resume collection of ops, regions and device activity."""
        self._on_runner(self._toggle, CALL_TIMEOUT_S, "collection toggle", on)

    def stop(self) -> None:
        """Stop the profiler and write what it recorded."""
        self._on_runner(self._stop, STOP_TIMEOUT_S, "stop")

    # -- on the runner's thread --------------------------------------------------------------
    def _start(self) -> None:
        from torch.profiler import profile

        # Checked here, where the session runs, after any earlier session of ours has stopped.
        if _profiler_running():
            raise RuntimeError(
                "another torch profiler is already running in this process; "
                "profdsl will not start a second one (torch allows one at a time)"
            )
        self._traces.device, kwargs = profile_args(
            self._options,
            rank=self.rank,
            schedule=self.schedule,
            every_thread=self.every_thread,
            on_trace_ready=self._traces.ready,
        )
        prof = profile(**kwargs)
        prof.record_steps = False  # no ProfilerStep#n rows: profdsl names its own regions
        self._prof = prof  # before start: an interrupt inside it still leaves it reachable to stop
        try:
            prof.start()
        except BaseException:
            _stop_anyway(prof)
            raise

    def _advance(self, index: int) -> None:
        if self._prof is None:  # stopped meanwhile: nothing to advance
            return
        self._traces.stepping(self._prof, index)
        self._prof.step()

    def _toggle(self, on: bool) -> None:
        from torch.profiler import ProfilerActivity

        if self._prof is None or on == self.collecting:
            return
        self.collecting = on
        # All device kinds, CPU included: torch warns about a partial toggle with GPU activity on.
        self._prof.toggle_collection_dynamic(on, [ProfilerActivity.CPU, ProfilerActivity.CUDA, ProfilerActivity.XPU])

    def _stop(self) -> None:
        prof = self._prof
        if prof is None:
            return
        try:
            self._toggle(True)  # stopped inside a left-out mini-batch: stop with collection on
            self._prof = None
            self._traces.stopping()
            prof.stop()
        except BaseException:
            _stop_anyway(prof)  # an interrupt (not held here: another thread's) cut it short
            raise
        finally:
            self._prof = None
            # torch's profile object is a reference cycle, freed by the garbage collector at any
            # time, on any thread; freeing its kineto results then (while another session starts)
            # crashed the process. Drop them here, now, on the session's thread.
            prof.profiler = None

    def _on_runner(self, fn: Any, timeout: float, what: str, *args: Any) -> None:
        """Run a session call where the session lives (its time counts as the caller's, held up
        by profiling); a failure is logged once, never raised."""
        self._traces.held.began()
        try:
            with failing_once(
                f"torch-{what}", "[profdsl rank %s] torch profiler %s failed: %r", self.rank, what, by_kind=True
            ):
                self._runner.call(fn, *args, timeout=timeout)
        finally:
            self._traces.held.ended()


def _stop_anyway(prof: Any) -> None:
    """After an interrupt inside torch's start or stop: when torch's profiler still runs,
    stop it (its events are lost; a profiler left running blocks every later capture and
    crashes the process at exit)."""
    if not _profiler_running():
        return
    with failing_once("torch-stop-anyway", "profdsl: torch's profiler could not be stopped after an interrupt: %r"):
        prof.stop()


def _profiler_running() -> bool:
    """Whether a torch profiler runs in this process (at a capture's start: one profdsl did not
    start, and a second would crash the process)."""
    import torch.autograd.profiler as autograd_profiler

    return bool(getattr(autograd_profiler, "_is_profiler_enabled", False))
