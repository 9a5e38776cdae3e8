"""A role's capture options (:class:`CaptureSpec`), and its backend and annotator chosen from them, once."""

from __future__ import annotations

import logging

import attrs

from profdsl._capture.annotators import Annotator, MultiAnnotator, TorchAnnotator, nvtx_or_none
from profdsl._capture.base import Backend
from profdsl._capture.torch_session import TorchBackend  # (no torch at its import: torch is imported by a capture)
from profdsl.config import ProfilerConfig, TorchOptions
from profdsl.core._log import once

__all__ = ["CaptureSpec", "make_annotator", "make_backend"]


@attrs.frozen(kw_only=True)
class CaptureSpec:
    """What a traced role captures with (the config's capture options, and nothing else)."""

    tool: str
    nvtx: bool
    discrete: bool
    torch: TorchOptions
    relocate_results: bool
    nsys_report_dir: str | None

    @classmethod
    def of(cls, config: ProfilerConfig) -> CaptureSpec:
        """The capture options of ``config`` (its fields of the same names)."""
        return cls(**{field.name: getattr(config, field.name) for field in attrs.fields(cls)})


def make_backend(config: CaptureSpec) -> Backend | None:
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


def make_annotator(config: CaptureSpec, role: str) -> Annotator | None:
    """The annotator for a profiled role: record_function, NVTX, both, or None (made once its
    backend is: torch is importable for ``tool='torch'``)."""
    parts: list[Annotator] = [TorchAnnotator()] if config.tool == "torch" else []
    if config.nvtx or config.tool == "nsys":
        nvtx = nvtx_or_none(role)
        if nvtx is not None:
            parts.append(nvtx)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else MultiAnnotator(tuple(parts))
