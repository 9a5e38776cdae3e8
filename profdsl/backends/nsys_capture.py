"""The nsys capture: CUDA profiler start/stop around profiled steps (or stages), which Nsight
Systems turns into capture ranges (``--capture-range=cudaProfilerApi``).

The report files are written by nsys itself; moving them into ``save_path`` is the artifacts
module's job. Without CUDA this warns once and records nothing, while NVTX ranges still flow.
"""

from __future__ import annotations

import logging
import threading

from profdsl._log import once
from profdsl.backends.base import Session, TraceLabel
from profdsl.config import Schedule

__all__ = ["NsysCapture"]

_lock = threading.Lock()
_current: list[_NsysSession] = []


def _cuda_profiler(action: str, rank: int) -> None:
    try:
        import torch

        if not torch.cuda.is_available():
            once("nsys-no-cuda", logging.WARNING,
                 "[profdsl rank %s] tool='nsys' but CUDA is not available: no capture range is "
                 "started; NVTX ranges are still emitted", rank)
            return
        getattr(torch.cuda.profiler, action)()
    except Exception as exc:
        once(f"nsys-{action}", logging.ERROR,
             "[profdsl rank %s] cuda profiler %s failed: %s", rank, action, exc)


class _NsysSession:
    scheduled = False

    def __init__(self, label: TraceLabel) -> None:
        self.label = label
        self._participants = 1
        _cuda_profiler("start", label.rank)

    def join(self, role: str) -> None:
        self._participants += 1

    def mini_batch_done(self) -> None:
        return None

    def close(self) -> None:
        with _lock:
            self._participants -= 1
            if self._participants > 0:
                return
            if self in _current:
                _current.remove(self)
        _cuda_profiler("stop", self.label.rank)


class NsysCapture:
    """Opens nsys capture ranges; one per process at a time."""

    def current(self) -> Session | None:
        """The range open in this process, if any."""
        return _current[0] if _current else None

    def open(self, label: TraceLabel, schedule: Schedule | None, *, join: bool) -> Session | None:
        """Start a capture range, or join the open one when ``join``."""
        if schedule is not None:
            once("nsys-schedule", logging.INFO,
                 "profdsl: mini-batch schedules apply to tool='torch' only; nsys captures whole "
                 "stages or steps")
        with _lock:
            if _current:
                if join:
                    _current[0].join(label.role)
                    return _current[0]
                return None
            session = _NsysSession(label)
            _current.append(session)
            return session


def reset_for_tests() -> None:
    """Forget a range left open by a test."""
    with _lock:
        _current.clear()
