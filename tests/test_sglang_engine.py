"""The SGLang handles against the real engine: SGLang 0.5.23 on CPU (``SGLANG_USE_CPU_ENGINE=1``)
with the tiny Llama of examples/tiny_llama.py, an in-process ``sglang.Engine`` driven by
tests/sglang_driver.py through ``SGLangEngine`` and ``rollout_window``.

Optional and not run by .ci/run: SGLang lives in its own environment (``.sglang-venv``), which
``bash .ci/sglang-env.sh`` makes from a clean clone and then runs this file in (docs/rollout.md,
"SGLang on CPU"). Elsewhere these tests are skipped. The driver runs in its own process group,
bounded; the whole group (the scheduler and detokenizer processes) is killed and waited for
whatever happens, so no engine outlives its test.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profdsl.rollout import rollout_trace_dir
from profdsl.rollout._sglang_handle import SCRATCH_DIR

from .engine_checks import GENERATE, Driven, check_output, run_in_group, stage_counts
from .profiling import records

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("sglang") is None,
        reason="SGLang is not installed here: its real-engine test runs in its own environment "
        "(bash .ci/sglang-env.sh makes .sglang-venv and runs it; see docs/rollout.md, SGLang on CPU)",
    ),
    pytest.mark.timeout(1800),  # an engine starts in 15-40 s on a shared machine; never flaky
    pytest.mark.slow,  # the driver starts an engine in a subprocess
]

#: How long the driver may run (start-up, every scenario, shut-down) before its group is killed.
DRIVER_TIMEOUT_S = 900.0
STAGE = "update_actor"


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Driven:
    """The tiny model built offline, then every scenario of tests/sglang_driver.py on one engine."""
    tmp = tmp_path_factory.mktemp("sglang")
    model, out, report, log = tmp / "tiny-llama", tmp / "profiles", tmp / "report.json", tmp / "driver.log"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tiny_llama.py"), str(model)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    command = [
        sys.executable,
        "-m",
        "tests.sglang_driver",
        "--model",
        str(model),
        "--out",
        str(out),
        "--report",
        str(report),
    ]
    code = run_in_group(command, log=log, timeout=DRIVER_TIMEOUT_S, cwd=ROOT)
    data = json.loads(report.read_text()) if report.exists() else {"scenarios": {}}
    return Driven(code, log.read_text(errors="replace"), data, out)


def rollout(folder: Path) -> list[tuple[int, str, str]]:
    """(step, status, the engine file it came from) of each rollout record, sorted."""
    return sorted(
        (r["step"], r["status"], Path(r["source"]).name if r.get("source") else r.get("call") or "")
        for r in records(folder, "rollout")
    )


def events(path: Path) -> int:
    with gzip.open(path, "rt") as f:
        return len(json.load(f)["traceEvents"])


def assert_collected(folder: Path, steps: tuple[int, ...]) -> None:
    """Each of ``steps`` has one SGLang trace (``step<S>-replica0-<id>-TP-0``), moved into save_path
    under profdsl's name with an ``ok`` record; nothing is left in the replica's folder."""
    ok = [r for r in records(folder, "rollout") if r["status"] == "ok"]
    assert sorted(r["step"] for r in ok) == list(steps)
    for r in ok:
        name = Path(r["source"]).name
        assert name.startswith(f"step{r['step']}-replica0-") and name.endswith("-TP-0.trace.json.gz"), name
        assert Path(r["path"]).name.startswith(f"rollout_step{r['step']:06d}_rank0-of-1_replica0_")
        assert (folder / r["path"]).stat().st_size == r["bytes"] > 0
        assert events(folder / r["path"]) > 0
    replica = Path(rollout_trace_dir(str(folder), 0))  # left empty, it is removed (issue 29)
    assert not replica.exists() or sorted(p.name for p in replica.iterdir()) == []


def test_the_engine_is_sglang_0_5_23(driven: Driven) -> None:
    driven.scenario("until_stop")
    assert driven.report["version"] == "0.5.23"


class TestWindows:
    """Profiled rollout windows (steps 2 and 3 of 1-4) through ``SGLangEngine``."""

    def test_until_stop(self, driven: Driven) -> None:
        """Recorded until the window's stop: each profiled step's trace collected; the summary
        shows one generate entry beside the trainer's stage per profiled step; check all well."""
        driven.scenario("until_stop")
        folder = driven.out / "until_stop"
        assert_collected(folder, (2, 3))
        counts = stage_counts(folder)
        for step in (1, 2, 3, 4):
            # and the window's own region in the trainer's trace, where generation ran (issue 29)
            expected = {GENERATE: 1, STAGE: 1, "rollout": 1} if step in (2, 3) else {}
            assert {stage: n for (s, _, stage), n in counts.items() if s == step} == expected
        code, text = check_output(folder)
        assert code == 0 and "all well" in text, text

    def test_bounded(self, driven: Driven) -> None:
        """SGLang ends the window after ``max_iterations`` engine steps; the handle's stop is
        then refused ("not in progress"), which is no failure: fewer events, nothing recorded
        failed."""
        driven.scenario("bounded")
        folder = driven.out / "bounded"
        assert_collected(folder, (2, 3))
        assert [r for r in records(folder) if r["status"] != "ok"] == []
        code, text = check_output(folder)
        assert code == 0, text
        bounded = [events(folder / r["path"]) for r in records(folder, "rollout")]
        whole = [events(driven.out / "until_stop" / r["path"]) for r in records(driven.out / "until_stop", "rollout")]
        assert max(bounded) < min(whole)


class TestSGLangBehaviour:
    """What SGLang 0.5.23 itself does (the engine driven directly): the two behaviours the handle
    works around, as tests/fake_engines.py's FakeSGLangEngine models them."""

    def test_a_plain_start_while_one_runs_is_accepted_and_replaces_it(self, driven: Driven) -> None:
        """(a) No error; the one trace is written under the first request's folder and name."""
        report = driven.scenario("raw_replace")
        assert report["second_start"] == "accepted"
        assert [n.split("-", 1)[0] for n in report["first"]] == ["first"]
        assert report["second"] == []

    def test_a_pending_start_survives_a_refused_stop(self, driven: Driven) -> None:
        """(b) A stop before the ``start_step`` came is refused as not in progress; later traffic
        starts the armed profile, which writes a trace nobody asked for."""
        report = driven.scenario("raw_pending")
        assert "Profiling is not in progress" in report["stop"]
        assert report["before_traffic"] == []
        assert [n.split("-", 1)[0] for n in report["after_traffic"]] == ["pending"]


class TestHandleCopes:
    """The handle against (a) and (b) on the real engine (with 09faa7e's SGLangEngine, before the
    handle settled and disarmed, all three fail: step 3's generation filed as step 1's, and the
    armed start writing a step 1 trace in unprofiled traffic)."""

    def test_never_starts_while_its_profile_may_run(self, driven: Driven) -> None:
        """Step 1's stop fails (a transport fault): its profile runs on through step 2. Step 3's
        window first ends it (its file renamed stray and recorded so, not as step 1's
        generation), then gets a trace of its own."""
        driven.scenario("left_running")
        folder = driven.out / "left_running"
        got = rollout(folder)
        assert [(s, status) for s, status, _ in got] == [(1, "failed"), (1, "stray"), (3, "ok")]
        assert got[0][2] == "stop_profile"
        assert got[1][2].startswith("stray-step1-replica0-")
        assert_collected(folder, (3,))
        assert [k for k in stage_counts(folder) if k[2] == GENERATE] == [(3, "rollout", GENERATE)]
        code, text = check_output(folder)
        assert code == 1 and "stray" in text, text

    def test_never_leaves_a_pending_start_armed(self, driven: Driven) -> None:
        """Step 1's window ends before its delayed start; the stop is refused and the handle
        disarms SGLang: step 2's unprofiled traffic writes nothing, step 3 is collected, no
        failure, no stray, no scratch folder left."""
        report = driven.scenario("disarmed")
        folder = driven.out / "disarmed"
        assert report["replica_folder_before_step"] == {"1": [], "2": [], "3": []}
        assert rollout(folder)[0][:2] == (3, "ok") and len(rollout(folder)) == 1
        assert_collected(folder, (3,))
        assert [r for r in records(folder) if r["status"] != "ok"] == []
        assert not (Path(rollout_trace_dir(str(folder), 0)) / SCRATCH_DIR).exists()
        code, text = check_output(folder)
        assert code == 0, text

    def test_records_what_an_armed_start_wrote_as_stray(self, driven: Driven) -> None:
        """When disarming fails (a transport fault), the armed start fires in step 2's traffic
        and writes a trace under step 1's name: recorded stray, and check names it."""
        report = driven.scenario("armed_stray")
        folder = driven.out / "armed_stray"
        assert [n.split("-", 1)[0] for n in report["replica_folder_before_step"]["3"]] == ["step1"]
        got = rollout(folder)
        assert [(s, status) for s, status, _ in got] == [(1, "failed"), (1, "stray"), (3, "ok")]
        assert got[1][2].startswith("stray-step1-replica0-")
        assert_collected(folder, (3,))
        code, text = check_output(folder)
        assert code == 1 and "rollout stray written by an engine profile" in text, text
