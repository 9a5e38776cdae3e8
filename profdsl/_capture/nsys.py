"""The nsys backend: CUDA profiler start/stop around profiled steps (or stages), which Nsight
Systems turns into capture ranges (``--capture-range=cudaProfilerApi``).

The report files are written by nsys itself; moving them into ``save_path`` is the collecting
layer's job. Without CUDA this warns once and records nothing, while NVTX ranges still flow.
"""

from __future__ import annotations

import logging
from typing import Any

from profdsl.config import Schedule
from profdsl.core._log import failing_once, once
from profdsl.core._trace_size import SizeBook

__all__ = ["NsysBackend", "NsysSession"]


def _cuda_profiler(action: str, rank: int) -> None:
    with failing_once(f"nsys-{action}", "[profdsl rank %s] cuda profiler %s failed: %s", rank, action):
        import torch

        if not torch.cuda.is_available():
            once(
                "nsys-no-cuda",
                logging.WARNING,
                "[profdsl rank %s] tool='nsys' but CUDA is not available: no capture range is "
                "started; NVTX ranges are still emitted",
                rank,
            )
            return
        getattr(torch.cuda.profiler, action)()


class NsysSession:
    """One capture range; nsys writes its report, nothing goes to the sink. A range covers the
    whole process (every thread), and any thread may end it."""

    every_thread = True
    pausable = False  # a capture range cannot be paused: every mini-batch is in it
    collecting = True

    def __init__(self, rank: int) -> None:
        self.rank = rank
        _cuda_profiler("start", rank)

    def owned_here(self) -> bool:
        """The CUDA profiler API may be called from any thread."""
        return True

    def advance(self, index: int) -> None:
        """Capture ranges have no schedule."""

    def set_collecting(self, on: bool) -> None:
        """Capture ranges cannot be paused."""

    def stop(self) -> None:
        """End the capture range."""
        _cuda_profiler("stop", self.rank)


class NsysBackend:
    """Opens nsys capture ranges."""

    tool = "nsys"
    all_threads = False
    sizes: SizeBook | None = None  # nsys writes its own reports: no trace of profdsl's to bound
    max_trace_bytes: int | None = None
    every_thread_possible = False  # a range covers every thread already: none is asked for

    def open(self, *, rank: int, schedule: Schedule | None, **unused: Any) -> NsysSession:
        """Start a capture range (schedules apply to the torch tool only)."""
        if schedule is not None:
            once(
                "nsys-schedule",
                logging.INFO,
                "profdsl: mini-batch schedules apply to tool='torch' only; nsys captures whole stages or steps",
            )
        return NsysSession(rank)
