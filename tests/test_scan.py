"""The fast trace reader: exactly the streaming reader's answer, on real traces and on
random traces in kineto's layout cut into blocks anywhere; the streaming reader's errors for
whatever does not follow the layout; memory bounded by its block, not the trace; the same result
from worker processes, and from this process when they fail."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.analysis import _load as load_module
from profdsl.analysis import _scan as scan_module
from profdsl.analysis import _workers as workers_module
from profdsl.analysis._catalog import Artifact, catalog
from profdsl.analysis._reader import TraceError, events, header
from profdsl.analysis._scan import scan_events, scan_file
from profdsl.core._labels import encode

from .profiling import config

BASE_NS = 1_790_857_026_000_000_000


def kineto_text(meta: dict[str, Any] | None, items: list[dict[str, Any]]) -> str:
    """A trace as torch 2.13's kineto writes it: each event a block, each key on its own line
    (``dur`` followed by a lone comma line before ``args``, nested args indented further)."""
    blocks = []
    for event in items:
        lines = []
        order = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
        for key, value in sorted(event.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99):
            if key == "args":
                inner = ",\n".join(f"      {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items())
                lines.append(f'    "args": {{\n{inner}\n    }}')
            elif key == "dur":
                lines.append(f'    "dur": {value}\n    ')
            else:
                lines.append(f"    {json.dumps(key)}: {value if key == 'ts' else json.dumps(value)}")
        blocks.append("  {\n" + ",\n".join(lines) + "\n  }")
    head = "{" + (f'"profdsl": {json.dumps(meta)}, ' if meta is not None else "")
    head += f'\n    "schemaVersion": 1,\n    "baseTimeNanoseconds": {BASE_NS},\n    "traceEvents": [\n    \n'
    return head + ",\n".join(blocks) + '\n  ],"traceName": "/tmp/x{]}.json" }'


def write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def both(path: Path, *, span: bool) -> tuple[Any, Any]:
    meta = header(path)
    return scan_file(path, meta, span=span), scan_events(meta, events(path), span=span)


# -- random traces in the layout ---------------------------------------------------------------

LABELS = ["update_actor", "fwd", 'a"b', "générer", "50%", "mb1", "x\\y"]
_ts = st.decimals(min_value=0, max_value=10**13, places=3, allow_nan=False, allow_infinity=False).map(str)
_dur = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False).map(str)


@st.composite
def traces(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    stages = draw(st.lists(st.sampled_from(LABELS), max_size=4, unique=True))
    bases = draw(st.lists(st.sampled_from(["mini_batch", "mb", "mb1", "é"]), max_size=2, unique=True))
    names = [encode(s) for s in stages] + [f"{encode(b)}{i}" for b in bases for i in (0, 3, 12)]
    names += ["aten::mm", "update_actor_extra", "cudaLaunchKernel"]
    event = st.fixed_dictionaries(
        {
            "ph": st.sampled_from(["X", "X", "X", "i", "M"]),
            "cat": st.sampled_from(["cpu_op", "user_annotation", "gpu_user_annotation", "kernel"]),
            "name": st.sampled_from(names),
            "pid": st.integers(0, 3),
            "tid": st.sampled_from([1, 2, "stream 7"]),
            "ts": _ts,
            "dur": _dur,
            "args": st.fixed_dictionaries({"name": st.sampled_from(names), "External id": st.integers(0, 99)}),
        }
    )
    items = draw(st.lists(event, min_size=1, max_size=40))
    for item in items:
        if item["ph"] != "X":
            del item["dur"]
    meta = {"role": "actor", "regions": {"stages": stages, "mini_batches": bases}}
    return meta, items


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), chunk=st.sampled_from([64, 300, 4096, 1 << 20]), gz=st.booleans(), span=st.booleans())
def test_fast_reader_equals_the_streaming_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trace: tuple[dict[str, Any], list[dict[str, Any]]],
    chunk: int,
    gz: bool,
    span: bool,
) -> None:
    """Any mix of events, region names that others only start like, ``name`` keys in args, any
    block size: the fast reader takes the file (no fallback) and finds exactly what the
    streaming reader finds."""
    monkeypatch.setattr(scan_module, "CHUNK", chunk)
    meta, items = trace
    path = write(tmp_path / ("t.json.gz" if gz else "t.json"), kineto_text(meta, items))
    assert scan_module._fast(path, header(path), span=span) is not None
    fast, slow = both(path, span=span)
    assert fast == slow


# -- real traces -------------------------------------------------------------------------------


def test_real_traces_read_alike(tmp_path: Path) -> None:
    """Traces the runtime writes (discrete scheduled windows, nested stages, odd labels, a
    torch sampler's engine trace): fast and streaming readers agree, with and without spans."""
    cfg = config(
        tmp_path, discrete=True, torch=TorchOptions(contents=["cpu", "shapes"], schedule=Schedule(wait=1, active=2))
    )
    import torch

    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        with profile_stage('upd"até', scheduled=True):
            for _ in mini_batch_window(range(5), name="mb é"):
                with profile_stage("x\\y"):
                    torch.ones(32, 32).mm(torch.ones(32, 32))
    files = sorted(p for p in tmp_path.iterdir() if p.name.endswith(".json.gz"))
    assert len(files) == 2
    for path in files:
        for span in (False, True):
            fast, slow = both(path, span=span)
            assert fast == slow and fast.pieces


# -- what does not follow the layout -----------------------------------------------------------


def _one_line(tmp_path: Path) -> Path:
    meta = {"regions": {"stages": ["s"], "mini_batches": []}}
    data = {"profdsl": meta, "traceEvents": [{"ph": "X", "name": "s", "ts": 1.5, "dur": 2.25, "tid": 1}]}
    return write(tmp_path / "one.json.gz", json.dumps(data))


def test_a_trace_in_another_layout_is_read_by_the_streaming_reader(tmp_path: Path) -> None:
    path = _one_line(tmp_path)
    assert scan_module._fast(path, header(path), span=True) is None
    fast, slow = both(path, span=True)
    assert fast == slow and [p.label for p in fast.pieces] == ["s"] and fast.span == (1.5, 3.75)


@pytest.mark.parametrize("damage", ["cut", "bad region ts", "no events", "trailing garbage"])
def test_damaged_traces_get_the_streaming_readers_error(tmp_path: Path, damage: str) -> None:
    meta = {"regions": {"stages": ["s"], "mini_batches": []}}
    good = [{"ph": "X", "cat": "user_annotation", "name": "s", "pid": 1, "tid": 1, "ts": "5.0", "dur": "1.0"}]
    text = kineto_text(meta, good)
    if damage == "cut":
        text = text[: len(text) * 2 // 3]
    elif damage == "bad region ts":
        text = text.replace('"ts": 5.0', '"ts": "soon"')
    elif damage == "no events":
        text = kineto_text(meta, [])
    else:
        text += "{"
    path = write(tmp_path / "t.json.gz", text)
    with pytest.raises(TraceError) as fast_error:
        scan_file(path, header(path), span=False)
    with pytest.raises(TraceError) as slow_error:
        for _ in events(path):
            pass
    assert str(fast_error.value) == str(slow_error.value)


def test_a_cut_gzip_file_gets_the_streaming_readers_error(tmp_path: Path) -> None:
    meta = {"regions": {"stages": ["s"], "mini_batches": []}}
    items = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": f"{i}.0", "dur": "1.0"}
        for i in range(2000)
    ]
    path = write(tmp_path / "t.json.gz", kineto_text(meta, items))
    path.write_bytes(path.read_bytes()[:-200])
    meta_read = header(path)
    with pytest.raises(TraceError) as fast_error:
        scan_file(path, meta_read, span=True)
    with pytest.raises(TraceError) as slow_error:
        for _ in events(path):
            pass
    assert str(fast_error.value) == str(slow_error.value)


@pytest.mark.slow
def test_memory_is_bounded_by_the_block_not_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 13 MB trace read in 256 kB blocks: Python's allocations peak at a few blocks."""
    monkeypatch.setattr(scan_module, "CHUNK", 256 << 10)
    meta = {"regions": {"stages": ["update_actor"], "mini_batches": ["mini_batch"]}}
    items = []
    for i in range(60_000):
        name = "update_actor" if i % 1000 == 0 else f"mini_batch{i}" if i % 100 == 0 else "aten::mm"
        items.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": f"{i}.125",
                "dur": "0.5",
                "args": {"External id": i, "Input Dims": [[64, 64], [64, 64]]},
            }
        )
    path = write(tmp_path / "big.json.gz", kineto_text(meta, items))
    plain = len(gzip.open(path).read())
    assert plain > 6 * 8 * (256 << 10)
    meta_read = header(path)
    tracemalloc.start()
    try:
        result = scan_file(path, meta_read, span=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(result.pieces) == 60 + 540 and result.span is not None
    assert peak < 8 * (256 << 10)  # a sixth of the trace, or less


# -- across processes --------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    cfg = config(tmp_path, steps=[1, 2], all_ranks=True, discrete=True)
    import torch

    for rank in (0, 1):
        with Profiler(cfg, role="actor", rank=rank, world_size=2) as profiler:
            for step in (1, 2):
                with profiler.step(step), profile_stage("update"):
                    torch.ones(16).mul(2)
    return tmp_path


def test_worker_processes_give_the_same_scans(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = catalog(folder).artifacts
    here = load_module.scan_artifacts(folder, items, [])
    monkeypatch.setattr(load_module, "POOL_BYTES", 0)
    monkeypatch.setattr(load_module, "_workers", lambda count: 2)
    used: list[int] = []
    real = workers_module.run_workers

    def counting(*args: Any, **kwargs: Any) -> set[int]:
        left = real(*args, **kwargs)
        used.append(len(args[1]) - len(left))
        return left

    monkeypatch.setattr(load_module, "run_workers", counting)
    assert load_module.scan_artifacts(folder, items, []) == here
    assert used == [4]  # every trace was read by a worker


def test_workers_that_cannot_start_leave_the_reading_here(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = catalog(folder).artifacts
    here = load_module.scan_artifacts(folder, items, [])
    monkeypatch.setattr(load_module, "POOL_BYTES", 0)
    monkeypatch.setattr(load_module, "_workers", lambda count: 2)
    monkeypatch.setattr(workers_module.sys, "executable", str(folder / "no-such-python"))
    assert load_module.scan_artifacts(folder, items, []) == here


def test_a_worker_that_dies_leaves_its_traces_here(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed mid-way (here: its interpreter exits at once) finishes nothing; the
    traces it held are read here, and the answer is the same."""
    items = catalog(folder).artifacts
    here = load_module.scan_artifacts(folder, items, [])
    fake = folder / "dying-python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(load_module, "POOL_BYTES", 0)
    monkeypatch.setattr(load_module, "_workers", lambda count: 2)
    monkeypatch.setattr(workers_module.sys, "executable", str(fake))
    assert load_module.scan_artifacts(folder, items, []) == here


def test_shares_balance_the_bytes() -> None:
    assert workers_module.shares([], 3) == []
    assert workers_module.shares([7], 3) == [[0]]
    assert workers_module.shares([5, 5, 5, 5], 2) == [[0, 2], [1, 3]]
    groups = workers_module.shares([9, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2)
    assert sorted(map(sorted, groups)) == [[0], list(range(1, 10))]


# -- progress ----------------------------------------------------------------------------------


class _Terminal:
    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_progress_only_on_a_terminal_and_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    quick = load_module.Progress(4, 4 << 30, stream=terminal)  # type: ignore[arg-type]
    quick.update(1, 1 << 30)
    assert terminal.text == ""  # not yet: reads under PROGRESS_AFTER_S show nothing
    monkeypatch.setattr(load_module, "PROGRESS_AFTER_S", 0.0)
    slow = load_module.Progress(4, 4 << 30, stream=terminal)  # type: ignore[arg-type]
    slow.update(3, 3 << 30)
    slow.close()
    assert terminal.text == "\rprofdsl: reading traces 3/4 (3.0 GB of 4.0 GB)\r\x1b[K"
    piped = load_module.Progress(4, 1, stream=open(os.devnull, "w"))
    piped.update(4, 1)
    assert not piped.on and not piped.shown


def test_no_progress_when_stderr_is_piped(folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0 and done.stderr == ""


def test_scan_one_names_an_unreadable_trace(tmp_path: Path) -> None:
    (tmp_path / "x.pt.trace.json.gz").write_bytes(b"not gzip")
    artifact = Artifact(kind="trace", path="x.pt.trace.json.gz")
    assert "x.pt.trace.json.gz: unreadable" in str(load_module.scan_one(str(tmp_path), artifact))
