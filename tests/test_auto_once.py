"""One slow step, one capture: a rank's own automatic capture of step S and the driver's
cross-rank one for the same step (both fire on Ray with ``auto``) make one trace and one hook
run on that rank, and no hook record claims a step for a request with no trace there."""

from __future__ import annotations

from pathlib import Path

import pytest

from profdsl import FinishHook, Profiler, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.records.requests import CaptureRequest

from .profiling import config, records, work

pytest.importorskip("torch")


def test_two_automatic_requests_for_one_step_are_one_capture(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cmd = f'echo "$PROFDSL_REQUEST $PROFDSL_STEPS" >> {runs}'
    profiler = Profiler(
        config(tmp_path / "p", steps=[], finish_hook=FinishHook(cmd=cmd)), role="actor", rank=1, world_size=2
    )
    for step in range(6):
        if step == 2:  # what step 2's slowness made: the rank's own request, then the driver's
            PROCESS.inbox.deliver(
                CaptureRequest(id="auto-r1-s3", steps=1, ranks=(1,), at_step=3, reason="own", source="auto")
            )
            PROCESS.inbox.deliver(
                CaptureRequest(id="auto-ranks-s3", steps=1, ranks=(0, 1), at_step=3, reason="driver", source="auto")
            )
        with profiler.step(step), profile_stage("update_actor", profiler=profiler):
            work()
    profiler.close()
    traces = [r for r in records(tmp_path / "p", "trace") if r["status"] == "ok"]
    assert [(r["step"], r["capture"]["request"]) for r in traces] == [(3, "auto-r1-s3")]
    assert runs.read_text().splitlines() == ["auto-r1-s3 3"]
    hooks = records(tmp_path / "p", "hook")
    assert [(h["status"], h["capture"]["request"]) for h in hooks] == [("ok", "auto-r1-s3")]


def test_a_request_that_is_not_automatic_is_its_own_capture(tmp_path: Path) -> None:
    """A user's request for the same step is not merged into an automatic one: it asked."""
    runs = tmp_path / "runs"
    cmd = f'echo "$PROFDSL_REQUEST" >> {runs}'
    profiler = Profiler(
        config(tmp_path / "p", steps=[], finish_hook=FinishHook(cmd=cmd)), role="actor", rank=1, world_size=2
    )
    for step in range(5):
        if step == 2:
            PROCESS.inbox.deliver(CaptureRequest(id="auto-r1-s3", steps=1, ranks=(1,), at_step=3, source="auto"))
            assert profiler.request(1, ranks=[1], at_step=3) is not None
        with profiler.step(step), profile_stage("update_actor", profiler=profiler):
            work()
    profiler.close()
    assert len(runs.read_text().splitlines()) == 2
