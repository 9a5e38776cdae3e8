"""The one process-wide registry: which profilers are profiling a step right now.

A plain module-level object rather than a ``ContextVar``: under Ray the trainer's
``start_profile`` call and the stage it profiles run on different threads or asyncio tasks, and a
stage must still find its profiler. Writers copy-on-write under a lock; the DSL's hot path reads
one attribute, ``REGISTRY.active``, without locking.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profdsl.session import Profiler

__all__ = ["REGISTRY", "Registry", "reset_for_tests"]


class Registry:
    """Profilers that are profiling a step (``active``), and those whose current step is a
    profiled step whatever their rank (``stepping``: a driver whose rank is not profiled still
    decides when rollout engines are), in the order they started."""

    __slots__ = ("_lock", "active", "stepping")

    def __init__(self) -> None:
        self.active: tuple[Profiler, ...] = ()
        self.stepping: tuple[Profiler, ...] = ()
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[object, tuple[()]]:
        # Decorated functions pickled by value (Ray ships classes defined in __main__) refer to
        # the registry: they must get this process's registry on the other side, not a copy.
        return (_registry, ())

    def set_stepping(self, profiler: Profiler, stepping: bool) -> None:
        """Record whether ``profiler`` is in a profiled step."""
        with self._lock:
            rest = tuple(p for p in self.stepping if p is not profiler)
            self.stepping = (*rest, profiler) if stepping else rest

    def find_stepping(self, role: str | None = None) -> Profiler | None:
        """The profiler of ``role`` (or the first) that is in a profiled step."""
        for profiler in self.stepping:
            if role is None or profiler.role == role:
                return profiler
        return None

    def add(self, profiler: Profiler) -> None:
        """Register ``profiler`` (idempotent)."""
        with self._lock:
            if profiler not in self.active:
                self.active = (*self.active, profiler)

    def remove(self, profiler: Profiler) -> None:
        """Unregister ``profiler`` (idempotent)."""
        with self._lock:
            self.active = tuple(p for p in self.active if p is not profiler)

    def find(self, role: str | None = None) -> Profiler | None:
        """The active profiler of ``role``, or the first one started when ``role`` is None."""
        active = self.active
        if not active:
            return None
        if role is None:
            return active[0]
        for profiler in active:
            if profiler.role == role:
                return profiler
        return None


REGISTRY = Registry()


def _registry() -> Registry:
    return REGISTRY


def _after_fork_in_child() -> None:
    # A child forked mid-step (a DataLoader worker) inherits the parent's registry and profiler
    # objects, but not the profiler thread behind them: it profiles nothing.
    REGISTRY.active, REGISTRY.stepping = (), ()
    REGISTRY._lock = threading.Lock()
    import sys

    capture = sys.modules.get("profdsl.backends.torch_capture")
    if capture is not None:
        capture.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def reset_for_tests() -> None:
    """Forget every registered profiler, close open capture sessions, forget logged-once keys."""
    from profdsl import _log

    for profiler in REGISTRY.active:
        REGISTRY.remove(profiler)
    for profiler in REGISTRY.stepping:
        REGISTRY.set_stepping(profiler, False)
    import sys

    torch_capture = sys.modules.get("profdsl.backends.torch_capture")
    if torch_capture is not None:
        torch_capture.reset_for_tests()
    for name in ("profdsl.backends.nsys_capture", "profdsl.finish_hook"):
        module = sys.modules.get(name)
        if module is not None:
            module.reset_for_tests()
    _log.reset_once()
