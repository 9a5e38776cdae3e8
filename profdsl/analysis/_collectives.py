"""Culprit, not victim: at each collective of a traced step, which rank arrived last and how long
it made the others wait (``profdsl summary --stragglers``; ``docs/ledger.md``).

A collective makes every rank of its group wait for the last to arrive, so their stage times come
out about equal and a wall-time comparison cannot tell the rank that held the others up. The
traces can: each rank's event of the collective lasts from its own arrival to the collective's
end.

**Which events.** gloo's CPU events ``gloo:<op>`` (``gloo:all_reduce``, ``gloo:barrier``, ...,
complete events on gloo's worker thread), whose duration is the rank's wait. torch 2.13's gloo
events carry no sequence number or process group, so the ``i``-th collective of a role's step on
each rank is taken to be the same collective (SPMD), matched over the ranks that traced that
step; where the ranks' sequences differ (a count, or an op's name), matching stops there and
says so. Each collective sits in the outermost stage of its trace running when it began (the
one that began last: the ledger's rule).

On a GPU run, NCCL's kernels (:mod:`profdsl.analysis._nccl`; ``ncclDevKernel_<Op>_...`` or
``ncclKernel_<Op>_...``; op ``nccl:<Op>``): a kernel lasts from when it began waiting for its
peers to the collective's end, the rank's wait. Its process group and sequence number come from
its own args (``Process Group Name``, ``Seq``) or from torch's ``record_param_comms`` CPU event
around its launch (the ``cuda_runtime`` event of the same ``correlation``, on the same thread);
kernels that have them are matched across the ranks that hold the same group, sequence number
and op, the others by their order, apart from gloo's. A kernel sits in the stage running when
it was launched (else when it began). A trace holding both (gloo for CPU tensors, NCCL for GPU
ones) gives both.

**The rule: the shortest wait arrived last.** The rank that arrived last waits least: its
lateness is the median of the other ranks' waits less its own. This needs no clock shared by
the hosts (each wait is measured on its own host), which a comparison of arrival times would;
it counts the lateness short by however much longer the late rank's own part of the collective
took than the others' after it arrived (on a busy CPU, a few milliseconds).

**Per step and stage**, each rank's lateness is summed over the collectives it arrived last at.
The rank with the largest sum is the **culprit** when its sum exceeds the median rank's by at
least the threshold (``--late-ms``): a rank late at every collective stands out, while ranks
late in turn by scheduling jitter share it.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from profdsl.analysis._catalog import Artifact, number
from profdsl.analysis._load import scan_artifacts
from profdsl.analysis._model import Span, StageModel
from profdsl.analysis._nccl import NcclEvents
from profdsl.analysis._reader import TraceError, events

__all__ = ["PREFIXES", "Arrival", "Blame", "Match", "blame", "load_matches", "match"]

#: The events that are one rank's wait at a collective, by name prefix.
PREFIXES = ("gloo:",)
#: A collective outside any stage of its trace.
NO_STAGE = "(outside any stage)"

Key = tuple[str, "int | None"]  # role, step


@attrs.frozen
class Arrival:
    """One rank's event of one collective: its op, when it began (wall-clock µs, its host's
    clock), how long the rank waited (µs), and the stage it sat in; ``key``: its process group
    and sequence number where the trace says them (NCCL), which match it across ranks."""

    rank: int
    name: str
    start_us: float
    wait_us: float
    stage: str
    key: tuple[str, int] | None = None


@attrs.frozen
class Match:
    """One collective across the ranks that traced it: the rank that arrived last (the shortest
    wait) and its lateness (the others' median wait less its own, µs)."""

    role: str
    step: int | None
    index: int
    stage: str
    arrivals: tuple[Arrival, ...]
    last: int
    late_us: float


@attrs.frozen
class Blame:
    """One role's stage at one step: its matched ``collectives``, each rank's summed lateness
    (µs; 0 for a rank never last), and the culprit (None: no rank stands out by the
    threshold) with how far its sum exceeds the median rank's and at how many of the
    collectives it arrived last."""

    role: str
    step: int | None
    stage: str
    collectives: int
    late_us: Mapping[int, float]
    culprit: int | None
    excess_us: float
    culprit_last_at: int = 0

    def as_dict(self, threshold_ms: float) -> dict[str, Any]:
        """JSON-friendly form (``profdsl summary --stragglers --json``)."""
        return {
            "role": self.role,
            "step": self.step,
            "stage": self.stage,
            "collectives": self.collectives,
            "ranks": len(self.late_us),
            "late_ms": {str(rank): round(us / 1000, 3) for rank, us in sorted(self.late_us.items())},
            "culprit": self.culprit,
            "culprit_last_at": self.culprit_last_at,
            "excess_ms": round(self.excess_us / 1000, 3),
            "threshold_ms": threshold_ms,
        }


def _last(arrivals: Sequence[Arrival]) -> tuple[int, float]:
    """The rank that waited least (the lowest such rank on a tie) and the others' median wait
    less its own."""
    last = min(arrivals, key=lambda a: (a.wait_us, a.rank))
    others = [a.wait_us for a in arrivals if a is not last]
    return last.rank, statistics.median(others) - last.wait_us


def match(role: str, step: int | None, per_rank: Mapping[int, Sequence[Arrival]]) -> tuple[list[Match], str | None]:
    """The collectives of a role's step across its ranks: those with a ``key`` (process group,
    sequence number) by it, over the ranks that hold it; the others by their order on each rank
    (in time order), each backend's (``gloo:``, ``nccl:``) apart; and a note when the ranks'
    sequences differ (matched up to there)."""
    keyed: dict[tuple[tuple[str, int], str], list[Arrival]] = defaultdict(list)
    backends = set()
    for arrivals in per_rank.values():
        for a in arrivals:
            if a.key is None:
                backends.add(_backend(a))
            else:
                keyed[(a.key, a.name)].append(a)
    found: list[Match] = []
    notes = []
    for backend in sorted(backends):  # every rank of the step, so that one without the backend's events says so
        mine = {
            r: [a for a in arrivals if a.key is None and _backend(a) == backend] for r, arrivals in per_rank.items()
        }
        here, note = _by_order(role, step, mine, len(found))
        found += here
        notes += [note] if note else []
    for key in sorted(keyed, key=lambda k: min(a.start_us for a in keyed[k])):
        arrivals = sorted(keyed[key], key=lambda a: a.rank)
        if len({a.rank for a in arrivals}) == len(arrivals) > 1:
            found.append(_match(role, step, len(found), arrivals))
    return found, "; ".join(notes) or None


def _backend(arrival: Arrival) -> str:
    return arrival.name.partition(":")[0]


def _match(role: str, step: int | None, index: int, here: Sequence[Arrival]) -> Match:
    last, late = _last(here)
    stage = Counter(a.stage for a in here).most_common(1)[0][0]
    return Match(role, step, index, stage, tuple(here), last, late)


def _by_order(
    role: str, step: int | None, per_rank: Mapping[int, Sequence[Arrival]], first: int
) -> tuple[list[Match], str | None]:
    """The ``i``-th collective on each rank taken as the same one (numbered from ``first``)."""
    ranks = sorted(per_rank)
    if len(ranks) < 2:
        return [], None
    sequences = [sorted(per_rank[r], key=lambda a: a.start_us) for r in ranks]
    found: list[Match] = []
    note = None
    for index in range(max(len(s) for s in sequences)):
        here = [s[index] for s in sequences if index < len(s)]
        names = {a.name for a in here}
        if len(here) < len(ranks) or len(names) > 1:
            ops = ", ".join(
                f"rank {r}: {s[index].name if index < len(s) else 'none'}" for r, s in zip(ranks, sequences)
            )
            note = (
                f"{role} step {step}: the ranks' collectives differ at the {_nth(index + 1)} ({ops}): "
                f"matched up to there"
            )
            break
        found.append(_match(role, step, first + index, here))
    return found, note


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def blame(matches: Iterable[Match], threshold_us: float) -> list[Blame]:
    """Per (role, step, stage): each rank's summed lateness and the culprit, if one stands out
    by ``threshold_us`` over the median rank."""
    groups: dict[tuple[str, int | None, str], list[Match]] = defaultdict(list)
    for found in matches:
        groups[(found.role, found.step, found.stage)].append(found)
    result = []
    for (role, step, stage), items in groups.items():
        late = {a.rank: 0.0 for m in items for a in m.arrivals}
        for m in items:
            late[m.last] += m.late_us
        worst = max(sorted(late), key=lambda r: late[r])
        excess = late[worst] - statistics.median(late.values())
        culprit = worst if excess >= threshold_us else None
        last_at = sum(1 for m in items if m.last == culprit)
        result.append(Blame(role, step, stage, len(items), late, culprit, excess, last_at))
    return sorted(result, key=lambda b: (b.role, number(b.step), b.stage))


def _stage_at(spans: Sequence[Span], ts: float) -> str:
    """The outermost stage running at ``ts`` that began last (none: :data:`NO_STAGE`)."""
    running = [s for s in spans if s.start_us <= ts < s.end_us]
    return max(running, key=lambda s: (s.start_us, -s.end_us)).stage if running else NO_STAGE


def _arrivals(folder: str, artifact: Artifact, rank: int, base_us: float, spans: Sequence[Span]) -> list[Arrival]:
    """The collective events of one trace of ``rank``: gloo's, and NCCL's kernels (raises
    TraceError as the streaming reader does)."""
    found = []
    nccl = NcclEvents()
    for event in events(os.path.join(folder, str(artifact.path))):
        name = event.get("name")
        if event.get("ph") != "X" or not isinstance(name, str):
            continue
        if name.startswith(PREFIXES):
            start = base_us + float(event.get("ts", 0))
            found.append(Arrival(rank, name, start, float(event.get("dur", 0)), _stage_at(spans, start)))
        else:
            nccl.feed(name, event)
    for op, ts, wait, key, launched in nccl.kernels():
        found.append(Arrival(rank, op, base_us + ts, wait, _stage_at(spans, base_us + launched), key))
    return found


def load_matches(folder: str, artifacts: Sequence[Artifact], skipped: list[str]) -> tuple[list[Match], list[str]]:
    """Every matched collective of ``folder``'s training traces, and the notes on what could not
    be matched; traces that cannot be read are left out, their reasons appended to ``skipped``."""
    scans = scan_artifacts(folder, [a for a in artifacts if a.kind == "trace"], skipped)
    base = {id(artifact): scan.base_ns / 1000 for artifact, scan in scans}
    per_step: dict[Key, dict[int, list[Arrival]]] = defaultdict(lambda: defaultdict(list))
    for artifact, spans in StageModel(scans).spans():
        if artifact.rank is None:
            continue
        try:
            found = _arrivals(folder, artifact, artifact.rank, base[id(artifact)], spans)
        except TraceError as exc:
            skipped.append(str(exc))
            continue
        per_step[(artifact.role or "unknown", artifact.step)][artifact.rank] += found
    matches: list[Match] = []
    notes = []
    for (role, step), per_rank in sorted(per_step.items(), key=lambda kv: (kv[0][0], number(kv[0][1]))):
        found_here, note = match(role, step, per_rank)
        matches += found_here
        notes += [note] if note else []
    return matches, notes
