"""A torch capture's options as ``torch.profiler.profile``'s arguments (:func:`profile_args`):
the activities it records (CPU, and CUDA where asked for and present), what it records of them
(shapes, memory, stacks), its schedule, and what bounds its stop (``trace_only``,
``profile_all_threads``, ``post_processing_timeout_s``), only what this torch accepts.
"""

from __future__ import annotations

import functools
import inspect
import logging
import warnings
from collections.abc import Callable
from typing import Any

from profdsl.config import Schedule, TorchOptions
from profdsl.core._log import once

__all__ = ["all_threads_possible", "profile_args"]


def profile_args(
    options: TorchOptions,
    *,
    rank: int,
    schedule: Schedule | None,
    every_thread: bool,
    on_trace_ready: Callable[[Any], None],
) -> tuple[str | None, dict[str, Any]]:
    """The device whose activity a capture records (``"cuda"``, or None), and the keyword
    arguments of its ``torch.profiler.profile``."""
    import torch

    device = _device_recorded(options, rank)
    kwargs: dict[str, Any] = dict(
        activities=_activities(device),
        record_shapes="shapes" in options.contents,
        profile_memory="memory" in options.contents,
        with_stack="stack" in options.contents,
        on_trace_ready=on_trace_ready,
    )
    kwargs.update(_bounded_exit(options, every_thread=every_thread))
    if schedule is not None:
        s = schedule
        with warnings.catch_warnings():  # "won't be using warmup": warmup=0 is a choice
            warnings.simplefilter("ignore", UserWarning)
            kwargs["schedule"] = torch.profiler.schedule(
                skip_first=s.skip_first, wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat
            )
    return device, kwargs


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
    flags: dict[str, bool] = {}  # what is asked and this torch can do
    if every_thread and all_threads_possible():
        flags["profile_all_threads"] = True
    # torch turns trace_only off with with_stack (stacks need the event objects), and warns;
    # torch < 2.13 has no trace_only: its events are built at stop
    if "stack" not in options.contents and _config_takes("trace_only"):
        flags["trace_only"] = True
    experimental = _config(flags) if flags else None
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
def _config_takes(flag: str) -> bool:
    """Whether this torch's ``_ExperimentalConfig`` takes ``flag`` (``profile_all_threads``:
    torch >= 2.7; ``trace_only``: torch >= 2.13); asked once per flag."""
    return _config({flag: True}) is not None


def _config(flags: dict[str, bool]) -> Any:
    """torch's ``_ExperimentalConfig`` of ``flags``, or None where this torch takes no such flag."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        make: Any = _ExperimentalConfig  # keywords this torch's stubs may not list
        return make(**flags)
    except (ImportError, TypeError):
        return None


def all_threads_possible() -> bool:
    """Whether this torch can record every thread (``profile_all_threads``); said once when not."""
    if _config_takes("profile_all_threads"):
        return True
    once(
        "torch-all-threads",
        logging.WARNING,
        "profdsl: this torch cannot profile all threads; regions on threads other than the "
        "profiler's are not captured (upgrade to torch >= 2.7)",
    )
    return False
