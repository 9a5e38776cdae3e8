"""The registry: the steps the DSL may use right now, and the DSL's one switch.

A plain object rather than a ``ContextVar``: under Ray the trainer's ``start_profile`` call and
the stage it profiles run on different threads or asyncio tasks, and a stage must still find its
step. Writers copy-on-write under a lock; the DSL reads one attribute without locking: ``on``,
whether anything may need the DSL at all (the one test of every ``with`` block and decorated call
when nothing is profiled or timed).
"""

from __future__ import annotations

import logging
import threading
from types import MappingProxyType
from typing import TYPE_CHECKING

from profdsl.core._log import once

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from profdsl._runtime.context import Entry
    from profdsl._runtime.step import Closable, StepContext
    from profdsl.metrics._tree import Node

__all__ = ["NO_TOPS", "Registry", "stray", "unbound"]

#: ``Registry.tops`` when no one tree is registered: nothing found there.
NO_TOPS: Mapping[str, Node] = MappingProxyType({})


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


def stray(name: str, role: str, on: Iterable[str], live: Iterable[Closable]) -> None:
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
    """The steps that have anything on (``steps``: one
    :class:`~profdsl._runtime.step.StepContext` per role's numbered step that is profiled,
    captured or timed, in the order they began), and the ``with`` entries open anywhere
    (``opened``, in the order they opened: an exit in another context than its entry's, such as
    a generator finished on another thread, finds its entry there).

    ``on`` is ``bool(steps or opened)``, kept as a plain attribute for the DSL; so are
    ``profiled`` (a step is profiled: an entry may open a region), ``timed`` (a step is timed:
    an entry has a metrics node), ``plain`` (``timed and not profiled``: an entry bound to no role
    or profiler is only timed, begun and ended without a call) and ``tops`` (the top-level nodes of
    the one registered step's tree, when exactly one step is registered and it is timed on the host,
    not on the device; else an empty mapping), derived from ``steps`` at each change. The DSL adds to
    ``opened`` and sets ``on`` without a lock (single dict operations are atomic); every writer
    that may clear it looks at ``opened`` again after writing, so an entry opened meanwhile keeps
    it set. A reset replaces the registry (:meth:`profdsl._runtime.process.Process.reset`): the
    DSL reads it through the process state each time and never keeps it.
    """

    __slots__ = ("_lock", "on", "opened", "plain", "profiled", "steps", "timed", "tops")

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a signal handler may call into it
        self.steps: tuple[StepContext, ...] = ()
        self.opened: dict[Entry, None] = {}
        self.on = self.profiled = self.timed = self.plain = False
        self.tops: Mapping[str, Node] = NO_TOPS

    def _update(self) -> None:
        steps = self.steps
        self.profiled = any(step.profiled for step in steps)
        self.timed = any(step.root is not None for step in steps)
        self.plain = self.timed and not self.profiled
        root = steps[0].root if len(steps) == 1 else None
        self.tops = NO_TOPS if root is None or root.device is not None else root.children
        self.on = bool(steps or self.opened)
        if not self.on and self.opened:  # an entry opened between the read and the write
            self.on = True

    def activate(self, step: StepContext) -> None:
        """``step`` began with something on: the DSL finds it."""
        with self._lock:
            if step not in self.steps:
                self.steps = (*self.steps, step)
            self._update()

    def deactivate(self, step: StepContext) -> None:
        """``step`` is over (idempotent)."""
        with self._lock:
            self.steps = tuple(s for s in self.steps if s is not step)
            self._update()

    def refresh(self) -> None:
        """Recompute ``on`` (a ``with`` entry closed while nothing else is on)."""
        with self._lock:
            self._update()
