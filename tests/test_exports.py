"""The background exports (issue 12): bounded, ordered before the hook, never lost."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from profdsl.collect.export import PendingTrace, TraceLabel
from profdsl.collect.manifest import read_manifest
from profdsl.runtime import exports as exports_module
from profdsl.runtime.exports import Exports
from profdsl.runtime.hooks import HookRendezvous


class Member:
    """A role of the hook's round (weakly referenced there)."""


def pending(save_path: Path, step: int) -> PendingTrace:
    label = TraceLabel(role="actor", stage=None, step=step, rank=0, world_size=1,
                       save_path=str(save_path), host="h", pid=1, config_hash="c")
    return PendingTrace(label=label, window=None, time_ms=0, extra=None,
                        events=str(save_path / f".events-{step}"))


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[int]]:
    """``finish`` blocks until the gate opens, and notes the steps it finished, in order."""
    gate, done = threading.Event(), []

    def finish(trace: PendingTrace) -> None:
        assert gate.wait(60)
        done.append(trace.label.step or 0)

    monkeypatch.setattr(exports_module, "finish", finish)
    return gate, done


def test_at_most_limit_in_flight_and_the_next_waits(tmp_path: Path,
                                                   gated: tuple[threading.Event, list[int]]) -> None:
    gate, done = gated
    queue = Exports(HookRendezvous(), limit=2)
    queue.submit(pending(tmp_path, 1))
    queue.submit(pending(tmp_path, 2))
    third = threading.Thread(target=queue.submit, args=(pending(tmp_path, 3),))
    third.start()
    third.join(0.5)
    assert third.is_alive()  # waits for a slot: never more than 2 in flight
    gate.set()
    third.join(60)
    assert not third.is_alive()
    assert queue.wait(60)
    assert done == [1, 2, 3]


def test_hook_runs_after_every_export(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    gate, done = gated
    hooks = HookRendezvous()
    queue = Exports(hooks)
    member, seen = Member(), []
    hooks.join(str(tmp_path), member)
    queue.submit(pending(tmp_path, 1))
    queue.submit(pending(tmp_path, 2))

    def job(first: bool, steps: list[int]) -> None:
        seen.append(list(done))

    hooks.arrive(str(tmp_path), member, job, [1, 2])
    assert seen == []  # the exports are still running
    gate.set()
    assert queue.wait(60)
    assert seen == [[1, 2]]


def test_exports_given_up_at_exit_are_recorded_incomplete(tmp_path: Path,
                                                          gated: tuple[threading.Event, list[int]]) -> None:
    gate, _ = gated
    queue = Exports(HookRendezvous())
    queue.submit(pending(tmp_path, 7))
    assert not queue.wait(0.2)
    left = queue.give_up()
    assert [p.label.step for p in left] == [7]
    records: list[dict[str, Any]] = read_manifest(tmp_path)
    assert [(r["step"], r["status"]) for r in records] == [(7, "incomplete")]
    assert "background" in records[0]["reason"]
    gate.set()  # the thread finishes late: nothing more is recorded or released twice
    assert queue.wait(60)
