"""Region annotators: torch ``record_function`` and NVTX ranges.

Both are on the hot path of a profiled stage, so each pre-binds what it calls: the torch ops that
``record_function`` itself uses, and NVTX event attributes registered once per region name and
colour. ``color`` (an ARGB integer, from ``profile_stage(color=...)``) colours NVTX ranges; torch
regions have no colour.

torch regions are named :func:`profdsl.core._labels.encode` of the label (torch's trace export
escapes nothing), computed once per name; NVTX ranges carry the label itself.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any, Protocol

from profdsl.core._labels import encode
from profdsl.core._log import once

__all__ = ["DOMAIN", "Annotator", "MultiAnnotator", "NvtxAnnotator", "TorchAnnotator", "nvtx_or_none", "role_color"]

#: The NVTX domain every profdsl range lives in.
DOMAIN = "profdsl"
_PALETTE = (0x4C72B0, 0xDD8452, 0x55A868, 0xC44E52, 0x8172B3, 0x937860, 0xDA8BC3, 0x8C8C8C)
#: How many encoded region names a torch annotator keeps (mini-batch names grow with the index).
NAME_CACHE = 4096


class Annotator(Protocol):
    """Marks named regions; ``pop`` takes what ``push`` returned, on the same thread."""

    def push(self, name: str, color: int | None = None) -> object:
        """Open a region."""

    def pop(self, token: object) -> None:
        """Close the region ``push`` opened."""


def role_color(role: str) -> int:
    """A stable ARGB colour for ``role`` (the same in every process and run)."""
    return 0xFF000000 | _PALETTE[zlib.crc32(role.encode()) % len(_PALETTE)]


class TorchAnnotator:
    """``torch.profiler.record_function`` regions, without the context-manager object, named by
    the encoded label."""

    def __init__(self) -> None:
        import torch

        self._enter = torch.ops.profiler._record_function_enter_new
        self._exit = torch.ops.profiler._record_function_exit._RecordFunction
        # As record_function does: exiting with __torch_function__ handling on is ~3x slower.
        self._plain = torch._C.DisableTorchFunctionSubclass
        self._names: dict[str, str] = {}

    def push(self, name: str, color: int | None = None) -> object:
        """Open a region for the label ``name``."""
        return self._enter(self._names.get(name) or self._encode(name), None)

    def _encode(self, name: str) -> str:
        encoded = encode(name)
        if len(self._names) < NAME_CACHE:
            self._names[name] = encoded
        return encoded

    def pop(self, token: object) -> None:
        """Close the region ``push`` returned."""
        with self._plain():
            self._exit(token)


class NvtxAnnotator:
    """NVTX push/pop ranges in the ``profdsl`` domain, the role as category, a colour per role."""

    def __init__(self, role: str, color: int | None = None) -> None:
        import nvtx

        self._domain = nvtx.get_domain(DOMAIN)
        self._role = role
        self._color = role_color(role) if color is None else color
        self._attributes: dict[tuple[str, int | None], Any] = {}

    def push(self, name: str, color: int | None = None) -> object:
        """Open a range named ``name``, in ``color`` or the role's colour."""
        key = (name, color)
        try:
            attributes = self._attributes[key]
        except KeyError:  # registered once per name (None from nvtx when no tool is attached)
            attributes = self._attributes[key] = self._domain.get_event_attributes(
                message=name, color=self._color if color is None else color, category=self._role
            )
        self._domain.push_range(attributes)
        return None

    def pop(self, token: object) -> None:
        """Close the innermost range of this thread."""
        self._domain.pop_range()


class MultiAnnotator:
    """Several annotators; regions open in order and close in reverse."""

    def __init__(self, annotators: tuple[Annotator, ...]) -> None:
        self._annotators = annotators
        self._reversed = tuple(reversed(annotators))

    def push(self, name: str, color: int | None = None) -> object:
        """Open a region in every annotator."""
        return [a.push(name, color) for a in self._annotators]

    def pop(self, token: object) -> None:
        """Close them in reverse order."""
        tokens: list[object] = token  # type: ignore[assignment]
        for annotator, t in zip(self._reversed, reversed(tokens)):
            annotator.pop(t)


def nvtx_or_none(role: str) -> NvtxAnnotator | None:
    """An NVTX annotator, or None (logged once) when the nvtx package is missing."""
    try:
        return NvtxAnnotator(role)
    except ImportError:
        once(
            "nvtx-missing",
            logging.WARNING,
            "profdsl: nvtx=True but the nvtx package is not installed (pip install profdsl[nvtx])",
        )
        return None
