"""Tests for `profdsl.schedule`: torch is the oracle for actions; windows are checked both
against a scan of torch's actions and against torch-free invariants."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl.config import Schedule
from profdsl.core._schedule import cycle_of
from profdsl.errors import ConfigError
from profdsl.schedule import Action, action_at, recorded_windows

from .strategies import schedules

torch_profiler = pytest.importorskip("torch.profiler")

counts = st.integers(min_value=0, max_value=60)


def torch_schedule(schedule: Schedule):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():  # "won't be using warmup" when warmup == 0
        warnings.simplefilter("ignore", UserWarning)
        return torch_profiler.schedule(
            skip_first=schedule.skip_first,
            wait=schedule.wait,
            warmup=schedule.warmup,
            active=schedule.active,
            repeat=schedule.repeat,
        )


def torch_actions(schedule: Schedule, n: int) -> list[str]:
    fn = torch_schedule(schedule)
    return [fn(i).name for i in range(n)]


def windows_by_scanning_torch(schedule: Schedule, n: int) -> list[tuple[int, int]]:
    """Oracle: replay torch's actions; a trace closes after RECORD_AND_SAVE or when recording
    stops (including the end of the stage); an opened window that recorded nothing is no file."""
    windows: list[tuple[int, int]] = []
    first = None
    for i, action in enumerate(torch_actions(schedule, n)):
        if action in ("RECORD", "RECORD_AND_SAVE"):
            if first is None:
                first = i
            if action == "RECORD_AND_SAVE":
                windows.append((first, i))
                first = None
        elif first is not None:
            windows.append((first, i - 1))
            first = None
    if first is not None:
        windows.append((first, n - 1))
    return windows


class TestActionAt:
    """Tests for `action_at`."""

    @given(schedules, counts)
    def test_matches_torch_profiler_schedule(self, schedule: Schedule, n: int) -> None:
        """For every mini-batch, the action equals what torch.profiler.schedule returns."""
        assert [action_at(schedule, i).name for i in range(n)] == torch_actions(schedule, n)

    def test_members_mirror_torch_enum(self) -> None:
        """Each Action is a torch ProfilerAction member with the same name and value."""
        for action in Action:
            assert torch_profiler.ProfilerAction[action.name].value == action.value

    @pytest.mark.parametrize("bad", [-1, 1.0, "3", True, None])
    def test_bad_index_is_refused(self, bad: object) -> None:
        """A negative or non-integer mini-batch index raises ConfigError naming it."""
        with pytest.raises(ConfigError, match="mini-batch index must be an integer >= 0"):
            action_at(Schedule(), bad)  # type: ignore[arg-type]


class TestRecordedWindows:
    """Tests for `recorded_windows`."""

    def test_verl_b1_no_duplicate_trailing_window(self) -> None:
        """active=2 over 4 mini-batches writes mb0-1 and mb2-3 once each (verl B1 wrote mb2-3 twice)."""
        assert recorded_windows(Schedule(active=2), 4) == [(0, 1), (2, 3)]

    def test_verl_b2_no_window_for_warmup_only(self) -> None:
        """skip 1, wait 1, warmup 1, active 2 over 3 mini-batches records nothing, so no file
        (verl B2 wrote an empty file labelled mb2)."""
        assert recorded_windows(Schedule(skip_first=1, wait=1, warmup=1, active=2), 3) == []

    def test_truncated_last_cycle_gives_short_window(self) -> None:
        """A cycle cut short by the end of the stage still writes what it recorded."""
        assert recorded_windows(Schedule(wait=1, active=3), 6) == [(1, 3), (5, 5)]

    def test_bounded_repeat(self) -> None:
        """repeat=2 stops after two cycles however many mini-batches run."""
        assert recorded_windows(Schedule(warmup=1, active=1, repeat=2), 100) == [(1, 1), (3, 3)]

    def test_bad_count_is_refused(self) -> None:
        """A negative count raises ConfigError naming it."""
        with pytest.raises(ConfigError, match="number of mini-batches must be an integer >= 0, got -2"):
            recorded_windows(Schedule(), -2)

    @given(schedules, counts)
    def test_matches_a_replay_of_torch_actions(self, schedule: Schedule, n: int) -> None:
        """The windows are exactly the traces a replay of torch's actions would save non-empty."""
        assert recorded_windows(schedule, n) == windows_by_scanning_torch(schedule, n)

    @given(schedules, counts)
    def test_union_is_exactly_the_recorded_mini_batches(self, schedule: Schedule, n: int) -> None:
        """Every recorded mini-batch is in exactly one window, and no window claims another."""
        covered = [i for first, last in recorded_windows(schedule, n) for i in range(first, last + 1)]
        recorded = [i for i in range(n) if action_at(schedule, i).records]
        assert covered == recorded

    @given(schedules, counts)
    def test_windows_are_disjoint_increasing_non_empty(self, schedule: Schedule, n: int) -> None:
        """Windows are non-empty, inside [0, n), and strictly increasing without overlap."""
        windows = recorded_windows(schedule, n)
        for first, last in windows:
            assert 0 <= first <= last < n
        for (_, last), (first, _) in zip(windows, windows[1:]):
            assert last < first
        assert len(set(windows)) == len(windows)

    @given(schedules, counts)
    def test_each_window_lies_in_one_cycle(self, schedule: Schedule, n: int) -> None:
        """A window never spans two cycles and is at most `active` long."""
        for first, last in recorded_windows(schedule, n):
            assert cycle_of(schedule, first) == cycle_of(schedule, last) is not None
            assert last - first + 1 <= schedule.active

    @given(schedules, st.integers(min_value=0, max_value=2000))
    def test_repeat_bounds_window_count(self, schedule: Schedule, n: int) -> None:
        """A bounded repeat bounds the number of windows, whatever n is."""
        if schedule.repeat:
            assert len(recorded_windows(schedule, n)) <= schedule.repeat

    @given(schedules, counts, counts)
    def test_more_mini_batches_only_extend(self, schedule: Schedule, n: int, extra: int) -> None:
        """Running more mini-batches never changes a window that was already complete."""
        short, longer = recorded_windows(schedule, n), recorded_windows(schedule, n + extra)
        assert longer[: max(len(short) - 1, 0)] == short[: max(len(short) - 1, 0)]


def mini_batches_in_real_traces(schedule: Schedule, n: int) -> list[list[int]]:
    """Run the real torch profiler over n mini-batches; list the mini-batches each saved trace
    holds, dropping the empty traces torch also saves (verl's B1/B2 came from exporting those)."""
    import torch

    saved: list[list[int]] = []

    def on_trace_ready(prof: torch.profiler.profile) -> None:
        names = {e.name for e in prof.events() if e.name.startswith("profdsl_mb")}
        saved.append(sorted(int(name.removeprefix("profdsl_mb")) for name in names))

    sched = torch_schedule(schedule)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with torch_profiler.profile(
            activities=[torch_profiler.ProfilerActivity.CPU],
            schedule=sched,
            on_trace_ready=on_trace_ready,
        ) as prof:
            for i in range(n):
                with torch_profiler.record_function(f"profdsl_mb{i}"):
                    torch.ones(2).sum()
                prof.step()
    return [mbs for mbs in saved if mbs]


class TestAgainstRealProfiler:
    """`recorded_windows` against what the real torch profiler writes."""

    @settings(max_examples=25)
    @given(schedules, st.integers(min_value=0, max_value=14))
    def test_each_window_is_one_real_trace(self, schedule: Schedule, n: int) -> None:
        """Each window names exactly the mini-batches one non-empty real trace holds, in order."""
        expected = [list(range(a, b + 1)) for a, b in recorded_windows(schedule, n)]
        assert mini_batches_in_real_traces(schedule, n) == expected
