"""The registry: which recorders and step trees the DSL may use right now, and the DSL's one
switch.

A plain object rather than a ``ContextVar``: under Ray the trainer's ``start_profile`` call and
the stage it profiles run on different threads or asyncio tasks, and a stage must still find its
recorder. Writers copy-on-write under a lock; the DSL reads one attribute without locking: ``on``,
whether anything may need the DSL at all (the one test of every ``with`` block and decorated call
when nothing is profiled or timed).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from profdsl.core.log import once

if TYPE_CHECKING:
    from collections.abc import Iterable

    from profdsl.metrics.tree import Root
    from profdsl.runtime.context import Entry
    from profdsl.runtime.profiler import Profiler
    from profdsl.runtime.recorder import Recorder

__all__ = ["Registry", "stray", "unbound"]


def unbound(name: str, traced: bool, roles: list[str], chosen: str | None) -> None:
    """Say once per stage name which role took an entry bound to no role while several roles
    were profiling (``traced``) or timing a step."""
    doing, what = ("profiling", "its region") if traced else ("timing", "its time")
    once(
        f"unbound:{doing}:{name}",
        logging.WARNING,
        "profdsl: stage %r is bound to no role while roles %s are %s a step: %s goes to %r "
        "(pass role= or profiler= to choose)",
        name,
        ", ".join(map(repr, roles)),
        doing,
        what,
        chosen,
    )


def stray(name: str, role: str, on: Iterable[str], live: Iterable[Profiler]) -> None:
    """Say once per role and stage name that an entry bound to ``role`` records nothing because
    no profiler of the process (``live``) has that role, while roles ``on`` are on (a typo such
    as ``role="actr"``). A role whose profiler exists but is not in a profiled step is silent:
    that is the config's choice."""
    if any(profiler.role == role for profiler in live):
        return
    once(
        f"stray:{role}:{name}",
        logging.WARNING,
        "profdsl: stage %r names role %r, which no profiler of this process has, while roles %s "
        "are on: it records nothing (a typo in role=?)",
        name,
        role,
        ", ".join(sorted(map(repr, set(on)))),
    )


class Registry:
    """Recorders of the roles profiling a step (``recorders``), the step trees of the roles
    timing one (``meters``), profilers in a profiled step whatever their rank (``stepping``: a
    driver whose rank is not profiled still decides when rollout engines are), and the ``with``
    entries open anywhere (``opened``, in the order they opened: an exit in another context than
    its entry's, such as a generator finished on another thread, finds its entry there).

    ``on`` is ``bool(recorders or meters or stepping or opened)``, kept as a plain attribute for
    the DSL. The DSL adds to ``opened`` and sets ``on`` without a lock (single dict operations
    are atomic); every writer that may clear it looks at ``opened`` again after writing, so an
    entry opened meanwhile keeps it set.
    """

    __slots__ = ("_lock", "meters", "on", "opened", "recorders", "stepping")

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a signal handler may call into it
        self.recorders: tuple[Recorder, ...] = ()
        self.stepping: tuple[Profiler, ...] = ()
        self.opened: dict[Entry, None] = {}
        self.meters: tuple[Root, ...] = ()
        self.on = False

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # Decorated functions pickled by value (Ray ships classes defined in __main__) refer to
        # the registry: they must get this process's registry on the other side, not a copy.
        from profdsl.runtime.process import registry

        return (registry, ())

    def _update(self) -> None:
        self.on = bool(self.recorders or self.meters or self.stepping or self.opened)
        if not self.on and self.opened:  # an entry opened between the read and the write
            self.on = True

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

    def activate_meter(self, root: Root) -> None:
        """``root``'s step is being timed: entries of its role add to it."""
        with self._lock:
            self.meters = (*(m for m in self.meters if m is not root), root)
            self._update()

    def deactivate_meter(self, root: Root) -> None:
        """``root``'s step is over (idempotent)."""
        with self._lock:
            self.meters = tuple(m for m in self.meters if m is not root)
            self._update()

    def find_meter(self, role: str | None) -> Root | None:
        """The step tree of ``role`` (or the first) being timed."""
        for root in self.meters:
            if role is None or root.role == role:
                return root
        return None

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
            self._update()

    def find_stepping(self, role: str | None = None) -> Profiler | None:
        """The profiler of ``role`` (or the first) that is in a profiled step."""
        for profiler in self.stepping:
            if role is None or profiler.role == role:
                return profiler
        return None

    def refresh(self) -> None:
        """Recompute ``on`` (a ``with`` entry closed while nothing else is on)."""
        with self._lock:
            self._update()

    def clear(self) -> None:
        """Forget everything (tests, and a forked child, which inherits none of it). ``opened``
        is emptied in place: the DSL holds it."""
        self._lock = threading.RLock()  # re-entrant: a signal handler may call into it
        self.recorders, self.stepping, self.meters = (), (), ()
        self.opened.clear()
        self._update()
