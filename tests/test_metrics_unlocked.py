"""An ended entry adds to its node without the step's lock (``docs/architecture.md``, the
concurrency model): its seconds are appended to the node's ``ended`` and folded into the sums
under the lock, its stretch is appended to the step's. Several threads hammering one node, with
folds forced at every few entries and thread switches as often as the interpreter allows, must
lose nothing: exact counts, exact sums, every stretch kept whole or counted dropped."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from profdsl import profile_stage
from profdsl.metrics import NAMES
from profdsl.metrics import _tree as tree

from .metrics_support import metered, totals
from .profiling import run_threads

THREADS = 6
ENTRIES = 400


class ThreadClock:
    """Each thread's own clock, one second further at each read: an entry with nothing inside
    lasts exactly 1.0 s, and one around one such entry 3.0 s, however the threads interleave."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __call__(self) -> float:
        now: float = getattr(self.local, "now", 0.0) + 1.0
        self.local.now = now
        return now


@pytest.fixture
def hammered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Folds every 3 entries, each thread's own clock, thread switches every microsecond."""
    monkeypatch.setattr(tree, "FOLD_AT", 3)
    monkeypatch.setattr(tree, "clock", ThreadClock())
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("hammered")
def test_one_node_hammered_from_threads_counts_and_sums_every_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six threads end 400 entries each of one shared top-level stage, each around a nested
    one, and 400 decorated calls (the two ways an entry ends): every entry counted once, every
    second summed, every top-level stretch in the step's ledger."""
    monkeypatch.setattr(tree, "MAX_SPANS", 2 * THREADS * ENTRIES)
    shared, inner = profile_stage("hammer"), profile_stage("inner")

    @profile_stage("called")
    def called() -> None:
        return None

    def worker() -> None:
        for _ in range(ENTRIES):
            with shared:
                with inner:
                    pass
            called()

    with metered() as profiler:
        with profiler.step(1):
            root = profiler.meter.root
            run_threads(*[worker] * THREADS)
        timings = profiler.meter.timings
    entries = THREADS * ENTRIES
    assert timings is not None and root is not None
    assert totals(timings.flat(), NAMES.count) == {"hammer": entries, "hammer/inner": entries, "called": entries}
    assert totals(timings.flat(), NAMES.total) == {
        "hammer": 3.0 * entries,
        "hammer/inner": 1.0 * entries,
        "called": 1.0 * entries,
    }
    assert root.dropped == 0 and len(root.stretches) == 3 * 2 * entries
    kept = root.stretches[2::3]
    assert kept.count(root.children["hammer"]) == entries and kept.count(root.children["called"]) == entries
    assert timings.ledger is not None


@pytest.mark.usefixtures("hammered")
def test_stretches_past_the_room_from_threads_are_kept_to_the_room_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads racing for the last room of a step's stretches: the step keeps exactly as many as
    it has room for, whole, and counts every other one dropped (the ledger's reason says all)."""
    monkeypatch.setattr(tree, "MAX_SPANS", 50)
    shared = profile_stage("hammer")

    def worker() -> None:
        for _ in range(ENTRIES):
            with shared:
                pass

    with metered() as profiler:
        with profiler.step(1):
            root = profiler.meter.root
            run_threads(*[worker] * THREADS)
        timings = profiler.meter.timings
    entries = THREADS * ENTRIES
    assert timings is not None and root is not None
    assert timings.stages["hammer"].count == entries
    assert len(root.stretches) == 3 * 50 and root.dropped == entries - 50
    node = root.children["hammer"]
    assert root.stretches[2::3] == [node] * 50 and all(
        b - a == 1.0 for a, b in zip(root.stretches[::3], root.stretches[1::3])
    )
    assert timings.ledger is None and timings.ledger_why is not None and f"{entries} stretches" in timings.ledger_why


def test_an_entry_that_ends_after_its_step_is_not_counted_even_unfolded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries ended before the step's end but not folded yet (fewer than ``FOLD_AT``) are
    counted when the step ends; one that ends after it, in the next step, is not, and no later
    fold counts it."""
    monkeypatch.setattr(tree, "FOLD_AT", 4)
    stage = profile_stage("late")
    with metered() as profiler:
        with profiler.step(1):
            root = profiler.meter.root
            for _ in range(3):
                with stage:
                    pass
            late = stage.__enter__()
        first = profiler.meter.timings
        with profiler.step(2):
            late.__exit__(None, None, None)
        second = profiler.meter.timings
    assert first is not None and second is not None and root is not None
    node = root.children["late"]
    assert first.stages["late"].count == 3 and node.count == 3 and not node.ended
    assert "late" not in second.stages
    node.fold()
    assert node.count == 3 and not root.unkept


class Racing(list[float]):
    """A node's ``ended`` into which another thread's entry ends while a fold copies it."""

    raced = False

    def __getitem__(self, index: object) -> object:
        taken = super().__getitem__(index)  # type: ignore[index]
        if isinstance(index, slice) and not self.raced:
            self.raced = True
            self.append(0.5)
        return taken


def test_an_entry_ending_while_its_node_folds_is_kept_for_the_next_fold() -> None:
    """A fold takes the items it counted and only those: one appended while it ran stays in
    ``ended``, to be counted by the next fold."""
    root = tree.Root("actor", 1, tree.Paths(8))
    node = tree.child(root, "update")
    node.ended = Racing([1.0, 2.0])
    node.fold()
    assert (node.total, node.count, list(node.ended)) == (3.0, 2, [0.5])
    node.fold()
    assert (node.total, node.count, list(node.ended)) == (3.5, 3, [])
