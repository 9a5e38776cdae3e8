"""Running a decorated coroutine, generator or async generator body in slices.

A region held open across an ``await`` covers whatever other tasks run on the thread meanwhile,
and one held across a ``yield`` covers the consumer's code: torch's ranges then overlap without
nesting. So the body is driven step by step, and whenever it gives control away its entry
suspends together with every entry opened inside it since it resumed (:class:`Slices`): their
regions close, innermost first, and reopen, outermost first, when the body continues. At a
``yield`` the entries also stop their clocks (the consumer's time is not the stage's) and leave
the consumer's stack, to be put back wherever the body resumes; at an ``await`` they stay (the
task's own stack) and keep timing.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from profdsl._runtime import context
from profdsl._runtime.context import Entry
from profdsl.core._log import internal_error

__all__ = ["Driven", "Slices", "drive"]


class Slices:
    """A sliced body's entry, and the entries it holds while suspended."""

    __slots__ = ("entry", "held")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.held: list[Entry] | None = None

    def suspend(self, paused: bool) -> None:
        """The body gives control away: at a ``yield`` (``paused``) or an ``await``."""
        try:
            held = self.held = context.segment(self.entry)
            for entry in held:  # innermost first
                if paused:
                    entry.pause()
                if entry.handle is not None:
                    entry.handle.suspend()
            if paused:
                context.detach(held)
        except Exception as exc:
            internal_error("stage suspend", exc)

    def resume(self, paused: bool) -> None:
        """The body continues (after what :meth:`suspend` was told)."""
        held, self.held = self.held, None
        if held is None:
            return
        try:
            if paused:
                context.reattach(held)
            for entry in reversed(held):
                if entry.handle is not None:
                    entry.handle.resume()
                if paused and entry.node is not None:
                    entry.run()
        except Exception as exc:
            internal_error("stage resume", exc)

    def closed(self) -> None:
        """The body was closed at a ``yield``: a timed block of it (an entry without a handle)
        that is still held missed its exit, which ran elsewhere first (the event loop closes an
        async generator's body too, in its own context, where the stage holds the block's
        entry): it ends here. One with a handle is listed open, found wherever its exit runs."""
        try:
            for entry in context.segment(self.entry)[:-1]:
                if entry.handle is None:
                    entry.end()
        except Exception as exc:
            internal_error("stage close", exc)


def drive(body: Any, slices: Slices, paused: bool) -> Generator[Any, Any, Any]:
    """Delegate to ``body`` (a generator, or a coroutine: ``send``, ``throw`` and ``close``
    included) with its entries open exactly while its own code runs; each value it gives away is
    a ``yield`` (``paused``: a generator's) or an ``await`` (a coroutine's, to the event loop)."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            value = body.send(send) if error is None else body.throw(error)
        except StopIteration as done:
            return done.value
        slices.suspend(paused)
        try:
            send, error = (yield value), None
        except GeneratorExit:
            slices.resume(paused)
            body.close()
            raise
        except BaseException as exc:  # cancellation included: the body decides what to do
            send, error = None, exc
        slices.resume(paused)


class Driven:
    """``await Driven(coro, slices)``: await a coroutine (or an async generator's step) driven in
    slices."""

    __slots__ = ("body", "slices")

    def __init__(self, body: Any, slices: Slices) -> None:
        self.body, self.slices = body, slices

    def __await__(self) -> Generator[Any, Any, Any]:
        return drive(self.body, self.slices, False)
