"""The background exports: bounded, ordered before the hook, never lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from profdsl import ConfigError, ProfilerConfig, TorchOptions
from profdsl.collect.export import ExportPolicy, PendingTrace, TraceLabel
from profdsl.collect.manifest import read_manifest
from profdsl.runtime import exports as exports_module
from profdsl.runtime.exports import Exports
from profdsl.runtime.hooks import HookRendezvous


class Member:
    """A role of the hook's round (weakly referenced there)."""


def pending(save_path: Path, step: int, **policy: Any) -> PendingTrace:
    label = TraceLabel(role="actor", stage=None, step=step, rank=0, world_size=1,
                       save_path=str(save_path), host="h", pid=1, config_hash="c",
                       export=ExportPolicy(**policy))
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
    queue = Exports(HookRendezvous())
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


def test_in_flight_limit_is_the_traces_own_option(tmp_path: Path,
                                                  gated: tuple[threading.Event, list[int]]) -> None:
    """``TorchOptions.exports_in_flight=1``: a second trace waits for the first."""
    gate, done = gated
    queue = Exports(HookRendezvous())
    queue.submit(pending(tmp_path, 1, in_flight=1))
    second = threading.Thread(target=queue.submit, args=(pending(tmp_path, 2, in_flight=1),))
    second.start()
    second.join(0.5)
    assert second.is_alive()
    gate.set()
    second.join(60)
    assert not second.is_alive()
    assert queue.wait(60)
    assert done == [1, 2]


def test_wait_for_a_slot_counts_as_blocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The training thread waiting for an export slot is blocked by profiling: the time shows in
    the trace's ``blocked_ms`` (a lower bound the test measures itself, never an upper one)."""
    gate, seen = threading.Event(), []

    def finish(trace: PendingTrace) -> None:
        assert gate.wait(60)
        seen.append(dict(trace.extra or {}))

    monkeypatch.setattr(exports_module, "finish", finish)
    queue = Exports(HookRendezvous())
    queue.submit(pending(tmp_path, 1, in_flight=1), blocked_s=0.0)
    called: list[float] = []

    def second() -> None:
        called.append(time.perf_counter())
        queue.submit(pending(tmp_path, 2, in_flight=1), blocked_s=0.004)

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive() and called
    held_ms = (time.perf_counter() - called[0]) * 1000  # the submit waited at least this long
    gate.set()
    thread.join(60)
    assert queue.wait(60)
    assert [sorted(extra) for extra in seen] == [["blocked_ms"], ["blocked_ms"]]
    assert seen[1]["blocked_ms"] >= 4.0 + held_ms / 2  # the 4 ms before it, and its wait


def test_wait_gives_up_after_the_traces_own_timeout(tmp_path: Path,
                                                    gated: tuple[threading.Event, list[int]]) -> None:
    """Without a timeout, ``wait`` waits as long as the longest ``export_timeout_s`` of the traces
    in flight, then gives up (False)."""
    gate, _ = gated
    queue = Exports(HookRendezvous())
    assert queue.wait()  # nothing in flight
    queue.submit(pending(tmp_path, 1, timeout_s=0.2))
    assert not queue.wait()
    gate.set()
    assert queue.wait()


class TestOptions:
    """``exports_in_flight`` and ``export_timeout_s`` are validated when the config is built and
    reach the trace's export policy."""

    def test_defaults_and_round_trip(self) -> None:
        options = TorchOptions(exports_in_flight=1, export_timeout_s=30)
        assert ExportPolicy.of(options) == ExportPolicy(level=1, in_flight=1, timeout_s=30.0)
        assert ExportPolicy.of(TorchOptions()) == ExportPolicy()
        assert ExportPolicy().in_flight == 2
        cfg = ProfilerConfig(torch=options)
        assert ProfilerConfig.from_mapping(cfg.to_mapping()) == cfg

    @pytest.mark.parametrize("bad", [0, -1, 17, True, 1.5, "2", None])
    def test_bad_in_flight_refused(self, bad: object) -> None:
        with pytest.raises(ConfigError, match="exports_in_flight"):
            TorchOptions(exports_in_flight=bad)

    @pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "5", None, True])
    def test_bad_timeout_refused(self, bad: object) -> None:
        with pytest.raises(ConfigError, match="export_timeout_s"):
            TorchOptions(export_timeout_s=bad)
