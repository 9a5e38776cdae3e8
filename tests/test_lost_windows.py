"""Lost windows are named (issue 33): a trace that holds less than its config asked for is
recorded ``incomplete`` with the reason, said once in the log and flagged by ``profdsl check``;
a machine without the device asked for says so once at INFO and keeps its traces ``ok``.

Real torch captures on CPU; what only a GPU machine can produce is faked at one point each, and
each fake is checked against torch's source: the device's presence (``_device_recorded`` /
``_activities``) and kineto's stopped flag (``torch.autograd._is_kineto_stopped``, which torch
2.13's own ``profile.step()`` reads to enter ``ProfilerAction.DEVICE_STOPPED``, lines 1207-1225
of ``torch/profiler/profiler.py``).
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli
from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl._capture import torch_args, torch_traces
from profdsl._runtime.process import PROCESS
from profdsl.collect._export import ExportPolicy, PendingTrace, TraceLabel, finish
from profdsl.core._completeness import Expect

from .profiling import config, records, work
from .traces import names, parsed

torch = pytest.importorskip("torch")


def check_fails(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``profdsl check``'s FAIL lines for ``folder`` (it must exit 1)."""
    capsys.readouterr()
    assert profdsl._cli.main(["check", str(folder)]) == 1
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]


def said(caplog: pytest.LogCaptureFixture, text: str, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def label_in(folder: Path) -> TraceLabel:
    return TraceLabel(
        role="actor",
        stage=None,
        step=1,
        rank=0,
        world_size=1,
        save_path=str(folder),
        host="h",
        pid=1,
        config_hash="c",
        export=ExportPolicy(),
    )


class TestNoEvents:
    @pytest.mark.parametrize(("opened", "status"), [(True, "incomplete"), (False, "ok")])
    def test_an_empty_trace_is_incomplete_when_regions_were_opened_in_its_window(
        self, tmp_path: Path, opened: bool, status: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A real capture that recorded nothing: lost when profdsl opened regions in its window
        (they should be there), what was asked when nothing ran."""
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
        prof.stop()
        pending = PendingTrace(
            write=lambda path: prof.export_chrome_trace(path),
            label=label_in(tmp_path),
            window=None,
            time_ms=1,
            expect=Expect(regions=opened),
        )
        assert finish(pending)
        (record,) = records(tmp_path, "trace")
        assert record["status"] == status and record["path"] and record["json_bytes"] > 0
        assert ("no event at all" in (record.get("reason") or "")) == opened
        assert len(said(caplog, "no event at all")) == int(opened)

    def test_a_step_that_ran_nothing_is_ok(self, tmp_path: Path) -> None:
        """No region was opened in the window and no op ran: an empty trace is what was asked."""
        with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            pass
        assert [r["status"] for r in records(tmp_path, "trace")] == ["ok"]

    def test_a_window_with_work_is_ok_and_its_size_recorded(self, tmp_path: Path) -> None:
        with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update_actor"):
                work()
        (record,) = records(tmp_path, "trace")
        assert record["status"] == "ok" and "reason" not in record
        (path,) = [p for p in tmp_path.iterdir() if p.name.endswith(".json.gz")]
        assert record["json_bytes"] == len(gzip.decompress(path.read_bytes()))


class TestAskedDevice:
    def test_no_device_here_is_said_once_at_info_and_traces_stay_ok(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The default contents ask for CUDA; this CPU machine has none: one INFO line for the
        process, nothing above INFO, and the traces are ``ok``."""
        if torch.cuda.is_available():
            pytest.skip("a CUDA machine records CUDA activity")
        caplog.set_level(logging.INFO, logger="profdsl")
        cfg = config(tmp_path, steps=[1, 2], torch=TorchOptions())
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in (1, 2):
                with profiler.step(step), profile_stage("update_actor"):
                    work()
        assert [r["status"] for r in records(tmp_path, "trace")] == ["ok", "ok"]
        assert len(said(caplog, "no CUDA device", logging.INFO)) == 1
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("profdsl")]

    def test_regions_without_the_present_device_activity_are_incomplete(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """On a machine where CUDA is present (faked: the capture believes it records CUDA, torch
        records CPU), a trace holding the stage's regions but no device event is ``incomplete``."""
        monkeypatch.setattr(torch_args, "_device_recorded", lambda options, rank: "cuda")
        monkeypatch.setattr(torch_args, "_activities", lambda device: [torch.profiler.ProfilerActivity.CPU])
        with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update_actor"):
                work()
        (record,) = records(tmp_path, "trace")
        assert record["status"] == "incomplete"
        assert "no cuda activity" in record["reason"]
        ((name, trace),) = parsed(tmp_path)
        assert names(trace, "update_actor") == ["update_actor"]  # the CPU side is all there
        (line,) = check_fails(tmp_path, capsys)
        assert name.format() in line and "no cuda activity" in line

    def test_device_events_make_the_same_trace_ok(self, tmp_path: Path) -> None:
        """The same rule over a trace that holds a device event (a kernel, written into the events
        file of a real capture): ``ok``."""
        label = label_in(tmp_path)
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
        with torch.profiler.record_function("update_actor"):
            work()
        prof.stop()

        def write(path: str) -> dict[str, Any]:
            prof.export_chrome_trace(path)
            text = Path(path).read_text()
            kernel = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},'
            Path(path).write_text(text.replace('"traceEvents": [', '"traceEvents": [' + kernel, 1))
            return {}

        expect = Expect(device="cuda")
        assert finish(PendingTrace(write=write, label=label, window=None, time_ms=1, expect=expect))
        (record,) = records(tmp_path, "trace")
        assert record["status"] == "ok"


class TestDeviceStopped:
    @pytest.mark.filterwarnings("ignore:Device profiling activity collection was stopped early")
    @pytest.mark.filterwarnings("ignore:CUDA is not available")
    def test_a_window_torch_stopped_is_incomplete_and_the_next_is_whole(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """torch's own schedule enters DEVICE_STOPPED when kineto says its device collection
        stopped (faked: the flag, and the device torch's check requires): the callback fires with
        what was recorded; profdsl records that window ``incomplete``, keeps the mini-batch that
        ran unrecorded out of the next window, and the next window is whole and ``ok``."""
        stopped = {"now": False}
        monkeypatch.setattr(torch.autograd, "_is_kineto_stopped", lambda: stopped["now"])
        cfg = config(tmp_path, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=Schedule(active=2)))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update_actor", scheduled=True):
                session = PROCESS.slot.current
                assert session is not None and session.capture is not None
                session.capture._prof.use_device = "cuda"  # type: ignore[attr-defined]
                for index in mini_batch_window(range(4)):
                    stopped["now"] = index == 0  # read by torch's step() after mini-batch 0
                    work()
        traces = sorted(records(tmp_path, "trace"), key=lambda r: r["window"])
        assert [(r["window"], r["status"]) for r in traces] == [([0, 0], "incomplete"), ([2, 3], "ok")]
        assert "DEVICE_STOPPED" in traces[0]["reason"]
        windows = {tuple(n.window): names(t, "mini_batch") for n, t in parsed(tmp_path) if n.window}
        assert windows == {(0, 0): ["mini_batch0"], (2, 3): ["mini_batch2", "mini_batch3"]}
        assert len(said(caplog, "DEVICE_STOPPED")) == 1

    @pytest.mark.filterwarnings("ignore:Device profiling activity collection was stopped early")
    @pytest.mark.filterwarnings("ignore:CUDA is not available")
    def test_a_window_torch_lost_whole_is_recorded_not_dropped(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Entered from WARMUP, DEVICE_STOPPED fires the callback with an empty trace for the
        window ahead (torch: "the trace will be empty (no recording ran)"): profdsl writes it,
        named by that window, ``incomplete``; the next cycle records as usual."""
        stopped = {"now": False}
        monkeypatch.setattr(torch.autograd, "_is_kineto_stopped", lambda: stopped["now"])
        schedule = Schedule(warmup=1, active=1)
        cfg = config(tmp_path, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=schedule))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update_actor", scheduled=True):
                session = PROCESS.slot.current
                assert session is not None and session.capture is not None
                session.capture._prof.use_device = "cuda"  # type: ignore[attr-defined]
                for index in mini_batch_window(range(4)):
                    stopped["now"] = index == 0
                    work()
        traces = sorted(records(tmp_path, "trace"), key=lambda r: r["window"])
        assert [(r["window"], r["status"]) for r in traces] == [([1, 1], "incomplete"), ([3, 3], "ok")]
        assert "DEVICE_STOPPED" in traces[0]["reason"]
        windows = {tuple(n.window): names(t, "mini_batch") for n, t in parsed(tmp_path) if n.window}
        assert windows == {(1, 1): [], (3, 3): ["mini_batch3"]}
        fails = check_fails(tmp_path, capsys)
        assert len(fails) == 1 and "DEVICE_STOPPED" in fails[0]

    def test_profdsl_reads_the_state_torch_sets(self) -> None:
        """The state profdsl reads is torch's: the enum member exists and a profiler whose
        ``current_action`` is it reads as stopped (torch/profiler/profiler.py, line 658)."""
        action = torch.profiler.ProfilerAction.DEVICE_STOPPED

        class State:
            current_action = action

        assert torch_traces._device_stopped(State())
        State.current_action = torch.profiler.ProfilerAction.RECORD
        assert not torch_traces._device_stopped(State())


def test_check_reads_the_file_of_a_partial_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``incomplete`` trace with a file is read like an ``ok`` one: a cut-short file is
    reported as well as the loss."""
    monkeypatch.setattr(torch_args, "_device_recorded", lambda options, rank: "cuda")
    monkeypatch.setattr(torch_args, "_activities", lambda device: [torch.profiler.ProfilerActivity.CPU])
    with Profiler(config(tmp_path), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        profile_stage("update_actor")(work)()
    (path,) = [p for p in tmp_path.iterdir() if p.name.endswith(".json.gz")]
    path.write_bytes(path.read_bytes()[:40])
    fails = check_fails(tmp_path, capsys)
    assert len(fails) == 2 and any("no cuda activity" in f for f in fails) and any(path.name in f for f in fails)


class TestTorchValidation:
    """``profdsl check`` runs torch's own trace validation over the events its rules read."""

    def backward_trace(self, folder: Path) -> Path:
        model = torch.nn.Linear(4, 4)
        with Profiler(config(folder), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update_actor"):
                model(torch.ones(2, 4)).sum().backward()
        (path,) = [p for p in folder.iterdir() if p.name.endswith(".json.gz")]
        return path

    def test_a_valid_training_trace_passes(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.backward_trace(tmp_path)
        assert profdsl._cli.main(["check", str(tmp_path)]) == 0

    def test_a_violation_is_named(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Two different backward ops given one sequence number (torch's rule
        ``_check_backward_seq_id_uniqueness``): check names the rule and the trace."""
        pytest.importorskip("torch.profiler._trace_validator")
        path = self.backward_trace(tmp_path)
        trace = json.loads(gzip.decompress(path.read_bytes()))
        backward = [
            e
            for e in trace["traceEvents"]
            if "autograd::engine::evaluate_function:" in e.get("name", "") and "Sequence number" in e.get("args", {})
        ]
        ops = {e["name"] for e in backward}
        assert len(ops) >= 2
        for event in backward:
            event["args"]["Sequence number"] = 7
        path.write_bytes(gzip.compress(json.dumps(trace).encode()))
        (line,) = check_fails(tmp_path, capsys)
        assert path.name in line and "torch's trace validation" in line
        assert "_check_backward_seq_id_uniqueness" in line


class TestBoundedExit:
    """What profdsl asks of torch's capture: ``trace_only`` (never with ``stack``), combined with
    ``profile_all_threads``, and post-processing bounded by ``export_timeout_s``. torch would warn
    (an error here) if it were asked for ``trace_only`` with ``with_stack``."""

    @pytest.mark.parametrize(
        ("contents", "all_threads", "trace_only"),
        [(["cpu"], False, True), (["cpu", "stack"], False, False), (["cpu"], True, True)],
    )
    @pytest.mark.filterwarnings("error::UserWarning")
    def test_the_capture_torch_is_asked_for(
        self, tmp_path: Path, contents: list[str], all_threads: bool, trace_only: bool
    ) -> None:
        options = TorchOptions(contents=contents, all_threads=all_threads, export_timeout_s=7.5)
        seen: dict[str, Any] = {}
        with Profiler(config(tmp_path, torch=options), role="actor", rank=0, world_size=1) as profiler:
            with profiler.step(1), profile_stage("update_actor"):
                session = PROCESS.slot.current
                assert session is not None and session.capture is not None
                prof = session.capture._prof  # type: ignore[attr-defined]
                seen.update(
                    timeout=prof.post_processing_timeout_s,
                    config=prof.experimental_config,
                    every_thread=session.capture.every_thread,
                )
                work()
        assert seen["timeout"] == 7.5
        config_ = seen["config"]
        assert bool(config_ is not None and config_.trace_only) == trace_only
        assert seen["every_thread"] == all_threads  # in the same experimental config (torch's own check)
        assert [r["status"] for r in records(tmp_path, "trace")] == ["ok"]
