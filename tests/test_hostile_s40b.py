"""A hostile round against the ``Timed`` entry left dead on top of its stack, the re-entrant step
lock's ``folding`` and the placed profiling waits: each test here failed on the code before its
fix."""

from __future__ import annotations

import gc

from profdsl import profile_stage
from profdsl._runtime import context
from profdsl.metrics import _tree as tree

from .metrics_support import metered
from .scripts import run_script

#: The step ends (``close`` folding node ``g``, one entry of it counted, not yet taken out) when a
#: signal arrives; its handler closes a suspended generator stage of ``g`` opened in the step (as a
#: gc finalizer may): that entry ends and its node folds, inside close's fold of the same node.
_HANDLER_IN_CLOSE = """
import signal
from profdsl import profile_stage
from profdsl.metrics import _tree as tree
from tests.metrics_support import metered

@profile_stage("g")
def gen():
    yield 1
    yield 2

suspended = None

def handler(signum, frame):
    tree.FOLD_AT = 1  # the ending entry folds its node
    suspended.close()

signal.signal(signal.SIGUSR1, handler)
closing, fired = [], []

def arriving(items, start):  # the signal arrives in the middle of close's fold of `g`
    if closing and items and not fired:
        fired.append(1)
        signal.raise_signal(signal.SIGUSR1)
    return __builtins__.sum(items, start)

tree.sum = arriving
profiler = metered()
with profiler.step(1):
    for _ in gen():
        pass
    suspended = gen()
    next(suspended)
    root = profiler.meter.root
    closing.append(1)
g = root.children["g"]
print(len(fired), g.count, profiler.meter.timings.stages["g"].count)
"""


def test_a_signal_handler_ending_an_entry_while_its_step_closes_never_double_counts() -> None:
    """The step's close folds every node under its lock, as a fold does, but did not say so
    (``Root.folding``): the handler's entry, ending inside close's fold of its node, folded that
    node again, and close then counted its own items a second time (count 3 for two entries).
    The entry ending as the step ends may be counted or not: 1 or 2, never more."""
    code, out, err = run_script(_HANDLER_IN_CLOSE)
    assert code == 0, err
    fired, count, timed = (int(word) for word in out.split())
    assert fired == 1
    assert count in (1, 2) and timed == count


def _roots(role: str) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is tree.Root and o.role == role)


def test_a_dead_timed_entry_on_top_keeps_no_entry_of_its_step_alive() -> None:
    """``a`` is exited while ``b`` (entered inside it) is still open, then ``b``: ``b`` is a
    ``Timed`` its exit leaves dead on top, and below it ``a``, ended out of order, still held its
    step's node: with no later block in this context the whole step tree stayed alive."""
    a, b = profile_stage("a"), profile_stage("b")
    profiler = metered("hostile-s40b")
    with profiler.step(1):
        a.__enter__()
        b.__enter__()
        a.__exit__(None, None, None)
        b.__exit__(None, None, None)
    timings = profiler.meter.timings
    assert timings is not None
    assert {path: stage.count for path, stage in timings.stages.items()} == {"a": 1, "a/b": 1}
    kept = []
    entry = context.STACK.get()
    while entry is not None:
        kept.append(entry)
        entry = entry.below
    assert all(e.node is None or e.node is context.ENDED for e in kept if not e.live)
    del profiler, timings
    assert _roots("hostile-s40b") == 0
