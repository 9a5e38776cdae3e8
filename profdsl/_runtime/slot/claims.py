"""The continuous roles holding the capture slot (:class:`Claim`), and the step session they
share: which claims can still record, and the name the session keeps across its parts."""

from __future__ import annotations

import threading

import attrs

from profdsl._capture.base import Backend
from profdsl._runtime.slot.interrupts import Signals
from profdsl._runtime.slot.session import Session
from profdsl._runtime.writer.writer import Writer
from profdsl.collect._export import TraceLabel

__all__ = ["Claim", "StepClaims"]


@attrs.frozen(eq=False)
class Claim:
    """A continuous role's hold on the slot: the label of its step trace, its backend, whether
    the role needs a capture of every thread, and the thread its step began on."""

    label: TraceLabel
    backend: Backend
    every_thread: bool = False
    thread: int = attrs.field(factory=threading.get_ident)


class StepClaims:
    """The claims on the slot, in order. A claim whose thread ended stays until released (its
    role's step is still open) but records nothing more: a new thread that happens to get the
    ended thread's ident must not start a second session for that step."""

    def __init__(self, writer: Writer, signals: Signals) -> None:
        self.writer = writer  # where the step sessions' traces are finished
        self.signals = signals  # held while a session's capture starts or stops
        self.claims: list[Claim] = []
        self.ended: set[Claim] = set()  # their thread ended: they record nothing more
        self.refused: set[Claim] = set()  # their step's capture could not start (recorded)
        self.pieces = 0  # parts already written of the step session being cut
        self.name: TraceLabel | None = None  # the step session's name, kept across its parts
        self.told: set[Claim] = set()  # told by an earlier part where their traces are

    def add(self, claim: Claim) -> None:
        """A continuous role's profiled step begins."""
        self.claims.append(claim)

    def remove(self, claim: Claim) -> bool:
        """``claim`` is released; True when it was the last one (the step session ends)."""
        if claim in self.claims:
            self.claims.remove(claim)
        self.ended.discard(claim)
        self.refused.discard(claim)
        if self.claims:
            return False
        self.pieces, self.name, self.told = 0, None, set()
        return True

    def live(self) -> list[Claim]:
        """The claims that can still record: their thread has not ended and their capture was
        not refused."""
        return [c for c in self.claims if c not in self.ended and c not in self.refused]

    def refuse(self) -> None:
        """The step session of the live claims could not start: they record nothing more (their
        step's loss is recorded once, not once per stage)."""
        self.refused.update(c for c in self.claims if c not in self.ended)

    def thread_ended(self, ident: int) -> None:
        """Thread ``ident`` ended: its claims record nothing more."""
        self.ended.update(c for c in self.claims if c.thread == ident)

    def every_thread(self) -> bool:
        """Whether a live claim needs a capture of every thread."""
        return any(c.every_thread for c in self.live())

    def cut(self, session: Session) -> None:
        """``session`` (the step session) is cut by a stage: it is written as the next part (the
        claims it told where their traces are are not told again by the parts after it)."""
        session.label = attrs.evolve(session.label, part=self.pieces)
        self.pieces += 1
        self.told = {c for c in self.claims if c.label.save_path in session.save_paths}

    def next_session(self) -> Session | None:
        """The step session to open here for the live claims (not started), or None: none are
        live, or the session records only their thread and this is another (it is opened there,
        at its next call; made here, it would say twice where a fused role's trace went)."""
        live = self.live()
        if not live or not (self.every_thread() or threading.get_ident() == live[0].thread):
            return None
        if self.name is None:
            self.name = live[0].label
        name = attrs.evolve(self.name, part=self.pieces or None)  # numbered only once cut
        session = Session("step", name, live[0].backend, self.writer, thread=live[0].thread, signals=self.signals)
        for claim in self.claims:
            session.join(claim.label, told=claim in self.told)
        return session

    def clear(self) -> None:
        """Forget every claim."""
        self.claims, self.ended, self.refused, self.pieces, self.name, self.told = [], set(), set(), 0, None, set()
