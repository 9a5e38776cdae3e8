"""The registry: which recorders the DSL may use right now, and the DSL's one switch.

A plain object rather than a ``ContextVar``: under Ray the trainer's ``start_profile`` call and
the stage it profiles run on different threads or asyncio tasks, and a stage must still find its
recorder. Writers copy-on-write under a lock; the DSL's hot path reads one attribute without
locking: ``recorders`` (decorators) or ``hot`` (``with`` blocks, which must also close entries
they opened before a profiler stopped).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profdsl.runtime.context import Entry
    from profdsl.runtime.profiler import Profiler
    from profdsl.runtime.recorder import Recorder

__all__ = ["Registry"]


class Registry:
    """Recorders of the roles profiling a step (``recorders``), profilers in a profiled step
    whatever their rank (``stepping``: a driver whose rank is not profiled still decides when
    rollout engines are), and the ``with`` entries open anywhere (``opened``, in the order they
    opened: an exit in another context than its entry's, such as a generator finished on another
    thread, finds its entry there).

    ``hot`` is ``bool(recorders) or bool(opened)``, kept as a plain attribute for the DSL. The DSL
    adds to ``opened`` and sets ``hot`` without a lock (single dict operations are atomic); every
    writer that may clear ``hot`` looks at ``opened`` again after writing, so an entry opened
    meanwhile keeps it set.
    """

    __slots__ = ("_lock", "hot", "opened", "recorders", "stepping")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.recorders: tuple[Recorder, ...] = ()
        self.stepping: tuple[Profiler, ...] = ()
        self.opened: dict[Entry, None] = {}
        self.hot = False

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # Decorated functions pickled by value (Ray ships classes defined in __main__) refer to
        # the registry: they must get this process's registry on the other side, not a copy.
        from profdsl.runtime.process import registry

        return (registry, ())

    def _update(self) -> None:
        self.hot = bool(self.recorders) or bool(self.opened)
        if not self.hot and self.opened:  # an entry opened between the read and the write
            self.hot = True

    def activate(self, recorder: Recorder) -> None:
        """``recorder`` is in use: stages of its role find it."""
        with self._lock:
            if recorder not in self.recorders:
                self.recorders = (*self.recorders, recorder)
            self._update()

    def deactivate(self, recorder: Recorder) -> None:
        """``recorder``'s step is over (idempotent)."""
        with self._lock:
            self.recorders = tuple(r for r in self.recorders if r is not recorder)
            self._update()

    def find(self, role: str | None = None) -> Recorder | None:
        """The recorder of ``role``, or the first one activated when ``role`` is None."""
        recorders = self.recorders
        if role is None:
            return recorders[0] if recorders else None
        for recorder in recorders:
            if recorder.role == role:
                return recorder
        return None

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

    def refresh(self) -> None:
        """Recompute ``hot`` (a ``with`` entry closed while no recorder is active)."""
        with self._lock:
            self._update()

    def clear(self) -> None:
        """Forget everything (tests, and a forked child, which inherits none of it). ``opened``
        is emptied in place: the DSL holds it."""
        self._lock = threading.Lock()
        self.recorders, self.stepping = (), ()
        self.opened.clear()
        self._update()
