"""A run's culprits at collectives, in a few words: per role and stage, the ranks that made the
others wait and at which traced steps (:mod:`profdsl.analysis._collectives`), for ``profdsl diff``
and for the follow-up line of a capture an alert asked for.

Examples:
    >>> from profdsl.analysis._collectives import Blame
    >>> items = [Blame("actor", s, "update_actor", 1, {0: 0.0, 2: 5e4}, 2, 5e4, 1) for s in (3, 4)]
    >>> culprit_lines(items)
    ['actor update_actor: rank 2 at steps 3, 4 (50.000 ms over the median rank at most)']
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence

from profdsl.analysis._catalog import FolderError, catalog, number
from profdsl.analysis._collectives import Blame, blame, load_matches
from profdsl.collect._manifest import read_records
from profdsl.core._log import printable
from profdsl.core._units import ms_text

__all__ = ["DEFAULT_LATE_MS", "NO_COLLECTIVE", "NO_TRACE", "await_traces", "culprit_lines", "follow_up", "run_culprits"]

#: A rank is named the culprit of a stage when its lateness exceeds the median rank's by this much.
DEFAULT_LATE_MS = 10.0

#: Why a run has no culprit to name.
NO_TRACE = "no trace"
NO_COLLECTIVE = (
    "no collective in its traces (gloo's CPU events, NCCL's kernels): wall-time alerts cannot tell the culprit "
    "from its victims when collectives equalise their stage times"
)


def run_culprits(
    folder: str | os.PathLike[str], threshold_us: float, steps: Collection[int] | None = None
) -> tuple[list[Blame] | None, str | None]:
    """The blame of every (role, step, stage) with collectives in ``folder``'s traces (of
    ``steps``, when given), or None and why: no readable trace, or no collective in them."""
    try:
        found = catalog(folder)
    except FolderError:
        return None, NO_TRACE
    traces = [a for a in found.artifacts if a.kind == "trace" and (steps is None or a.step in steps)]
    if not traces:
        return None, NO_TRACE
    matches, _ = load_matches(os.fspath(folder), traces, [])
    if not matches:
        return None, NO_COLLECTIVE
    return blame(matches, threshold_us), None


def await_traces(
    folder: str | os.PathLike[str], step: int, ranks: Collection[int], timeout_s: float, *, settle_s: float = 1.0
) -> set[int]:
    """Wait until ``folder``'s manifest holds a trace record of ``step`` from each of ``ranks``
    and its trace records of ``step`` have not changed for ``settle_s`` (a rank's other roles'
    traces: their count is not known here), or ``timeout_s`` passed. Returns the ranks still
    without one. Reads the manifest a few times a second; never raises."""
    deadline = time.monotonic() + timeout_s
    seen: Counter[tuple[int | None, str | None]] = Counter()  # (rank, path) -> its records, whatever their order
    since = time.monotonic()
    while True:
        try:
            found = Counter((r.rank, r.path) for r in read_records(folder) if r.kind == "trace" and r.step == step)
        except OSError:
            found = Counter()
        if found != seen:
            seen, since = found, time.monotonic()
        missing = set(ranks) - {rank for rank, _ in seen if rank is not None}
        now = time.monotonic()
        if (not missing and seen and now - since >= settle_s) or now >= deadline:
            return missing
        time.sleep(0.2)


def follow_up(
    folder: str | os.PathLike[str], step: int, threshold_ms: float = DEFAULT_LATE_MS, missing: Collection[int] = ()
) -> list[str]:
    """What the capture of ``step`` says about who made the others wait: one line per culprit
    its traces name, or one line why they name none (``step 6's capture: ...``); ``missing``:
    ranks that traced the step but whose traces were not written in time (said)."""
    items, why = run_culprits(folder, threshold_ms * 1000, steps={step})
    head = f"step {step}'s capture"
    if missing:
        head += f" (no trace of rank(s) {', '.join(map(str, sorted(missing)))} written yet)"
    if items is None and why == NO_TRACE:
        return [
            f"{head}: no trace of it is readable here ({os.fspath(folder)}); where they are, "
            f"`profdsl summary DIR --stragglers` names the rank that made the others wait"
        ]
    if items is None:
        return [f"{head}: {why}"]
    named = culprit_lines(items)
    if not named:
        return [
            f"{head}: at its collectives no rank arrived last by {threshold_ms:g} ms over the median rank: "
            "the time went to the ranks' own work, not to waiting for one of them"
        ]
    return [f"{head} names the culprit, not its victims: {line}" for line in named]


def culprit_lines(items: Sequence[Blame]) -> list[str]:
    """Per role, stage and culprit: the steps it made the others wait at, and its largest excess
    over the median rank; ``[]`` when no rank stands out anywhere. Each line is one line, its
    control characters escaped (:func:`~profdsl.core._log.printable`)."""
    found: dict[tuple[str, str, int], list[Blame]] = defaultdict(list)
    for item in items:
        if item.culprit is not None:
            found[(item.role, item.stage, item.culprit)].append(item)
    lines = []
    for (role, stage, rank), blames in sorted(found.items()):
        steps = ", ".join(str(b.step) for b in sorted(blames, key=lambda b: number(b.step)))
        most = max(b.excess_us for b in blames) / 1000
        plural = "s" if len(blames) > 1 else ""
        lines.append(  # role and stage come from the files: escaped before a driver logs them
            printable(
                f"{role} {stage}: rank {rank} at step{plural} {steps} ({ms_text(most)} ms over the median rank at most)"
            )
        )
    return lines
