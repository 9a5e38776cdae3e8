"""The trace-size budget (``TorchOptions.max_trace_mb``, issue 33): a trace estimated past it is
warned about before it starts, and ended early at the mini-batch where it would pass it, on
real CPU captures sized to cross a small budget; the trace is kept, recorded ``truncated`` with
the reason and its size, said once, flagged by ``profdsl check``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import profdsl._cli
from profdsl import ConfigError, Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.core._trace_size import SizeBook
from profdsl.core._units import MB

from .profiling import config, records, work
from .traces import names, parsed

torch = pytest.importorskip("torch")

#: torch ops per mini-batch: about 60 kB of JSON each on torch 2.13.
OPS = 40
BUDGET_MB = 0.4


def mini_batches(n: int) -> None:
    with profile_stage("update_actor"):
        for _ in mini_batch_window(range(n)):
            for _ in range(OPS):
                work()


def settled() -> None:
    """The writer is through (the budget learns a trace's size once it is written)."""
    assert PROCESS.writer.wait(timeout=120)


def said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def test_a_continuous_step_past_the_budget_is_cut_at_a_mini_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step 1 (2 mini-batches) is measured; step 2 would record 40: it records the first k, k
    such that the estimate of k + 1 passes the budget, and its file holds exactly those."""
    cfg = config(tmp_path, steps=[1, 2, 3], torch=TorchOptions(contents=["cpu"], max_trace_mb=BUDGET_MB))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            mini_batches(2)
        settled()
        with profiler.step(2):
            mini_batches(40)
        settled()
        with profiler.step(3):
            mini_batches(2)
    traces = {r["step"]: r for r in records(tmp_path, "trace")}
    first, cut, after = traces[1], traces[2], traces[3]
    assert (first["status"], cut["status"], after["status"]) == ("ok", "truncated", "ok")
    per_batch = first["json_bytes"] / 2
    kept = int(BUDGET_MB * MB // per_batch)  # the estimate of kept + 1 passes the budget
    assert cut["window"] is None and cut["windows"] == [{"role": "actor", "step": 2, "window": [0, kept - 1]}]
    assert f"after {kept} mini-batch(es)" in cut["reason"] and "max_trace_mb=0.4" in cut["reason"]
    assert cut["json_bytes"] <= BUDGET_MB * MB  # the bound holds, the trace is kept
    by_step = {n.step: t for n, t in parsed(tmp_path)}
    assert names(by_step[2], "mini_batch") == [f"mini_batch{i}" for i in range(kept)]
    assert names(by_step[2], "update_actor") == ["update_actor"]  # the stage around them is whole
    assert names(by_step[3], "mini_batch") == ["mini_batch0", "mini_batch1"]  # collection is back on
    assert len(said(caplog, "ended early")) == 1
    capsys.readouterr()
    assert profdsl._cli.main(["check", str(tmp_path)]) == 1
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("FAIL")]
    assert "trace truncated" in line and "ended early" in line


def test_a_trace_estimated_past_the_budget_is_warned_about_before_it_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last step's trace passed the budget (measured: a first trace is never cut): the next
    one is said to be likely over it, once, before it starts."""
    cfg = config(tmp_path, steps=[1, 2, 3], torch=TorchOptions(contents=["cpu"], max_trace_mb=0.05))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        for step in (1, 2, 3):
            with profiler.step(step), profile_stage("update_actor"):
                for _ in range(4 * OPS):
                    work()
            settled()
    assert [r["status"] for r in records(tmp_path, "trace")] == ["ok", "ok", "ok"]  # no mini-batch to cut at
    (line,) = said(caplog, "will likely weigh")
    assert "max_trace_mb=0.05" in line


def test_a_discrete_stage_is_cut_and_its_next_trace_is_whole(tmp_path: Path) -> None:
    cfg = config(tmp_path, steps=[1, 2], discrete=True, torch=TorchOptions(contents=["cpu"], max_trace_mb=BUDGET_MB))
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1):
            mini_batches(2)
        settled()
        with profiler.step(2):
            mini_batches(40)
    statuses = [(r["step"], r["stage"], r["status"]) for r in records(tmp_path, "trace")]
    assert statuses == [(1, "update_actor", "ok"), (2, "update_actor", "truncated")]
    cut = next(t for n, t in parsed(tmp_path) if n.step == 2)
    assert 0 < len(names(cut, "mini_batch")) < 40


def test_a_scheduled_window_is_cut_and_the_next_window_records_again(tmp_path: Path) -> None:
    """Windows of 20 mini-batches; the first is measured (the step before), the next are cut,
    and each window after a cut starts recording again."""
    schedule = Schedule(active=20)
    options = TorchOptions(contents=["cpu"], schedule=schedule, max_trace_mb=BUDGET_MB)
    cfg = config(tmp_path, steps=[1, 2], discrete=True, torch=options)
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
        with profiler.step(1), profile_stage("update_actor", scheduled=True):
            for _ in mini_batch_window(range(2)):
                for _ in range(OPS):
                    work()
        settled()
        with profiler.step(2), profile_stage("update_actor", scheduled=True):
            for _ in mini_batch_window(range(40)):
                for _ in range(OPS):
                    work()
    step2 = sorted((r["window"], r["status"]) for r in records(tmp_path, "trace") if r["step"] == 2)
    assert step2 == [([0, 19], "truncated"), ([20, 39], "truncated")]
    held = sorted((n.window, names(t, "mini_batch")) for n, t in parsed(tmp_path) if n.step == 2)
    (w1, first), (w2, second) = held
    assert first and second and len(first) == len(second) < 20
    assert first[0] == "mini_batch0" and second[0] == "mini_batch20"  # recording resumed at the window


def test_no_budget_and_bad_values() -> None:
    assert TorchOptions(max_trace_mb=None).max_trace_mb is None
    assert TorchOptions().max_trace_mb == 500.0
    for bad in (0, -1, "500", True, float("nan")):
        with pytest.raises(ConfigError, match="max_trace_mb"):
            TorchOptions(max_trace_mb=bad)


@pytest.mark.parametrize("tiny", [1e-9, 4e-7, 9.99e-7])
def test_a_budget_under_one_byte_is_refused_naming_the_field(
    tiny: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace is bytes: a bound under one byte was kept as 0 bytes and shown as
    ``max_trace_mb=0``. It is refused where it is given, ``profdsl plan`` included."""
    with pytest.raises(ConfigError, match=r"TorchOptions\.max_trace_mb must be .*one byte.*, got "):
        TorchOptions(max_trace_mb=tiny)
    assert TorchOptions(max_trace_mb=1e-6).max_trace_mb == 1e-6  # one byte is a bound
    cfg = tmp_path / "profiler.yaml"
    cfg.write_text(f"enable: true\nsteps: [1]\nsave_path: {tmp_path}\ntorch: {{max_trace_mb: {tiny!r}}}\n")
    capsys.readouterr()
    assert profdsl._cli.main(["plan", str(cfg), "--world-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "max_trace_mb must be" in err and repr(tiny) in err


def test_the_estimate_scales_with_mini_batches() -> None:
    book = SizeBook()
    book.learn(None, json_bytes=1000, mini_batches=4)
    book.learn("update", json_bytes=700, mini_batches=0)
    assert book.estimate(None, 8) == 2000 and book.estimate(None, None) == 1000
    assert book.estimate("update", 8) == 700 and book.estimate("other", 1) is None


class TestPlan:
    """``profdsl plan`` says what each trace will likely weigh, from the traces in save_path."""

    def plan(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
        cfg = tmp_path / "profiler.yaml"
        cfg.write_text(
            f"enable: true\nsteps: [1]\nsave_path: {tmp_path / 'profiles'}\n"
            "torch: {contents: [cpu], max_trace_mb: 0.4}\n"
        )
        capsys.readouterr()
        assert profdsl._cli.main(["plan", str(cfg), "--world-size", "1", *extra]) == 0
        return capsys.readouterr().out

    def test_before_a_first_trace_it_says_it_cannot_know(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = self.plan(tmp_path, capsys)
        assert "likely trace size: cannot be known before a first trace" in out

    def test_from_earlier_traces_it_scales_by_mini_batches_and_warns_past_the_budget(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        cfg = config(tmp_path / "profiles", torch=TorchOptions(contents=["cpu"], max_trace_mb=None))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            mini_batches(2)
        (record,) = records(tmp_path / "profiles", "trace")
        out = self.plan(tmp_path, capsys, "--mini-batches", "16")
        (line,) = [x for x in out.splitlines() if x.startswith("likely trace size: actor step")]
        expected = round(record["json_bytes"] / 2 * 16) / MB
        assert f"about {expected:.1f} MB of JSON" in line and "times 16" in line
        assert ("over max_trace_mb=0.4" in line) == (expected > 0.4)
        data = json.loads(self.plan(tmp_path, capsys, "--mini-batches", "16", "--json"))
        (size,) = data["trace_sizes"]
        assert (size["role"], size["stage"], size["mini_batches"]) == ("actor", None, 16)
        assert size["json_bytes"] == round(record["json_bytes"] / 2 * 16)
