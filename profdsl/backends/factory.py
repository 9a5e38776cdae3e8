"""Choosing a profiler's capture and annotators, once, from its config."""

from __future__ import annotations

import logging
from typing import Any

from profdsl._log import once
from profdsl.backends.base import NULL_CAPTURE, Capture
from profdsl.config import ProfilerConfig

__all__ = ["make_annotators", "make_capture"]


def make_capture(config: ProfilerConfig) -> Capture:
    """The capture for ``config.tool``; the null capture when torch cannot be imported."""
    if config.tool == "nsys":
        from profdsl.backends.nsys_capture import NsysCapture

        return NsysCapture()
    try:
        import torch  # noqa: F401  (fail here, once, rather than at every stage)
    except ImportError:
        once("torch-missing", logging.ERROR,
             "profdsl: tool='torch' but torch is not installed; nothing will be captured")
        return NULL_CAPTURE
    from profdsl.backends.torch_capture import TorchCapture

    return TorchCapture(config.torch)


def make_annotators(config: ProfilerConfig, role: str) -> Any:
    """The annotator for a profiled role: record_function, NVTX, both, or None."""
    from profdsl.backends.annotators import MultiAnnotator, TorchAnnotator, nvtx_or_none

    parts: list[Any] = []
    if config.tool == "torch":
        try:
            parts.append(TorchAnnotator())
        except ImportError:
            pass  # make_capture logged it
    if config.nvtx or config.tool == "nsys":
        nvtx = nvtx_or_none(role)
        if nvtx is not None:
            parts.append(nvtx)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else MultiAnnotator(tuple(parts))
