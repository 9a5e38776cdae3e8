"""Choosing a profiler's backend and annotator, once, from its config."""

from __future__ import annotations

import logging
from typing import Protocol

from profdsl._capture.annotators import Annotator, MultiAnnotator, TorchAnnotator, nvtx_or_none
from profdsl._capture.base import Backend
from profdsl._capture.torch_session import TorchBackend  # (no torch at its import: torch is imported by a capture)
from profdsl.config import TorchOptions
from profdsl.core._log import once

__all__ = ["CaptureOptions", "make_annotator", "make_backend"]


class CaptureOptions(Protocol):
    """The capture options a backend and annotator are chosen from (a ``ProfilerConfig``, or a
    plan's capture spec)."""

    @property
    def tool(self) -> str: ...
    @property
    def nvtx(self) -> bool: ...
    @property
    def torch(self) -> TorchOptions: ...


def make_backend(config: CaptureOptions) -> Backend | None:
    """The backend for ``config.tool``; None when torch cannot be imported (logged once)."""
    if config.tool == "nsys":
        from profdsl._capture.nsys import NsysBackend

        return NsysBackend()
    try:
        import torch  # noqa: F401  (fail here, once, rather than at every stage)
    except ImportError:
        once(
            "torch-missing", logging.ERROR, "profdsl: tool='torch' but torch is not installed; nothing will be captured"
        )
        return None
    return TorchBackend(config.torch)


def make_annotator(config: CaptureOptions, role: str) -> Annotator | None:
    """The annotator for a profiled role: record_function, NVTX, both, or None."""
    parts: list[Annotator] = []
    if config.tool == "torch":
        try:
            parts.append(TorchAnnotator())
        except ImportError:
            pass  # make_backend logged it
    if config.nvtx or config.tool == "nsys":
        nvtx = nvtx_or_none(role)
        if nvtx is not None:
            parts.append(nvtx)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else MultiAnnotator(tuple(parts))
