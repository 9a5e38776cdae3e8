"""Traces finished on the writer's thread: bounded in flight, in order before the hook, given up
(and recorded) but never lost, each ending in exactly one record."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from profdsl import ConfigError, ProfilerConfig, TorchOptions
from profdsl._runtime.writer.hook import HookJob, HookPlan
from profdsl._runtime.writer.jobs import ExportJob
from profdsl._runtime.writer.rounds import HookRounds
from profdsl._runtime.writer.writer import Writer
from profdsl.collect import _export as export_module
from profdsl.collect._export import ExportPolicy, PendingTrace, TraceLabel
from profdsl.collect._manifest import read_manifest


class Member:
    """A role of the hook's round (weakly referenced there)."""


def pending(save_path: Path, step: int, **policy: Any) -> PendingTrace:
    label = TraceLabel(
        role="actor",
        stage=None,
        step=step,
        rank=0,
        world_size=1,
        save_path=str(save_path),
        host="h",
        pid=1,
        config_hash="c",
        export=ExportPolicy(**policy),
    )
    events = save_path / f".profdsl-tmp-1-{step}.json"
    events.write_text('{"traceEvents": []}')
    return PendingTrace(label=label, window=None, time_ms=step, extra=None, events=str(events), blocked_ms=1.0)


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[int]]:
    """Compression blocks until the gate opens, and notes the steps it finished, in order."""
    gate, done = threading.Event(), []
    real = export_module.compress_trace

    def compress(source: str, destination: str, *args: Any, **kwargs: Any) -> int:
        assert gate.wait(60)
        done.append(int(source.rsplit("-", 1)[1].split(".")[0]))
        return real(source, destination, *args, **kwargs)

    monkeypatch.setattr(export_module, "compress_trace", compress)
    return gate, done


def submit(writer: Writer, trace: PendingTrace) -> object:
    """What a session's hand-over does: wait (bounded) for a slot, then submit."""
    writer.wait_below("export", trace.label.export.in_flight, trace.label.export.timeout_s)
    return writer.submit(ExportJob(trace))


def hook_plan(save_path: Path, cmd: str, role: str = "actor") -> HookPlan:
    """A foreground finish hook of rank 0 of 1 running ``cmd`` for ``save_path``."""
    return HookPlan(
        save_path=str(save_path),
        cmd=cmd,
        timeout_s=60,
        background=False,
        tool="torch",
        role=role,
        rank=0,
        world_size=1,
        host="h",
    )


def test_at_most_limit_in_flight_and_the_next_waits(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    gate, done = gated
    writer = Writer()
    submit(writer, pending(tmp_path, 1))
    submit(writer, pending(tmp_path, 2))
    third = threading.Thread(target=submit, args=(writer, pending(tmp_path, 3)))
    third.start()
    third.join(0.5)
    assert third.is_alive()  # waits for a slot: never more than 2 in flight
    gate.set()
    third.join(60)
    assert not third.is_alive()
    assert writer.wait(timeout=60)
    assert done == [1, 2, 3]
    assert [(r["step"], r["status"]) for r in read_manifest(tmp_path)] == [(1, "ok"), (2, "ok"), (3, "ok")]


def test_hook_runs_after_every_export(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """A hook made due while traces are still being finished runs after them: it sees them."""
    gate, done = gated
    writer = Writer()
    rounds = HookRounds(writer)
    member = Member()
    rounds.join(str(tmp_path), member)
    submit(writer, pending(tmp_path, 1))
    submit(writer, pending(tmp_path, 2))
    plan = hook_plan(tmp_path, 'ls "$PROFDSL_SAVE_PATH" > "$PROFDSL_SAVE_PATH/../seen"')
    due = rounds.arrive(str(tmp_path), member, plan, [1, 2])
    assert due is not None
    assert not (tmp_path.parent / "seen").exists()  # the exports are still running
    gate.set()
    assert due.wait(timeout=60)
    seen = (tmp_path.parent / "seen").read_text().split()
    assert [r["path"] in seen for r in read_manifest(tmp_path) if r["kind"] == "trace"] == [True, True]
    assert [r["kind"] for r in read_manifest(tmp_path)] == ["trace", "trace", "hook"]


def test_a_hook_given_up_before_it_ran_is_recorded_in_each_plans_folder(
    tmp_path: Path, gated: tuple[threading.Event, list[int]]
) -> None:
    """A hook due behind an export that does not end, given up (at exit): it never runs; its
    round's first plan records it ``interrupted`` and the other plan (the same folder by another
    path) a skip."""
    gate, _ = gated
    writer = Writer()
    submit(writer, pending(tmp_path, 1))
    ran = tmp_path.parent / f"{tmp_path.name}-ran"
    plans = [
        hook_plan(folder, f'touch "{ran}"', role=role)
        for folder, role in ((tmp_path, "actor"), (tmp_path / ".", "ref"))
    ]
    job = HookJob(plans, [1], writer)
    job.ticket = writer.submit(job)
    assert writer.give_up(frozenset({"export", "hook"})) == 2
    assert writer.wait(timeout=60)
    gate.set()
    hooks = [(r["role"], r["status"]) for r in read_manifest(tmp_path) if r["kind"] == "hook"]
    assert hooks == [("actor", "interrupted"), ("ref", "skipped")]
    assert "it never ran" in [r for r in read_manifest(tmp_path) if r["kind"] == "hook"][0]["error"]
    assert not ran.exists() and job.finished.is_set()


def test_a_hooks_blocked_ms_is_the_time_waited_for_it(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """A wait for the finish hook that runs out (its turn held up behind an export) ends the
    caller's block: the hook, recorded later, counts that wait, not the time the loop went on
    meanwhile (an upper bound the test measures: the wait's own length)."""
    gate, _ = gated
    writer = Writer()
    submit(writer, pending(tmp_path, 1))
    plan = hook_plan(tmp_path, "true")
    job = HookJob([plan], [1], writer)
    job.ticket = writer.submit(job)
    began = time.perf_counter()
    assert not job.wait(timeout=0.3)
    waited_ms = (time.perf_counter() - began) * 1000
    time.sleep(1.0)  # the loop goes on, not waiting
    gate.set()
    assert job.finished.wait(60)
    [hook] = [r for r in read_manifest(tmp_path) if r["kind"] == "hook"]
    assert hook["status"] == "ok"
    assert 290 <= hook["blocked_ms"] <= waited_ms


def test_exports_given_up_are_recorded_incomplete_once(
    tmp_path: Path, gated: tuple[threading.Event, list[int]]
) -> None:
    """Given up (at exit), the running export and the queued ones are recorded incomplete,
    naming torch's events they leave; the thread that finishes late commits nothing."""
    gate, _ = gated
    writer = Writer()
    submit(writer, pending(tmp_path, 7))
    submit(writer, pending(tmp_path, 8))
    assert not writer.wait(timeout=0.2)
    assert writer.give_up() == 2
    assert writer.wait(timeout=60)
    records = read_manifest(tmp_path)
    assert [(r["step"], r["status"]) for r in records] == [(7, "incomplete"), (8, "incomplete")]
    assert all("background" in r["reason"] and (tmp_path / r["events"]).exists() for r in records)
    gate.set()  # the given-up thread finishes late: nothing more is recorded or renamed
    time.sleep(0.5)
    assert len(read_manifest(tmp_path)) == 2
    assert not list(tmp_path.glob("*.pt.trace.json.gz"))


def test_in_flight_limit_is_the_traces_own_option(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """``TorchOptions.exports_in_flight=1``: a second trace waits for the first."""
    gate, done = gated
    writer = Writer()
    submit(writer, pending(tmp_path, 1, in_flight=1))
    second = threading.Thread(target=submit, args=(writer, pending(tmp_path, 2, in_flight=1)))
    second.start()
    second.join(0.5)
    assert second.is_alive()
    gate.set()
    second.join(60)
    assert not second.is_alive()
    assert writer.wait(timeout=60)
    assert done == [1, 2]


def test_waiting_for_an_export_counts_as_blocked(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """A caller waiting for a trace to be finished (the last step, before its hook) is blocked
    by profiling: the wait shows in that trace's ``blocked_ms`` (a lower bound the test
    measures itself, never an upper one)."""
    gate, _ = gated
    writer = Writer()
    ticket = submit(writer, pending(tmp_path, 1))
    waited: list[float] = []

    def wait() -> None:
        began = time.perf_counter()
        writer.wait(ticket, timeout=60)  # type: ignore[arg-type]
        waited.append((time.perf_counter() - began) * 1000)

    thread = threading.Thread(target=wait)
    thread.start()
    thread.join(0.3)
    held_ms = 300.0
    gate.set()
    thread.join(60)
    [record] = read_manifest(tmp_path)
    assert record["blocked_ms"] >= 1.0 + held_ms / 2  # the 1 ms before it, and the wait
    assert record["blocked_ms"] <= 1.0 + waited[0] + 1


def test_a_wait_that_ran_out_still_counts_as_blocked(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """A caller's wait for a trace that runs out before the trace is recorded (the last step's
    wait past ``export_timeout_s``) held the training thread all the same: it is in the trace's
    ``wait_ms`` and ``blocked_ms``, though no caller waits any more when the writer records it (a
    lower bound: the wait lasted its timeout)."""
    gate, _ = gated
    writer = Writer()
    ticket = submit(writer, attrs.evolve(pending(tmp_path, 1), wait_ms=0.0))
    assert writer.wait_settled(ticket, timeout=60)  # type: ignore[arg-type]  # running, held at its compression
    assert not writer.wait(ticket, timeout=0.3)  # type: ignore[arg-type]
    gate.set()
    assert ticket.done.wait(60)  # type: ignore[attr-defined]  # nobody waits for it now
    [record] = read_manifest(tmp_path)
    assert record["wait_ms"] >= 290
    assert record["blocked_ms"] - record["wait_ms"] == pytest.approx(1.0, abs=0.002)


def test_a_wait_inside_another_leaves_the_outer_one_charged(
    tmp_path: Path, gated: tuple[threading.Event, list[int]]
) -> None:
    """A wait on the same thread inside another (a signal handler calling ``close()`` while the
    step waits) ends first: the outer wait still counts to its end (a lower bound: it lasted its
    timeout)."""
    gate, _ = gated
    writer = Writer()
    ticket = submit(writer, attrs.evolve(pending(tmp_path, 1), wait_ms=0.0))
    assert writer.wait_settled(ticket, timeout=60)  # type: ignore[arg-type]
    looks: list[bool] = []

    def done() -> bool:  # the outer wait looks again: a handler runs in between, and waits too
        looks.append(False)
        if len(looks) == 2:
            assert not writer.wait(ticket, timeout=0.05)  # type: ignore[arg-type]
        return False

    assert not writer.waits.until(done, 0.5)
    gate.set()
    assert ticket.done.wait(60)  # type: ignore[attr-defined]
    [record] = read_manifest(tmp_path)
    assert record["wait_ms"] >= 480


def test_a_given_up_trace_keeps_the_wait_for_it(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """The wait that ran out before a trace was given up (the finish hook due, or the exit) is
    in its ``incomplete`` record's ``blocked_ms``; a trace queued behind it, which never ran
    while anyone waited, keeps its own."""
    gate, _ = gated
    writer = Writer()
    running = submit(writer, pending(tmp_path, 7))
    submit(writer, pending(tmp_path, 8))
    assert writer.wait_settled(running, timeout=60)  # type: ignore[arg-type]
    assert not writer.wait(timeout=0.3)
    assert writer.give_up() == 2
    last = writer.tail()
    assert last is not None and last.done.wait(60)  # nobody waits for their records
    gate.set()
    records = {r["step"]: r for r in read_manifest(tmp_path)}
    assert [r["status"] for r in records.values()] == ["incomplete", "incomplete"]
    assert records[7]["blocked_ms"] >= 1.0 + 290
    assert records[8]["blocked_ms"] == 1.0


def held_write(trace: PendingTrace, gate: threading.Event) -> PendingTrace:
    """``trace`` with its events still to be written, by a write that waits for ``gate`` (torch
    writing a large trace)."""
    events = Path(trace.events)
    text = events.read_text()
    events.unlink()

    def write(path: str) -> None:
        assert gate.wait(60)
        Path(path).write_text(text)

    return attrs.evolve(trace, write=write)


def test_a_trace_settles_once_its_events_are_on_disk(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """``wait_settled`` returns once torch's events are written, while the trace is still being
    compressed; ``wait`` waits for the record."""
    gate, _ = gated
    writer = Writer()
    ticket = submit(writer, pending(tmp_path, 1))
    assert writer.wait_settled(ticket, timeout=60)  # type: ignore[arg-type]
    assert (tmp_path / ".profdsl-tmp-1-1.json").exists() and read_manifest(tmp_path) == []
    assert not writer.wait(ticket, timeout=0.2)  # type: ignore[arg-type]
    gate.set()
    assert writer.wait(ticket, timeout=60)  # type: ignore[arg-type]
    assert [r["status"] for r in read_manifest(tmp_path)] == ["ok"]


def test_jobs_settle_in_order(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """Every job up to the ticket settles first: a trace behind one still being compressed has
    not settled (the writer takes them in order), and a job that is not an export settles when
    it is done."""
    gate, _ = gated
    writer = Writer()
    submit(writer, pending(tmp_path, 1))
    second = submit(writer, pending(tmp_path, 2))
    assert not writer.wait_settled(second, timeout=0.2)  # type: ignore[arg-type]
    gate.set()
    assert writer.wait_settled(second, timeout=60)  # type: ignore[arg-type]
    assert writer.wait(timeout=60)
    assert writer.wait_settled(second, timeout=0)  # type: ignore[arg-type]  # done: settled


def test_waits_before_and_after_settling_count_once(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """A caller that waits for the events (the last step), then for the rest (close()): both
    waits are in the trace's ``blocked_ms``, each once."""
    gate, _ = gated
    events_gate = threading.Event()
    writer = Writer()
    ticket = submit(writer, held_write(pending(tmp_path, 1), events_gate))
    threading.Timer(0.3, events_gate.set).start()
    began = time.perf_counter()
    assert writer.wait_settled(ticket, timeout=60)  # type: ignore[arg-type]
    first_ms = (time.perf_counter() - began) * 1000
    threading.Timer(0.3, gate.set).start()
    began = time.perf_counter()
    assert writer.wait(ticket, timeout=60)  # type: ignore[arg-type]
    second_ms = (time.perf_counter() - began) * 1000
    [record] = read_manifest(tmp_path)
    assert record["blocked_ms"] >= 1.0 + (first_ms + second_ms) / 2
    assert record["blocked_ms"] <= 1.0 + first_ms + second_ms + 1


def test_budget_is_the_traces_own_timeout(tmp_path: Path, gated: tuple[threading.Event, list[int]]) -> None:
    """A wait for everything in flight lasts as long as the longest ``export_timeout_s`` of the
    traces there, then gives up (False)."""
    gate, _ = gated
    writer = Writer()
    assert writer.wait(timeout=writer.budget())  # nothing in flight
    submit(writer, pending(tmp_path, 1, timeout_s=0.2))
    assert writer.budget() == 0.2
    assert not writer.wait(timeout=writer.budget())
    gate.set()
    assert writer.wait(timeout=60)


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
