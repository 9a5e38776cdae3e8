"""The Profiler's lifecycle table (profdsl/_runtime/lifecycle.py): a row for every call from
every phase, and each row's outcome through the public API (its state, its step, what it logs,
what it writes)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from profdsl import Profiler
from profdsl._runtime.lifecycle import TABLE, Call, Phase, State

from .profiling import config
from .traces import parsed

pytest.importorskip("torch")


def test_every_call_from_every_phase_has_a_row() -> None:
    """``start(S)`` while S is open only arises in a numbered step; every other call has a row
    from every phase."""
    expected = {(phase, call) for phase in Phase for call in Call if call is not Call.START_OPEN}
    expected.add((Phase.IN_STEP, Call.START_OPEN))
    assert set(TABLE) == expected


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lifecycle's log lines: profdsl's at INFO and above, but the writer's line naming where
    the traces go (tests/test_where_traces_went.py), which is no row's."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "profdsl" and r.levelno >= logging.INFO and " traces go into " not in r.getMessage()
    ]


class TestRows:
    """Each row's outcome (log lines exactly as before the table)."""

    def test_outside_a_step(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.INFO, logger="profdsl"):
            assert profiler.stop() is None
        assert _warnings(caplog) == ["[profdsl rank 0] actor: stop() without start() ignored"]
        assert (profiler.state, profiler.current_step) == (State.IDLE, None)
        profiler.close()
        assert profiler.state is State.CLOSED

    def test_start_while_another_step_is_open_ends_it(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        profiler = Profiler(config(tmp_path, steps=[1, 2]), role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.INFO, logger="profdsl"):
            profiler.start(1)
            profiler.start(2)
            assert (profiler.state, profiler.current_step) == (State.RECORDING, 2)
            profiler.start(2)
            assert (profiler.state, profiler.current_step) == (State.RECORDING, 2)
            profiler.stop()
        profiler.close()
        assert _warnings(caplog) == [
            "[profdsl rank 0] actor: start(2) while step 1 is open; stopping it",
            "[profdsl rank 0] actor: start(2) while step 2 is already open: ignored (the step goes on)",
        ]
        assert sorted(name.step for name, _ in parsed(tmp_path)) == [1, 2]

    def test_a_step_with_no_number(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A step whose number is no step number is open (its stop is no misuse) but profiles
        nothing; a numbered step may follow it without a stop."""
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.INFO, logger="profdsl"):
            profiler.start("3")  # type: ignore[arg-type]
            assert (profiler.state, profiler.current_step, profiler.is_profiling) == (State.IDLE, None, False)
            profiler.stop()
            profiler.start("3")  # type: ignore[arg-type]
            profiler.start(1)
            assert (profiler.state, profiler.current_step) == (State.RECORDING, 1)
            profiler.stop()
        profiler.close()
        assert not any("without start()" in line for line in _warnings(caplog))
        assert [name.step for name, _ in parsed(tmp_path)] == [1]

    def test_closed(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
        profiler.start(1)
        profiler.close()
        with caplog.at_level(logging.INFO, logger="profdsl"):
            profiler.start(2)
            assert profiler.stop() is None
            profiler.close()
        assert _warnings(caplog) == ["[profdsl rank 0] actor: start(2) after close() ignored"]
        assert (profiler.state, profiler.current_step) == (State.CLOSED, None)
        assert [name.step for name, _ in parsed(tmp_path)] == [1]
