"""The last profiled step with no finish hook to wait for (none, or ``background=True``): its
``stop()`` waits until torch's events of its traces are on disk (the part only this process can
do), and the writer finishes them (compress, name, record) in the background. A hook still runs
after every artifact, ``close()`` and the interpreter's exit still wait for every trace, and a
hard exit right after the step leaves the events for ``profdsl check`` (docs/architecture.md,
"What a caller waits for", item 3).

The trace's finishing is held at its compression by a gate the test opens, so what the step
waited for is seen in the files, never timed.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl import FinishHook, Profiler, TorchOptions, profile_stage

from .profiling import config, hooks, records, work

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
STILL_WRITTEN = "still being written"


def events_files(folder: Path) -> list[Path]:
    """torch's events of traces not yet finished (the writer's temporaries)."""
    return sorted(p for p in folder.iterdir() if p.name.startswith(".profdsl-tmp-") and p.suffix == ".json")


def holds_the_stage(events: Path, stage: str = "update_actor") -> bool:
    data: dict[str, Any] = json.loads(events.read_text())
    return any(e.get("name") == stage for e in data["traceEvents"])


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Compression waits until the test opens the gate (a slow disk); opened at the end in
    any case, so that no writer thread is left waiting."""
    import profdsl.collect._export as export_module

    real = export_module.compress_trace
    opened = threading.Event()

    def held(*args: Any, **kwargs: Any) -> Any:
        opened.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(export_module, "compress_trace", held)
    yield opened
    opened.set()


def last_step(profiler: Profiler, step: int = 1) -> None:
    profiler.start(step)
    with profile_stage("update_actor"):
        work()
    profiler.stop()


def quick_timeout(**kwargs: Any) -> Any:
    """A config whose waits for a trace run out after 5 s: a step that waited for the gate
    would return (saying so in the log) instead of hanging the test."""
    return config(kwargs.pop("save_path"), torch=TorchOptions(contents=["cpu"], export_timeout_s=5), **kwargs)


def test_the_step_returns_once_the_events_are_on_disk(
    tmp_path: Path, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """No hook: the step returns with the trace's events on disk and the trace not yet
    finished; close() waits for it, and it is recorded ``ok`` with its events file removed."""
    profiler = Profiler(quick_timeout(save_path=tmp_path), role="actor", rank=0, world_size=1)
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        last_step(profiler)
    assert STILL_WRITTEN not in caplog.text  # the step did not wait for the gate
    [events] = events_files(tmp_path)
    assert holds_the_stage(events)
    assert records(tmp_path, "trace") == []  # finished in the background
    gate.set()
    profiler.close()
    [trace] = records(tmp_path, "trace")
    assert trace["status"] == "ok" and (tmp_path / trace["path"]).exists()
    assert events_files(tmp_path) == []


def test_a_background_hook_runs_after_the_trace_the_step_did_not_wait_for(
    tmp_path: Path, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """``background=True``: the step returns before its trace is finished; the hook still runs
    after the trace's record, which it sees."""
    save = tmp_path / "save"
    hook = FinishHook(cmd=f'cp "$PROFDSL_MANIFEST" "{tmp_path}/seen-by-hook.jsonl"', background=True)
    profiler = Profiler(quick_timeout(save_path=save, finish_hook=hook), role="actor", rank=0, world_size=1)
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        last_step(profiler)
    assert STILL_WRITTEN not in caplog.text
    assert records(save, "trace") == [] and hooks(save) == []
    gate.set()
    profiler.close()
    seen = [json.loads(line) for line in (tmp_path / "seen-by-hook.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["status"]) for r in seen] == [("trace", "ok")]
    assert [h["status"] for h in hooks(save)] == ["ok"]


def test_a_foreground_hook_still_waits_for_the_whole_trace(tmp_path: Path, gate: threading.Event) -> None:
    """A hook due in the foreground: the step waits for the finished trace, then the hook (the
    gate opens on another thread while the step waits)."""
    save = tmp_path / "save"
    hook = FinishHook(cmd=f'cp "$PROFDSL_MANIFEST" "{tmp_path}/seen-by-hook.jsonl"')
    profiler = Profiler(config(save, finish_hook=hook), role="actor", rank=0, world_size=1)
    opener = threading.Timer(0.5, gate.set)
    opener.start()
    try:
        last_step(profiler)
        seen = [json.loads(line) for line in (tmp_path / "seen-by-hook.jsonl").read_text().splitlines()]
        assert [(r["kind"], r["status"]) for r in seen] == [("trace", "ok")]  # before stop() returned
    finally:
        opener.cancel()
        profiler.close()


def test_blocked_ms_counts_the_wait_for_the_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's wait for torch's events is the training thread's, and is in the trace's
    ``blocked_ms``, as is close()'s wait for the rest."""
    import profdsl._capture.torch_traces as torch_traces

    real = torch_traces._write_events

    def slow(*args: Any, **kwargs: Any) -> Any:  # an events write that dominates the step's stop
        time.sleep(1.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_traces, "_write_events", slow)
    profiler = Profiler(config(tmp_path), role="actor", rank=0, world_size=1)
    first = time.perf_counter()
    profiler.start(1)  # its capture's start is the trace's blocked time too
    profile_stage("update_actor")(work)()
    began = time.perf_counter()
    profiler.stop()
    spent_ms = (time.perf_counter() - began) * 1000
    profiler.close()
    all_ms = (time.perf_counter() - first) * 1000
    [trace] = records(tmp_path, "trace")
    assert trace["status"] == "ok"
    assert 0.8 * spent_ms <= trace["blocked_ms"] <= all_ms


def test_a_wait_for_the_events_that_ran_out_is_in_blocked_ms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """torch's events of the last step's trace still being written when the step's wait runs
    out (``export_timeout_s``): the step returns, and the wait it did is still in the trace's
    ``wait_ms`` and ``blocked_ms`` when the writer records the trace later (a lower bound: the
    wait lasted its timeout)."""
    import profdsl._capture.torch_traces as torch_traces

    real, gate = torch_traces._write_events, threading.Event()

    def held(*args: Any, **kwargs: Any) -> Any:  # torch writing a large trace
        gate.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_traces, "_write_events", held)
    cfg = config(tmp_path, torch=TorchOptions(contents=["cpu"], export_timeout_s=0.5))
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    try:
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            last_step(profiler)
        assert STILL_WRITTEN in caplog.text  # the wait ran out
    finally:
        gate.set()
        profiler.close()
    [trace] = records(tmp_path, "trace")
    assert trace["status"] == "ok"
    assert trace["wait_ms"] >= 490
    assert trace["blocked_ms"] >= trace["wait_ms"] + trace["stop_ms"] - 0.01


def test_a_mid_run_step_still_does_not_wait(tmp_path: Path, gate: threading.Event) -> None:
    """A step that is not the last profiled one waits for nothing of its trace (the events
    included): the next step begins while the writer is held."""
    profiler = Profiler(quick_timeout(save_path=tmp_path, steps=[1, 3]), role="actor", rank=0, world_size=1)
    last_step(profiler, 1)
    with profiler.step(2):
        work()
    gate.set()
    profiler.close()
    assert [r["step"] for r in records(tmp_path, "trace")] == [1]


# -- exits: in a fresh interpreter ------------------------------------------------------------

PRELUDE = """
import os, sys, threading
import profdsl.collect._export as export_module
from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
save = sys.argv[1]
gate = threading.Event()
real = export_module.compress_trace

def held(*args, **kwargs):  # compression waits for the gate: a slow disk
    gate.wait(120)
    return real(*args, **kwargs)

export_module.compress_trace = held
config = ProfilerConfig(enable=True, steps=[1], save_path=save, torch=TorchOptions(contents=["cpu"]))
profiler = Profiler(config, role="actor", rank=0, world_size=1)
profiler.start(1)
with profile_stage("update_actor"):
    import torch
    torch.ones(8).mul(2).sum()
profiler.stop()  # the last profiled step, no hook: returns once the events are on disk
"""


def run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT
    )


@pytest.mark.slow
def test_the_exit_without_close_finishes_the_last_trace(tmp_path: Path) -> None:
    """The script ends right after the last step, the trace still being finished: the
    interpreter's exit waits for it, and it is recorded ``ok``."""
    result = run(tmp_path, "threading.Timer(0.5, gate.set).start()")
    assert result.returncode == 0, result.stderr[-3000:]
    [trace] = records(tmp_path, "trace")
    assert trace["status"] == "ok" and (tmp_path / trace["path"]).exists()
    assert events_files(tmp_path) == []


@pytest.mark.slow
def test_a_hard_exit_after_the_last_step_leaves_its_events_for_check(tmp_path: Path) -> None:
    """``os._exit`` right after the last step (no atexit, nothing recorded): torch's events are
    on disk, whole, and ``profdsl check`` names them."""
    result = run(tmp_path, "os._exit(0)")
    assert result.returncode == 0, result.stderr[-3000:]
    assert records(tmp_path, "trace") == []
    [events] = events_files(tmp_path)
    assert holds_the_stage(events)
    check = subprocess.run(
        [sys.executable, "-m", "profdsl", "check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 1
    assert f"{events.name}: torch's events of a trace still being exported when process" in check.stdout
