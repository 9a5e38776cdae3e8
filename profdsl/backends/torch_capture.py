"""The torch.profiler capture: one session per process, driven from one dedicated thread.

Facts this is built around (torch 2.13, see docs/concepts.md): only one profiler session may run
in a process; it must start and stop on one thread; regions on other threads are captured only
with ``profile_all_threads``; and with a schedule the trace-ready handler also fires for windows
that recorded nothing, which are dropped here instead of being exported (verl's bugs B1, B2).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import warnings
from typing import Any

from profdsl import _regions as regions
from profdsl._export import export_trace
from profdsl._log import once
from profdsl._runner import Inline, ProfilerThread
from profdsl.backends.base import Session, TraceLabel
from profdsl.config import Schedule, TorchOptions
from profdsl.schedule import action_at

__all__ = ["STOP_TIMEOUT_S", "TorchCapture", "reset_for_tests"]

#: How long a caller waits for a session to start or for a mini-batch step.
CALL_TIMEOUT_S = 120.0
#: How long ``close`` waits for a session to stop and export (large traces take minutes).
STOP_TIMEOUT_S = 900.0


class _Process:
    """The process-wide part: the profiler thread and the one open session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: _TorchSession | None = None
        self._thread: ProfilerThread | None = None

    def runner(self, all_threads: bool) -> ProfilerThread | Inline:
        """Where a session's torch calls run: the shared profiler thread for ``all_threads``
        sessions (torch >= 2.7), else the calling thread."""
        if not all_threads or _all_threads_config() is None:
            return Inline()
        if self._thread is None:
            self._thread = ProfilerThread()
        return self._thread


_PROCESS = _Process()

# torch warns about this once per process; profdsl writes one file per window on purpose.
warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)


def forget_after_fork() -> None:
    """In a forked child: no session, no profiler thread (it was not forked)."""
    global _PROCESS
    _PROCESS = _Process()


def reset_for_tests() -> None:
    """Stop a session left open by a test (forget it if it belongs to another thread)."""
    session = _PROCESS.current
    if session is not None:
        session.force_close()
        _PROCESS.current = None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TorchCapture:
    """Opens torch.profiler sessions with one role's options."""

    def __init__(self, options: TorchOptions) -> None:
        self.options = options

    def current(self) -> Session | None:
        """The session open in this process, if any."""
        return _PROCESS.current

    def open(self, label: TraceLabel, schedule: Schedule | None, *, join: bool) -> Session | None:
        """Start a session; join the open one if ``join``, else return None when one is open."""
        with _PROCESS.lock:
            current = _PROCESS.current
            if current is not None:
                if not join:
                    return None
                current.join(label.role)
            else:
                runner = _PROCESS.runner(self.options.all_threads)
                session = _TorchSession(label, schedule, self.options, runner)
                _PROCESS.current = session
        if current is not None:  # outside the lock: the profiler thread may be busy exporting
            current.refresh_metadata()
            return current
        try:
            session.start()
        except Exception as exc:
            with _PROCESS.lock:
                if _PROCESS.current is session:
                    _PROCESS.current = None
            once(f"torch-start:{type(exc).__name__}", logging.ERROR,
                 "[profdsl rank %s] could not start the torch profiler: %r", label.rank, exc)
            return None
        return session


class _TorchSession:
    """One torch.profiler session; every torch call runs on the profiler thread."""

    def __init__(self, label: TraceLabel, schedule: Schedule | None, options: TorchOptions,
                 thread: ProfilerThread | Inline) -> None:
        self.label = label
        self.schedule = schedule
        self._options = options
        self._thread = thread
        self._roles = [label.role]
        self._participants = 1
        self._index = 0  # mini-batches done in this session
        self._pending: list[int] = []  # recorded mini-batches of the window being written
        self._window_ms = _now_ms()
        self._prof: Any = None
        self._owner = threading.get_ident()  # inline sessions: torch calls only from this thread

    def start(self) -> None:
        """Start the profiler on the profiler thread; on timeout, stop it whenever it starts."""
        try:
            self._thread.call(self._start, timeout=CALL_TIMEOUT_S)
        except TimeoutError:
            self._thread.submit(self._abandon)  # runs after the late _start: no orphan profiler
            raise

    def _abandon(self) -> None:
        """Stop a profiler whose start came too late for its caller."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()
            prof.profiler = None

    @property
    def scheduled(self) -> bool:
        return self.schedule is not None

    def join(self, role: str) -> None:
        """Count another participant (called under the process lock)."""
        self._participants += 1
        if role not in self._roles:
            self._roles.append(role)

    def refresh_metadata(self) -> None:
        """Rewrite the metadata with the roles that joined (scheduled windows do it per mini-batch)."""
        if self.schedule is None:
            self._on_thread(self._add_metadata_now, CALL_TIMEOUT_S, "metadata update")

    def _add_metadata_now(self) -> None:
        if self._prof is not None:
            self._add_metadata(self._prof, None)

    # -- on the profiler thread --------------------------------------------------------------
    def _start(self) -> Any:
        import torch
        from torch.profiler import ProfilerActivity, profile

        # Checked here, on the profiler thread, after any earlier session of ours has stopped.
        if _foreign_profiler_running():
            raise RuntimeError("another torch profiler is already running in this process; "
                               "profdsl will not start a second one (torch allows one at a time)")

        options = self._options
        activities = [ProfilerActivity.CPU]
        if options.cuda and torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        kwargs: dict[str, Any] = dict(
            activities=activities,
            record_shapes="shapes" in options.contents,
            profile_memory="memory" in options.contents,
            with_stack="stack" in options.contents,
            on_trace_ready=self._on_trace_ready,
        )
        all_threads = _all_threads_config()
        if all_threads is not None:
            kwargs["experimental_config"] = all_threads
        if self.schedule is not None:
            s = self.schedule
            with warnings.catch_warnings():  # "won't be using warmup": warmup=0 is a choice
                warnings.simplefilter("ignore", UserWarning)
                kwargs["schedule"] = torch.profiler.schedule(
                    skip_first=s.skip_first, wait=s.wait, warmup=s.warmup, active=s.active,
                    repeat=s.repeat)
        prof = profile(**kwargs)
        prof.record_steps = False  # no ProfilerStep#n rows: profdsl names its own regions
        prof.start()
        if self.schedule is None:
            self._add_metadata(prof, None)
        self._prof = prof
        return prof

    def _add_metadata(self, prof: Any, window: tuple[int, int] | None) -> None:
        label = self.label
        meta = {
            "role": label.role, "roles": self._roles, "stage": label.stage, "step": label.step,
            "rank": label.rank, "world_size": label.world_size,
            "window": list(window) if window else None, "config_hash": label.config_hash,
            "host": label.host, "pid": label.pid, "regions": regions.as_metadata(),
        }
        prof.add_metadata_json("profdsl", json.dumps(meta))
        if not _distributed_initialized():  # torch adds its own distributedInfo otherwise
            prof.add_metadata_json("distributedInfo", json.dumps(
                {"rank": label.rank, "world_size": label.world_size, "backend": None}))

    def _advance(self) -> None:
        if self.schedule is None or self._prof is None:  # stopped meanwhile: nothing to advance
            return
        i = self._index
        if action_at(self.schedule, i).records:
            if not self._pending:
                self._window_ms = _now_ms()
            self._pending.append(i)
            self._add_metadata(self._prof, (self._pending[0], i))
        self._index += 1
        self._prof.step()

    def _on_trace_ready(self, prof: Any) -> None:
        pending, self._pending = self._pending, []
        if self.schedule is not None and not pending:
            return  # a window that recorded no mini-batch: torch fires anyway, nothing to write
        window = (pending[0], pending[-1]) if pending else None
        export_trace(prof.export_chrome_trace, self.label, window=window, time_ms=self._window_ms,
                     extra={"roles": list(self._roles)})

    def _stop(self) -> None:
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        try:
            if self.schedule is None:  # now the regions this session saw are known
                self._add_metadata(prof, None)
            prof.stop()
        finally:
            # torch's profile object is a reference cycle, freed by the garbage collector at any
            # time, on any thread; freeing its kineto results then (while another session starts)
            # crashed the process. Drop them here, now, on the profiler thread.
            prof.profiler = None

    # -- from any thread ---------------------------------------------------------------------
    def _foreign_thread(self, what: str) -> bool:
        """An inline session touched from a thread that did not start it (torch would crash)."""
        if isinstance(self._thread, ProfilerThread) or threading.get_ident() == self._owner:
            return False
        once(f"torch-thread:{what}", logging.ERROR,
             "[profdsl rank %s] the torch profiler session was started on another thread; %s from "
             "this thread is skipped (torch crashes otherwise). Call start/stop and run mini-batches "
             "on one thread, or set TorchOptions(all_threads=True)", self.label.rank, what)
        return True

    def mini_batch_done(self) -> None:
        if self.schedule is None or self._foreign_thread("a schedule step"):
            return
        self._on_thread(self._advance, CALL_TIMEOUT_S, "step")

    def close(self) -> None:
        if self._foreign_thread("stopping it"):
            return  # left running (and still current): no second session can start beside it
        with _PROCESS.lock:
            self._participants -= 1
            if self._participants > 0:
                return
            if _PROCESS.current is self:
                _PROCESS.current = None
        self._on_thread(self._stop, STOP_TIMEOUT_S, "stop")

    def _on_thread(self, fn: Any, timeout: float, what: str) -> None:
        """Run a session call where the session lives; a failure is logged once, never raised."""
        try:
            self._thread.call(fn, timeout=timeout)
        except Exception as exc:
            once(f"torch-{what}:{type(exc).__name__}", logging.ERROR,
                 "[profdsl rank %s] torch profiler %s failed: %r", self.label.rank, what, exc)

    def force_close(self) -> None:
        self._participants = 1
        self.close()


def _all_threads_config() -> Any:
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):  # torch < 2.7: only the starting thread is captured
        once("torch-all-threads", logging.WARNING,
             "profdsl: this torch cannot profile all threads; regions on threads other than the "
             "profiler's are not captured (upgrade to torch >= 2.7)")
        return None


def _foreign_profiler_running() -> bool:
    """Whether a torch profiler that profdsl did not start is running (a second would crash)."""
    import torch.autograd.profiler as autograd_profiler

    return bool(getattr(autograd_profiler, "_is_profiler_enabled", False))


def _distributed_initialized() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())
