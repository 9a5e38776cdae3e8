"""`profdsl demo`, as the README runs it, in both modes (real subprocesses; Ray for --ray)."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from profdsl.manifest import read_manifest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")


@pytest.mark.parametrize("mode", ["local", "ray"])
def test_demo(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    """The demo profiles steps 2 and 3 of 0..7 on rank 0: each stage's trace, the scheduled
    update's window, replica 0's rollout trace, one hook run that packs the folder. Step 5 is
    made slow on the last rank: the run alerts, traces step 6 once (on Ray: the slow rank and
    rank 0, the typical one), one hook run per request and traced rank, and the slow step's
    time is shown in its actor update, from the metrics log."""
    if mode == "ray":
        pytest.importorskip("ray")
        request.getfixturevalue("own_ray_cluster")  # its own, in the subprocess (tests/conftest.py)
        out = tmp_path / "profiles"
        command = [sys.executable, "-m", "profdsl", "demo", "--out", str(out), "--ray"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    else:  # the session's run (tests/conftest.py), which tests/test_stage_model.py reads too
        result, out = request.getfixturevalue("demo_run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "step 7 of 0..7" in result.stdout and "where each step went" in result.stdout
    assert "step 5 of 0..7 (made slow)" in result.stdout
    records = read_manifest(out)
    stages = sorted({(r["role"], r["stage"], r["step"]) for r in records if r["kind"] == "trace"})
    assert stages == sorted(
        (role, stage, step)
        for step in (2, 3, 6)
        for role, stage in (
            ("actor", "update_actor"),
            ("ref", "compute_ref_log_prob"),
            ("critic", "compute_values"),
            ("critic", "update_critic"),
        )
    )
    # the plan's steps on rank 0; step 6, caught by itself, on the slow rank (and rank 0 on Ray)
    slow_rank, caught = (1, {0, 1}) if mode == "ray" else (0, {0})
    assert {(r["step"], r["rank"]) for r in records if r["kind"] == "trace"} == {
        (2, 0),
        (3, 0),
        *((6, rank) for rank in caught),
    }
    assert {
        r["step"] for r in records if r["kind"] == "trace" and (r.get("capture") or {}).get("source") == "auto"
    } == {6}
    assert {tuple(r["window"]) for r in records if r["stage"] == "update_actor"} == {(1, 2)}
    assert "profiling's own cost" in result.stdout, result.stdout  # every trace record carries blocked_ms
    cost = result.stdout.split("profiling's own cost", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    assert sorted(line.split()[:2] for line in cost) == sorted(
        [role, str(step)] for role in ("actor", "critic", "ref") for step in (2, 3, 6)
    ), result.stdout
    rollouts = [(2, 0), (3, 0)] + ([] if mode == "ray" else [(6, 0)])  # the driver's capture names the roles
    assert sorted((r["step"], r["replica"]) for r in records if r["kind"] == "rollout") == rollouts
    # The always-on table: every stage of all eight steps on every rank, beside the traces' figures.
    table = result.stdout.split("always-on metrics", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    rows = {tuple(line.split()[:2]): line.split() for line in table}
    ranks, traced = ("2", 4) if mode == "ray" else ("1", 3)
    for role, stage in (
        ("actor", "update_actor"),
        ("ref", "compute_ref_log_prob"),
        ("critic", "compute_values"),
        ("critic", "update_critic"),
    ):
        assert rows[(role, stage)][2:4] == ["8", ranks] and rows[(role, stage)][-2] == str(traced), result.stdout
    # the traces hold the recorded mini-batches under the scheduled stage: 2 windows' worth each
    assert rows[("actor", "update_actor/mini_batch")][-2] == str(2 * traced), result.stdout
    # the hook: once for the plan (rank 0), once per automatic request on each rank it traced
    ran = {
        ((r.get("capture") or {}).get("request"), r["rank"])
        for r in records
        if r["kind"] == "hook" and r["status"] == "ok"
    }
    assert ran == (
        {(None, 0), ("auto-r1-s6", 1), ("auto-ranks-s6", 0)}  # rank 1: its own and the driver's are one capture
        if mode == "ray"
        else {(None, 0), ("auto-r0-s6", 0)}
    )
    assert sum(r["kind"] == "hook" and r["status"] == "ok" for r in records) == len(ran)
    # the story: the alert, the automatic capture and why, where the slow step's time went
    alerts = [line for line in result.stdout.splitlines() if line.startswith("  alert: ")]
    if mode == "ray":
        assert any("straggler: rank 1 took" in line for line in alerts), result.stdout
        assert any("slow rank: actor update_actor on rank 1" in line for line in alerts), result.stdout
    else:
        assert any("slow step: actor: update_actor took" in line and "tracing step 6" in line for line in alerts), (
            result.stdout
        )
    captures = result.stdout.split("automatic captures", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert sorted(line.split(":")[0].strip() for line in captures) == [
        f"step 6 rank {rank} (actor, critic, ref)" for rank in sorted(caught)
    ], result.stdout
    went = result.stdout.split("where the slow step's time went", 1)[1].split("\n\n", 1)[0].splitlines()
    assert f"step 5 on rank {slow_rank}" in went[0]
    # the step ledger of every step (the metrics'), each row adding up, and each step's fleet lines
    ledger = result.stdout.split("the step ledger (every step", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    rows = [line.split() for line in ledger if line.split()[0].isdigit()]
    roles = {"actor", "critic", "ref"} | ({"driver"} if mode == "ray" else set())
    assert {(int(r[0]), r[1]) for r in rows} == {(s, role) for s in range(8) for role in roles}, result.stdout
    for row in rows:
        assert sum(map(float, row[4:])) == pytest.approx(float(row[3]), abs=0.02 * len(row[4:]))
    assert any("ranks idle" in line and "of step 5 while" in line for line in ledger), result.stdout
    if mode == "ray":  # the driver's fleet line, after each step
        assert "  fleet: actor ranks idle " in result.stdout
    assert went[3].split()[:2] in (["actor", "update_actor"], ["actor", "update_actor/mini_batch"]), result.stdout
    check = subprocess.run(
        [sys.executable, "-m", "profdsl", "check", str(out)], capture_output=True, text=True, timeout=600
    )
    assert check.returncode == 0, check.stdout
    with tarfile.open(str(out) + ".tgz") as tar:
        packed = {Path(n).name for n in tar.getnames()}
    # The plan's traces are packed by every run after them; a trace of step 6 may be written after
    # another rank's hook packed the folder (each rank's request hook runs after its own traces).
    assert {r["path"] for r in records if r["path"] and r["kind"] == "trace" and r["step"] in (2, 3)} <= packed
    assert "profdsl-manifest.jsonl" in packed
    # no empty engine folder is left behind (issue 29 item 9: rollout_replica_0/ was)
    assert [p for p in out.rglob("*") if p.is_dir() and not any(p.iterdir())] == []


def _demo(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "profdsl", "demo", "--out", str(out), "--steps", "1", "--num-steps", "3"]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_the_demo_warns_about_nothing_of_its_own(tmp_path: Path) -> None:
    """The demo's output is its own report only: no warning about the demo's code (a stage bound
    to no role), and none of kineto's per-session USDT lines (the command line quiets kineto,
    KINETO_LOG_LEVEL, when the user has not set it)."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    result = _demo(tmp_path / "profiles", env)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    for noise in ("USDT:", "bound to no role", "NumPy", "WARNING", "Warning"):
        assert noise not in output, (noise, output[-3000:])


def test_a_kineto_log_level_the_user_set_is_kept(tmp_path: Path) -> None:
    """KINETO_LOG_LEVEL set by the user wins: at 5 kineto prints its USDT lines again."""
    result = _demo(tmp_path / "profiles", {**os.environ, "KINETO_LOG_LEVEL": "5"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "USDT:" in result.stdout + result.stderr


def test_the_torch_extra_brings_numpy() -> None:
    """torch without NumPy warns at import ("Failed to initialize NumPy"): the torch extra,
    which the README's set-up line installs, brings it."""
    parser = configparser.ConfigParser()
    parser.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    extras = parser["options.extras_require"]
    for extra in ("torch", "all"):
        names = {line.split(">")[0].split("=")[0].strip() for line in extras[extra].splitlines() if line.strip()}
        assert "numpy" in names, extra


@pytest.mark.slow
def test_the_slow_step_is_caught_on_a_slow_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a loaded machine every actor update is slow too, so a fixed hold-up can fall under the
    demo's own threshold (a shared CI machine: a 1.5 s hold-up against 0.5 s updates, 2.7x under
    3x, no step traced by itself). Each mini-batch is made 0.1 s slower here and the hold-up asked
    for is 0.1 s: the demo still holds the slow step up enough to catch it."""
    import argparse

    from profdsl import _demo as demo
    from profdsl._demo import workers

    real = workers.mini_batch_window

    def slow_machine(batches: Any, **kwargs: Any) -> Any:
        for item in real(batches, **kwargs):
            time.sleep(0.1)
            yield item

    monkeypatch.setattr(workers, "mini_batch_window", slow_machine)
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    out = tmp_path / "profiles"
    assert demo.run(parser.parse_args(["--out", str(out), "--slow-seconds", "0.1"])) == 0
    records = read_manifest(out)
    auto = {r["step"] for r in records if r["kind"] == "trace" and (r.get("capture") or {}).get("source") == "auto"}
    assert auto == {6}, capsys.readouterr().out


def test_the_demo_says_why_its_overhead_and_blocked_ms_differ(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """In the demo's folder, each traced step's ledger overhead is its profiling waits as its
    metrics log line timed them (its stage captures' starts and stops, the actor's schedule steps
    between its mini-batches, its waits on rollout engines' profilers; the actor's from its metrics
    log line, its scheduled update traced in windows only): at least the start and
    stop parts of its stage captures' blocked ms (the cost table's figure) plus its engine waits;
    the actor, which drives the rollout, waits on the engines, the other roles do not. The
    report's ledger and cost table each say what they count."""
    from profdsl.analysis import _cost as cost
    from profdsl.analysis._catalog import catalog
    from profdsl.analysis._ledger import load_ledger
    from profdsl.collect.metrics_log import read_log

    result, out = demo_run
    assert result.returncode == 0, result.stderr[-3000:]
    found = catalog(out).artifacts
    costs = {(c.role, c.step, c.rank): c for c in cost.rank_costs(found)}
    lines = {(line.role, line.step, line.rank): line for line in read_log(out)[0]}
    engines = {key: line.ledger_engines_s or 0.0 for key, line in lines.items()}
    ledger = load_ledger(str(out), found, [])
    ranks = [r for r in ledger.ranks if r.ledger is not None and r.group[1] is None]
    # the actor's scheduled update is traced in windows: its traced steps' ledgers are the metrics log's
    windowed = {(r.role, r.step, r.rank) for r in ledger.ranks if r.ledger is None and r.group[1] is None}
    assert {(role, s) for role, s, _ in windowed} == {("actor", s) for s in (2, 3, 6)}
    ranks += [r for r in ledger.metrics if (r.role, r.step, r.rank) in windowed]
    assert {(r.role, r.step) for r in ranks} == {(role, s) for role in ("actor", "critic", "ref") for s in (2, 3, 6)}
    for rank in ranks:
        key = (rank.role, rank.step, rank.rank)
        assert rank.ledger is not None and rank.ledger.overhead_unplaced == 0, key
        waits = lines[key].ledger_waits_s
        assert waits is not None and rank.ledger.buckets["overhead"] == round(waits * 1e9), key
        held_ms = (costs[key].init_ms or 0.0) + (costs[key].start_ms or 0.0) + (costs[key].stop_ms or 0.0)
        at_least = round(held_ms * 1e6) + round(engines[key] * 1e9) - 1500 * costs[key].traces  # (us-rounded parts)
        assert rank.ledger.buckets["overhead"] >= at_least, key
        assert (engines[key] > 0) == (rank.role == "actor"), key
    ledger_title = next(line for line in result.stdout.splitlines() if line.startswith("the step ledger (every step"))
    assert "rollout engines' profilers" in ledger_title and "the cost table below counts profdsl's captures" in (
        ledger_title
    )
    assert "not on rollout engines' profilers" in result.stdout.split("profiling's own cost", 1)[1].splitlines()[0]
