"""What profiling cost, in parts (issue 29 item 6), on real CPU captures: each trace record says
how long the training thread waited for its session's start (``init_ms`` for the process's first
session, which pays torch's one-time set-up; ``start_ms`` for the others) and stop (``stop_ms``),
for the writer (``wait_ms``: a free export slot, and the last profiled step's wait for its
trace), and how much CPU the writer thread spent exporting it (``export_cpu_ms``); ``profdsl
summary``'s cost table sums them per role and step (text, ``--json``, ``--csv``).

No timing is asserted: only that the parts are there, where they belong, non-negative, and
consistent (each part of ``blocked_ms`` within it; a thread's CPU time within its wall time).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
import pytest

import profdsl._cli
from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl._runtime.writer.writer import Writer
from profdsl.analysis._catalog import RecordError, from_record
from profdsl.collect import _export as export_module
from profdsl.collect._manifest import make_record, read_manifest

from .profiling import config, records, work
from .test_exports import pending, submit

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
PARTS = ("init_ms", "start_ms", "stop_ms", "wait_ms", "export_cpu_ms")
#: Rounding: each value is written to 3 decimals.
SLACK_MS = 0.01

#: A fresh process: three continuous profiled steps of actor (the last one waits for its trace).
FRESH = r"""
import sys, torch
from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
cfg = ProfilerConfig(enable=True, steps=[1, 2, 3], save_path=sys.argv[1], torch=TorchOptions(contents=["cpu"]))
with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
    for step in range(5):
        with profiler.step(step), profile_stage("update_actor"):
            for _ in range(50):
                torch.ones(8).mul(2).sum()
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = profdsl._cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The save_path of one fresh process's run (FRESH)."""
    folder = tmp_path_factory.mktemp("fresh") / "profiles"
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    return folder


def _traces(folder: Path) -> list[dict[str, Any]]:
    return sorted(records(folder, "trace"), key=lambda r: (r["step"] is None, r["step"], r["time_ms"]))


def _consistent(record: dict[str, Any]) -> None:
    """Every part non-negative; the training thread's parts within ``blocked_ms``; the writer's CPU
    time within its export's wall time."""
    for part in PARTS:
        assert record.get(part) is None or record[part] >= 0, (part, record)
    waited = sum(record.get(part) or 0.0 for part in ("init_ms", "start_ms", "stop_ms", "wait_ms"))
    assert waited <= record["blocked_ms"] + SLACK_MS, record
    assert record["export_cpu_ms"] <= record["export_ms"] + SLACK_MS, record


def test_first_session_init_once_per_process_on_its_first_trace(fresh: Path) -> None:
    traces = _traces(fresh)
    assert [r["step"] for r in traces] == [1, 2, 3]
    first, *later = traces
    assert first["init_ms"] is not None and "start_ms" not in first
    for record in later:
        assert "init_ms" not in record and record["start_ms"] is not None, record
    for record in traces:
        assert record["stop_ms"] is not None and record["wait_ms"] is not None
        assert record["export_cpu_ms"] is not None
        _consistent(record)


def test_the_last_steps_wait_is_in_its_blocked_time(fresh: Path) -> None:
    """The last profiled step waits for its own trace before it returns (its finish hook must see
    it): that wait is the trace's ``wait_ms``, and within its ``blocked_ms``."""
    last = _traces(fresh)[-1]
    assert last["step"] == 3
    assert 0 <= last["wait_ms"] <= last["blocked_ms"] + SLACK_MS


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The writer's compression of a trace waits until this is set."""
    opened, real = threading.Event(), export_module.compress_trace

    def compress(*args: Any, **kwargs: Any) -> int:
        assert opened.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(export_module, "compress_trace", compress)
    return opened


def test_a_wait_for_the_trace_is_in_its_wait_and_its_blocked_time(tmp_path: Path, gate: threading.Event) -> None:
    """The last profiled step (or close()) waiting for a trace the writer is still finishing: the
    wait is added to the trace's ``wait_ms`` and to its ``blocked_ms`` alike (a lower bound the
    test measures itself, never an upper one)."""
    writer = Writer()
    trace = attrs.evolve(pending(tmp_path, 1), wait_ms=0.25)  # blocked_ms 1.0 before the wait
    ticket = submit(writer, trace)
    waiter = threading.Thread(target=writer.wait, args=(ticket,), kwargs=dict(timeout=60))
    waiter.start()
    waiter.join(0.3)
    held_ms = 300.0
    gate.set()
    waiter.join(60)
    [record] = read_manifest(tmp_path)
    assert record["wait_ms"] >= 0.25 + held_ms / 2
    assert record["blocked_ms"] - record["wait_ms"] == pytest.approx(0.75, abs=0.002)


def test_a_scheduled_stage_session_puts_its_start_on_its_first_trace(tmp_path: Path) -> None:
    """Discrete: one session per stage; a scheduled one writes a trace per window, the session's
    start on the first, on each the schedule step that ended its window (its stop); a plain
    stage's one trace has both, its stop the session's."""
    cfg = config(tmp_path, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=Schedule(active=1)))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        with profile_stage("update_actor", scheduled=True):
            for _ in mini_batch_window(range(4)):
                work()
        with profile_stage("compute_log_prob"):
            work()
    traces = records(tmp_path, "trace")
    windows = sorted((r for r in traces if r["stage"] == "update_actor"), key=lambda r: r["window"])
    assert [r["window"] for r in windows] == [[0, 0], [1, 1], [2, 2], [3, 3]]
    opened = [r for r in windows if r.get("init_ms") is not None or r.get("start_ms") is not None]
    assert opened == [windows[0]]
    assert all(r["stop_ms"] is not None for r in windows)
    (plain,) = [r for r in traces if r["stage"] == "compute_log_prob"]
    assert "init_ms" not in plain and plain["start_ms"] is not None and plain["stop_ms"] is not None
    for record in traces:
        _consistent(record)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(dict(schedule=Schedule(wait=1, active=1)), id="left-out-mini-batches"),
        pytest.param(dict(max_trace_mb=0.004), id="budget-cut"),
    ],
)
def test_a_continuous_steps_pauses_and_resumes_are_in_its_blocked_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    """Continuous: the capture pauses for the mini-batches its schedule leaves out, or for the
    rest of a window its size budget cut, and resumes (on stop at the latest); every pause and
    resume is torch's call on the training thread, and is in the trace's ``blocked_ms`` (a lower
    bound: the toggles' own durations, each made slow)."""
    real = torch.profiler.profile.toggle_collection_dynamic
    step = [0]
    toggled: dict[int, list[float]] = defaultdict(list)

    def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        time.sleep(0.05)
        try:
            return real(self, *args, **kwargs)
        finally:
            toggled[step[0]].append((time.perf_counter() - began) * 1000)

    monkeypatch.setattr(torch.profiler.profile, "toggle_collection_dynamic", slow)
    cfg = config(tmp_path, steps=[1, 2], torch=TorchOptions(contents=["cpu"], **options))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        for step[0] in (1, 2):
            with profiler.step(step[0]), profile_stage("update_actor"):
                for _ in mini_batch_window(range(4)):
                    for _ in range(20):
                        work()
            deadline = time.monotonic() + 120  # the budget learns step 1's size once it is recorded
            while not records(tmp_path, "trace") and time.monotonic() < deadline:
                time.sleep(0.05)
    traces = {r["step"]: r for r in records(tmp_path, "trace")}
    assert len(toggled[2]) >= 2  # paused and resumed at step 2
    assert traces[2]["status"] == ("truncated" if "max_trace_mb" in options else "ok")
    for number, durations in toggled.items():
        assert traces[number]["blocked_ms"] >= sum(durations), (number, durations, traces[number])
        _consistent(traces[number])


def test_the_writers_cpu_time_is_its_own_not_the_callers(tmp_path: Path) -> None:
    """While the writer exports step 1's trace, the training thread keeps torch's intra-op
    threads busy: the record's CPU time is the writer thread's, within the export's wall time
    (a process-wide or the caller's clock would count the training's CPU too)."""
    cfg = config(tmp_path, steps=[1, 3])  # step 1 is not the last: stop() does not wait for it
    a, b = torch.ones(256, 256), torch.ones(256, 256)
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1), profile_stage("update_actor"):
            for _ in range(3000):
                work()
        deadline = time.monotonic() + 120
        while not records(tmp_path, "trace") and time.monotonic() < deadline:
            for _ in range(20):
                a.mm(b)
    (record,) = records(tmp_path, "trace")
    assert record["export_cpu_ms"] > 0
    _consistent(record)


# --- the cost table -----------------------------------------------------------------------------


def test_summary_cost_sums_the_parts(fresh: Path) -> None:
    """``--cost --json``: each part summed per role and step over its records (an oracle summing
    the manifest); ``--csv`` has a column per part; the text table shows them and says what
    they are."""
    sums: dict[int, dict[str, float]] = defaultdict(dict)
    for record in read_manifest(fresh):
        for part in PARTS:
            if record.get(part) is not None:
                sums[record["step"]][part] = sums[record["step"]].get(part, 0.0) + record[part]
    code, out, err = cli("summary", str(fresh), "--cost", "--json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        for part in PARTS:
            want = sums[row["step"]].get(part)
            assert row[part] == (None if want is None else pytest.approx(want, abs=1e-6)), (part, row)
            assert all(part in rank for rank in row["ranks"])
    assert rows[0]["init_ms"] is not None and rows[1]["init_ms"] is None
    code, out, _ = cli("summary", str(fresh), "--cost", "--csv")
    header = out.splitlines()[0].split(",")
    assert code == 0 and all(part in header for part in PARTS)
    code, out, _ = cli("summary", str(fresh))
    table = out[out.index("profiling's own cost") :]
    for column in ("init ms", "start+stop ms", "wait ms", "export cpu ms"):
        assert column in table, table
    assert "one-time" in table


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("value", ["abc", -1, True, float("inf")])
def test_a_bad_part_is_a_bad_record(part: str, value: Any) -> None:
    with pytest.raises(RecordError, match=part):
        from_record(make_record("trace", "a.json.gz", **{part: value}))


def test_a_record_without_the_parts_is_read() -> None:
    """Records of an older profdsl carry none of them."""
    artifact = from_record(make_record("trace", "a.json.gz", blocked_ms=1.0, export_ms=2.0))
    assert artifact.blocked_ms == 1.0
