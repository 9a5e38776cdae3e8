"""A hostile round against the lock-free ended entries, relocation's staging rename, the bounded
reads and the command lines' escaping: each test here failed on the code before its fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A signal handler entering a stage while the main thread holds its step's lock (inside a fold
#: of the ended entries: a signal arrives there, between two bytecodes, as anywhere). The
#: handler's entry nests in the entry ending on the main thread: under a path beyond the cap
#: (``max_stages=1``: ``a/b``), it is counted in the very node being folded (the overflow).
_HANDLER_IN_A_FOLD = """
import signal, sys
from profdsl import profile_stage
from profdsl.metrics import _tree as tree
from tests.metrics_support import metered

tree.FOLD_AT = 1  # every ended entry folds: the handler's too
NAME, CAP = sys.argv[1], int(sys.argv[2])

def handler(signum, frame):
    with profile_stage(NAME):
        pass

signal.signal(signal.SIGUSR1, handler)
fired = []

def arriving(items, start):  # the signal arrives in the middle of the main thread's fold
    if not fired:
        fired.append(1)
        signal.raise_signal(signal.SIGUSR1)
    return __builtins__.sum(items, start)

tree.sum = arriving  # (the fold's sum: its step's lock held, its items counted, not yet taken out)
profiler = metered(max_stages=CAP)
with profiler.step(1):
    with profile_stage("a"):
        with profile_stage("b"):
            pass
timings = profiler.meter.timings
print({name: stage.count for name, stage in timings.stages.items()}, timings.overflow)
"""


@pytest.mark.parametrize(
    ("name", "cap", "counts", "overflow"),
    [
        ("h", 8, {"a": 1, "a/b": 1, "a/b/h": 1}, 0),
        ("b", 8, {"a": 1, "a/b": 1, "a/b/b": 1}, 0),
        ("h", 1, {"a": 1}, 2),
    ],
    ids=["new-node", "nested-same-name", "overflow-refolded"],
)
def test_a_signal_handler_entering_a_stage_while_its_step_folds_neither_hangs_nor_double_counts(
    name: str, cap: int, counts: dict[str, int], overflow: int
) -> None:
    """The handler's entry ends inside the main thread's fold: it makes its node (which takes the
    step's lock) and folds, the very node being folded when both are the overflow. Before the
    fix the step's lock was not re-entrant and the process hung there; each entry is counted
    once (a re-entered fold of the same node would count its items twice)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_HANDLER_IN_A_FOLD), name, str(cap)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{counts!r} {overflow}"
