"""The usual timed ``with`` entry (a step timed on the host, nothing profiled, the word bound to
nothing), begun and ended without a call: a :class:`~profdsl._runtime.context.Timed` entry.

What its speed relies on, each a rule of its own: a ``Timed``'s ``handle`` and ``spent`` are its
class's and nothing writes them on it (a pause first makes it a plain ``Entry``; an end keeps no
``spent``); its inlined exit leaves it on top of its context's stack, dead and holding nothing of
its step, for the next entry begun in that context to drop; a step timed on the device never
gets one.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator

import pytest

from profdsl import profile_stage
from profdsl._runtime import context
from profdsl._runtime.context import ENDED, Entry, Timed

from .metrics_support import FakeClock, fake_clock, metered, totals


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    with fake_clock(monkeypatch) as fake:
        yield fake


def test_an_exited_entry_stays_on_top_dead_and_holds_nothing_of_its_step(clock: FakeClock) -> None:
    """After an inlined exit the context's stack still holds the entry, dead and without its
    node (no step tree kept alive by an idle thread: a closed node of no step instead); ``top()``
    skips it, the next entry begun there drops it (never links above it), and its time was
    counted."""
    stage = profile_stage("load")
    with metered() as profiler:
        with profiler.step(1):
            with stage:
                entered = context.STACK.get()
                assert type(entered) is Timed and entered.live and entered.node is not None
                clock.advance(1.0)
            left = context.STACK.get()
            assert left is entered and not left.live and left.node is ENDED and ENDED.closed
            assert context.top() is None
            with profile_stage("next"):
                assert context.STACK.get().below is None  # type: ignore[union-attr]
            with stage:  # nested: under the live entry, above the dead one "next" left
                outer = context.top()
                assert outer is not None and outer.below is None
                with profile_stage("inner"):
                    inner = context.top()
                    assert inner is not None and inner.below is outer and outer.live
        assert totals(profiler.metrics) == {"load": 1.0, "next": 0.0, "load/inner": 0.0}
        assert profiler.metrics["timing_count/load"] == 2


def test_a_decorated_call_after_an_exited_entry_finds_its_node_as_usual(clock: FakeClock) -> None:
    """A decorated call (``Entries._begin``) begun above a dead entry skips it: its node is the
    top of the tree and it links to what is live below."""

    @profile_stage("call")
    def call() -> Entry | None:
        clock.advance(2.0)
        return context.top()

    with metered() as profiler, profiler.step(1):
        with profile_stage("first"):
            clock.advance(1.0)
        own = call()
        assert own is not None and own.below is None
        with profile_stage("outer"):
            own = call()
            assert own is not None and own.below is not None and own.below.key.name == "outer"  # type: ignore[attr-defined]
    assert totals(profiler.metrics) == {"first": 1.0, "call": 2.0, "outer": 2.0, "outer/call": 2.0}


def test_a_paused_timed_entry_becomes_a_plain_entry_first(clock: FakeClock) -> None:
    """A ``with`` block around a decorated generator's ``yield``: its ``Timed`` entry is paused
    at the yield, which makes it a plain ``Entry`` (its own ``spent`` and ``handle`` then), so the
    consumer's time is not the stage's and its exit takes the usual way."""
    seen: list[type] = []

    @profile_stage("produce")
    def produce() -> Iterator[int]:
        with profile_stage("hold"):
            seen.append(type(context.top()))
            clock.advance(1.0)
            yield 1
            seen.append(type(context.top()))
            clock.advance(2.0)

    with metered() as profiler, profiler.step(1):
        for _ in produce():
            clock.advance(8.0)  # the consumer's
    assert seen == [Timed, Entry]
    assert totals(profiler.metrics) == {"produce": 3.0, "produce/hold": 3.0}


def test_a_timed_entry_ended_out_of_order_is_counted(clock: FakeClock) -> None:
    """Two inlined entries exited in the wrong order: the outer one ends through ``Entry.end``
    (not the inlined exit), which writes nothing a ``Timed`` hides; both are counted."""
    a, b = profile_stage("a"), profile_stage("b")
    with metered() as profiler, profiler.step(1):
        a.__enter__()
        clock.advance(1.0)
        b.__enter__()
        clock.advance(2.0)
        a.__exit__(None, None, None)
        clock.advance(4.0)
        b.__exit__(None, None, None)
        assert context.top() is None
    assert totals(profiler.metrics) == {"a": 3.0, "a/b": 6.0}


def test_tasks_keep_their_own_stack_over_a_dead_entry(clock: FakeClock) -> None:
    """Tasks created after an inlined exit copy a context whose stack holds the dead entry: each
    skips it and nests its own entries at the top of the tree, while the creator's stack is
    untouched."""
    stage = profile_stage("task")

    async def one() -> None:
        with stage:
            await asyncio.sleep(0)
            clock.advance(1.0)

    async def main() -> None:
        with profile_stage("before"):
            pass
        dead = context.STACK.get()
        await asyncio.gather(one(), one())
        assert context.STACK.get() is dead

    with metered() as profiler, profiler.step(1):
        asyncio.run(main())
    assert totals(profiler.metrics) == {"before": 0.0, "task": 3.0}  # 100-101 and 100-102
    assert profiler.metrics["timing_count/task"] == 2


def test_a_context_copied_inside_an_exited_entry_nests_nothing_under_it(clock: FakeClock) -> None:
    """A context copied inside a block (``asyncio.to_thread``, ``copy_context``) holds its entry;
    run after the block's exit, in a thread, its entries (a ``with`` block and a decorated call)
    find that entry dead with a closed node and go to the top of the tree."""
    stage = profile_stage("outer")

    @profile_stage("call")
    def call() -> None:
        clock.advance(2.0)

    def later() -> None:
        with profile_stage("late"):
            clock.advance(1.0)
        call()

    with metered() as profiler, profiler.step(1):
        with stage:
            copied = contextvars.copy_context()
        worker = threading.Thread(target=copied.run, args=(later,))
        worker.start()
        worker.join()
    assert totals(profiler.metrics) == {"outer": 0.0, "late": 1.0, "call": 2.0}


def test_a_write_of_what_a_timed_hides_fails_loudly() -> None:
    """The class attributes hide the slots: a write on a ``Timed`` raises, which is why nothing
    may write ``handle`` or ``spent`` on one (the tests above go through every writer)."""
    entry = Timed()
    assert entry.handle is None and entry.spent == 0.0
    with pytest.raises(AttributeError):
        entry.spent = 1.0
    with pytest.raises(AttributeError):
        entry.handle = object()
