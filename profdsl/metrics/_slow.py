"""Slow steps, slow ranks and stragglers, found in the always-on stage times (pure: numbers in,
findings out; no clock, no I/O).

- :class:`SlowSteps` (one role of one rank, ``ProfilerConfig.auto``): a watched stage that took
  more than ``slower_than`` times the median of the same rank's previous ``baseline_steps``
  untraced steps calls for a capture of the next step.
- :class:`SlowRanks` (a Ray trainer's driver, ``ProfilerConfig.auto``): within one step, a rank
  whose stage took more than ``slower_than`` times the median of the other ranks calls for a
  capture of the next step on that rank and on a typical one.
- :class:`StragglerWatch` (the driver, ``Metrics.stragglers``): a rank that took more than
  ``factor`` times the other ranks' median in ``consecutive`` steps in a row begins an
  *episode*, reported once; the episode ends at the first step it is not slow.

Traced steps are left out of every baseline and never trigger: profiling slows them down.
Both rank rules are one (:func:`slow_ranks`): a rank is slow in a stage when it took more than
``factor`` times the median of the *other* ranks, so that two ranks can be compared too (with two
ranks, the median of all is their mean, which a rank can never exceed twofold), and at least
``min_seconds`` (short stages jitter).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Collection, Iterable, Mapping

import attrs

from profdsl.config import AutoCapture, Stragglers
from profdsl.core._units import ms_text
from profdsl.metrics._timings import StepTimings
from profdsl.metrics._tree import segment

__all__ = [
    "RankTimes",
    "SlowRank",
    "SlowRanks",
    "SlowStage",
    "SlowSteps",
    "StragglerAlert",
    "StragglerWatch",
    "rank_times",
    "slow_ranks",
    "watched",
]

#: Per (role, stage path): each rank's seconds in one step.
RankTimes = Mapping[tuple[str, str], Mapping[int, float]]


def watched(path: str, stages: Collection[str]) -> bool:
    """Whether stage ``path`` is watched: every path when ``stages`` is empty, else a path
    named there, or whose own name (its last segment) is.

    Examples:
        >>> watched("update_actor/mini_batch", {"mini_batch"}), watched("gen", {"update_actor"})
        (True, False)
    """
    return not stages or path in stages or path.rsplit("/", 1)[-1] in {segment(s) for s in stages}


def _slower(seconds: float, median: float, factor: float, min_seconds: float) -> bool:
    """Whether ``seconds`` is slow against ``median``: more than ``factor`` times it, and at least
    ``min_seconds``."""
    return median > 0 and seconds >= min_seconds and seconds > factor * median


@attrs.frozen
class SlowStage:
    """A stage of one step that took ``ratio`` times the median of ``baseline`` (the first and
    last step of the baseline)."""

    step: int
    stage: str
    seconds: float
    median_s: float
    baseline: tuple[int, int]

    @property
    def ratio(self) -> float:
        """How many times the median it took."""
        return self.seconds / self.median_s

    def reason(self) -> str:
        """One line for logs and records: ``update_actor took 2.3x the median of steps 80-99``."""
        first, last = self.baseline
        return (
            f"{self.stage} took {self.ratio:.1f}x the median of steps {first}-{last} at step {self.step} "
            f"({ms_text(self.seconds * 1e3, 1)} ms against {ms_text(self.median_s * 1e3, 1)} ms)"
        )


class _Budget:
    """A trigger's captures: at most ``auto.max_captures``, and after each (its next step traced)
    ``auto.cooldown_steps`` steps that call for none."""

    def __init__(self, auto: AutoCapture) -> None:
        self.auto = auto
        self.captures = 0
        self._quiet_until = 0  # the first step that may trigger again

    def _may(self, step: int) -> bool:
        return self.captures < self.auto.max_captures and step >= self._quiet_until

    def _spend(self, step: int) -> None:
        self.captures += 1
        self._quiet_until = step + 1 + self.auto.cooldown_steps + 1  # the next step is traced, then quiet


class SlowSteps(_Budget):
    """One rank's rolling-median trigger (see the module docstring).

    Examples:
        >>> from profdsl.config import AutoCapture
        >>> slow = SlowSteps(AutoCapture(baseline_steps=3, cooldown_steps=0))
        >>> [slow.observe(s, {"update": 1.0}) for s in range(3)]
        [None, None, None]
        >>> slow.observe(3, {"update": 2.5}).reason()
        'update took 2.5x the median of steps 0-2 at step 3 (2500.0 ms against 1000.0 ms)'
    """

    def __init__(self, auto: AutoCapture) -> None:
        super().__init__(auto)
        self._windows: dict[str, deque[tuple[int, float]]] = {}

    def observe(self, step: int, stages: Mapping[str, float], *, traced: bool = False) -> SlowStage | None:
        """Step ``step`` ended with these seconds per stage path: the slowest watched stage
        against its baseline, when that calls for a capture of the next step (counted)."""
        if traced:
            return None
        auto = self.auto
        found: SlowStage | None = None
        may = self._may(step)
        for path, seconds in stages.items():
            if not watched(path, auto.stages):
                continue
            window = self._windows.setdefault(path, deque(maxlen=auto.baseline_steps))
            if may and len(window) >= auto.baseline_steps:  # against the steps before this one
                median = statistics.median(s for _, s in window)
                if _slower(seconds, median, auto.slower_than, auto.min_seconds):
                    candidate = SlowStage(step, path, seconds, median, (window[0][0], window[-1][0]))
                    if found is None or (candidate.ratio, path) > (found.ratio, found.stage):
                        found = candidate
            window.append((step, seconds))
        if found is not None:
            self._spend(step)
        return found


@attrs.frozen
class SlowRank:
    """A rank that took ``ratio`` times the other ranks' median in one stage of one step, and
    the rank closest to the median (``typical``), for a capture side by side."""

    step: int
    role: str
    stage: str
    rank: int
    seconds: float
    median_s: float
    typical: int | None

    @property
    def ratio(self) -> float:
        """How many times the other ranks' median it took."""
        return self.seconds / self.median_s

    def ranks(self) -> tuple[int, ...]:
        """The ranks to trace: the slow one and the typical one."""
        return tuple(sorted({self.rank} | ({self.typical} if self.typical is not None else set())))

    def reason(self) -> str:
        """One line for logs and records."""
        typical = f"; rank {self.typical} is typical" if self.typical is not None else ""
        took, median = ms_text(self.seconds * 1e3, 1), ms_text(self.median_s * 1e3, 1)
        return (
            f"{self.role} {self.stage} on rank {self.rank} took {self.ratio:.1f}x the other ranks' median "
            f"at step {self.step} ({took} ms against {median} ms){typical}"
        )


def _typical(times: Mapping[int, float], slow: int) -> int:
    """The rank (not ``slow``: :func:`slow_ranks` compares two ranks at least) whose time is
    closest to the median of all (the lowest on a tie)."""
    median = statistics.median(times.values())
    return min((r for r in times if r != slow), key=lambda r: (abs(times[r] - median), r))


def slow_ranks(
    times: RankTimes, stages: Collection[str], factor: float, min_seconds: float
) -> dict[tuple[str, str, int], tuple[float, float]]:
    """The one slow-rank rule (see the module docstring), of :class:`SlowRanks`
    (``AutoCapture.slower_than``) and :class:`StragglerWatch` (``Stragglers.factor``): per
    (role, stage path, rank) slow in a watched stage, its ratio to the other ranks' median and
    that median.

    Examples:
        >>> slow_ranks({("actor", "update"): {0: 1.0, 1: 1.1, 2: 3.0}}, (), 2.0, 0.0)
        {('actor', 'update', 2): (2.857142857142857, 1.05)}
    """
    found: dict[tuple[str, str, int], tuple[float, float]] = {}
    for (role, stage), by_rank in times.items():
        if len(by_rank) < 2 or not watched(stage, stages):
            continue
        for rank, seconds in by_rank.items():
            median = statistics.median(s for r, s in by_rank.items() if r != rank)
            if _slower(seconds, median, factor, min_seconds):
                found[(role, stage, rank)] = (seconds / median, median)
    return found


class SlowRanks(_Budget):
    """The driver's cross-rank trigger (see the module docstring)."""

    def observe(self, step: int, times: RankTimes, *, traced: bool = False) -> SlowRank | None:
        """The slowest rank of step ``step`` (by ratio, over the watched stages), when it calls
        for a capture of the next step (counted)."""
        auto = self.auto
        if traced or not self._may(step):
            return None
        slow = slow_ranks(times, auto.stages, auto.slower_than, auto.min_seconds)
        if not slow:
            return None
        # the slowest by ratio; on a tie the later role and stage, and in one stage the lower rank
        (role, stage, rank), (_, median) = max(slow.items(), key=lambda i: (i[1][0], *i[0][:2], -i[0][2]))
        by_rank = times[(role, stage)]
        self._spend(step)
        return SlowRank(step, role, stage, rank, by_rank[rank], median, _typical(by_rank, rank))


@attrs.frozen
class StragglerAlert:
    """A straggler episode of ``rank`` in ``role``'s ``stage``: ``factor`` (its time over the
    other ranks' median, at the last slow step), ``steps`` (the first and last step of the
    episode so far), ``count`` (its slow steps: traced steps in between do not count, nor end
    it), and whether it is going on (``active``; False: it just ended). ``silent``: its rank
    stopped reporting at ``steps[1]`` (the episode goes on: that is no recovery)."""

    role: str
    stage: str
    rank: int
    factor: float
    steps: tuple[int, int]
    count: int
    active: bool = True
    silent: bool = False

    def message(self) -> str:
        """One line for the log."""
        first, last = self.steps
        if self.silent:
            return (
                f"straggler: rank {self.rank} in {self.role} {self.stage} stopped reporting at step {last} "
                f"(slow since step {first}, last {self.factor:.1f}x the other ranks' median): not recovered"
            )
        if not self.active:
            span = f"steps {first}-{last}" if last > first else f"step {first}"
            slow = span if self.count == last - first + 1 else f"{self.count} of {span}, the others traced"
            return (
                f"straggler episode over: rank {self.rank} in {self.role} {self.stage} (slow in {slow}) "
                "is back within the other ranks' median"
            )
        return (
            f"straggler: rank {self.rank} took {self.factor:.1f}x the other ranks' median in {self.role} "
            f"{self.stage} for {self.count} consecutive steps (steps {first}-{last})"
        )


class StragglerWatch:
    """Straggler episodes over the driver's steps (see the module docstring). Steps must be
    observed in increasing order; a step not observed ends every streak."""

    def __init__(self, config: Stragglers) -> None:
        self.config = config
        # per (role, stage, rank): first and last step of the streak, its slow steps, the last factor
        self._streaks: dict[tuple[str, str, int], tuple[int, int, int, float]] = {}
        self._alerted: set[tuple[str, str, int]] = set()
        self._silent: set[tuple[str, str, int]] = set()  # alerted, and not reporting since

    def observe(self, step: int, times: RankTimes, *, traced: bool = False) -> list[StragglerAlert]:
        """Step ``step``'s times: the episodes that began (reached ``consecutive`` slow steps)
        and those that ended (``active`` False) with it, and those whose rank stopped reporting
        (``silent``, once). A traced step (slowed down by profiling), and for one rank a step it
        did not report, carry its streak over without counting."""
        if traced:
            for key, (first, _, count, factor) in self._streaks.items():
                self._streaks[key] = (first, step, count, factor)
            return []
        config = self.config
        slow = {
            key: ratio
            for key, (ratio, _) in slow_ranks(times, config.stages, config.factor, config.min_seconds).items()
        }
        alerts = []
        for key, (first, last, count, factor) in list(self._streaks.items()):
            role, stage, rank = key
            if step == last + 1 and rank not in times.get((role, stage), {}):  # it did not report
                self._streaks[key] = (first, step, count, factor)  # carried over, as a traced step
                if key in self._alerted and key not in self._silent:
                    self._silent.add(key)
                    alerts.append(StragglerAlert(*key, factor=factor, steps=(first, step), count=count, silent=True))
                continue
            self._silent.discard(key)
            if key not in slow or step != last + 1:
                del self._streaks[key]
                if key in self._alerted:
                    self._alerted.discard(key)
                    alerts.append(StragglerAlert(*key, factor=factor, steps=(first, last), count=count, active=False))
        for key, ratio in slow.items():
            first, _, count, _ = self._streaks.get(key, (step, step, 0, ratio))
            self._streaks[key] = (first, step, count + 1, ratio)
            if count + 1 >= config.consecutive and key not in self._alerted:
                self._alerted.add(key)
                alerts.append(StragglerAlert(*key, factor=ratio, steps=(first, step), count=count + 1))
        return alerts

    def active(self) -> list[StragglerAlert]:
        """The episodes going on, as of the last step observed."""
        return [
            StragglerAlert(*key, factor=factor, steps=(first, last), count=count)
            for key, (first, last, count, factor) in sorted(self._streaks.items())
            if key in self._alerted
        ]


def rank_times(timings: Iterable[StepTimings]) -> dict[tuple[str, str], dict[int, float]]:
    """Per (role, stage path) each rank's seconds, from the ``StepTimings`` of one step."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for item in timings:
        for path, timing in item.stages.items():
            out.setdefault((item.role, path), {})[item.rank] = timing.total_s
    return out
