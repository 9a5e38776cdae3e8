"""A role's parts are built from its resolved plan (issue 31, "one rule, one home"): the node
rank the metrics port needs is resolved once, in the plan, and a capture request taken by a
role becomes steps its step events hand to their tracker (the requests do not drive it)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import pytest

from profdsl._runtime.demand import Demand, DemandSteps
from profdsl._runtime.inbox import Inbox
from profdsl._runtime.plan import resolve
from profdsl._runtime.process import PROCESS
from profdsl._runtime.role_capture import RoleCapture
from profdsl._runtime.writer.rounds import HookRounds
from profdsl.config import Metrics, ProfilerConfig
from profdsl.records.requests import CaptureRequest


class Rounds:
    """The finish-hook rounds, as a role's requests use them: who joined and who arrived."""

    def __init__(self) -> None:
        self.joined: list[str | None] = []
        self.arrived: list[tuple[str | None, tuple[int, ...]]] = []

    def join(self, save_path: str, member: object, *, tag: str | None = None) -> None:
        self.joined.append(tag)

    def arrive(self, save_path: str, member: object, hook: object, steps: Any, **kwargs: Any) -> None:
        self.arrived.append((kwargs.get("tag"), tuple(steps)))


@pytest.mark.parametrize(("local_rank", "expected"), [("3", 3), ("0", 0), (None, 5)])
def test_the_plan_resolves_the_node_rank_with_metrics_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_rank: str | None, expected: int
) -> None:
    """``LOCAL_RANK`` when set (0 included), else the global rank: the metrics port's offset."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    if local_rank is not None:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    config = ProfilerConfig(enable=True, save_path=str(tmp_path), metrics=Metrics(enabled=True))
    assert resolve(config, role="actor", rank=5, world_size=8).local_rank == expected


def test_the_node_rank_is_not_read_with_metrics_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without metrics nothing needs ``LOCAL_RANK``: a malformed one is not even read."""
    monkeypatch.setenv("LOCAL_RANK", "junk-never-read")
    with caplog.at_level(logging.WARNING):
        plan = resolve(ProfilerConfig(enable=True, save_path=str(tmp_path)), role="actor", rank=2, world_size=4)
    assert plan.local_rank == 2
    assert "junk-never-read" not in caplog.text


def test_a_taken_request_becomes_steps_for_the_tracker(tmp_path: Path) -> None:
    """An offered request is taken on any thread; at the next boundary it is resolved into the
    steps to trace (handed back, with its id), and arrived at once its last step ended."""
    plan = resolve(ProfilerConfig(enable=True, save_path=str(tmp_path)), role="actor", rank=0, world_size=1)
    rounds = Rounds()
    inbox = Inbox()
    demand = Demand(plan, rounds=cast(HookRounds, rounds), member=object(), inbox=inbox)
    steps = DemandSteps(demand, plan, RoleCapture(plan, PROCESS.slot), rounds=cast(HookRounds, rounds))
    try:
        answer = inbox.deliver(CaptureRequest(id="r1", steps=2, at_step=7, source="api"))
        assert answer.status == "accepted" and rounds.joined == ["r1"]
        assert steps.poll(3) == [(range(7, 9), "r1")]
        assert steps.poll(4) == []  # resolved once
        for step in (7, 8):
            steps.poll(step)
            steps.ended(step)
        assert rounds.arrived == [("r1", (7, 8))]
    finally:
        steps.finish()
    assert inbox.deliver(CaptureRequest(id="r2", steps=1, source="api")).status != "accepted"  # closed
