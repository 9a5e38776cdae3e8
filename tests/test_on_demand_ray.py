"""On-demand and automatic captures on a real local Ray cluster (the session's: tests/conftest.py): the
driver's request() and a request file trace exactly the steps, ranks and roles asked on every
worker and engine; the driver traces a slow rank beside a typical one once within max_captures;
a straggler is logged once per episode, in the flat metrics and on its rank's endpoint."""

from __future__ import annotations

import logging
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from profdsl import AutoCapture, Metrics, ProfilerConfig, Stragglers, TorchOptions
from profdsl.collect._requests import write_request
from profdsl.manifest import read_manifest
from profdsl.ray import RayStepProfiler
from profdsl.records.requests import CaptureRequest

from .metrics_actors import PacedWorker
from .ray_actors import SamplerActor

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
pytest.importorskip("torch")


def remote(cls: type, *args: Any) -> Any:
    return ray.remote(num_cpus=0)(cls).remote(*args)


def traces(save: Path) -> set[tuple[str, int, int]]:
    return {
        (r["role"], r["step"], r["rank"]) for r in read_manifest(save) if r["kind"] == "trace" and r["status"] == "ok"
    }


def test_request_and_request_file_trace_exactly_what_was_asked(ray_cluster: str, tmp_path: Path) -> None:
    """Nothing planned, metrics off (workers are driven only when something is traced).
    ``request(2, ranks=[1], roles=["actor"])`` before step 2: rank 1's actor at steps 2 and 3,
    no engine. A request file (every rank and role) before step 5: both ranks and roles at step
    5, the same step on each, and the engine replica the config selects (the driver finds the
    file and passes it on pinned to step 5; the workers, not driven at step 4, would not)."""
    config = ProfilerConfig(enable=True, save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))
    workers = [remote(PacedWorker, config, rank, 2, 0.0, {}) for rank in range(2)]
    engines = [remote(SamplerActor, config, 0)]
    trainer = RayStepProfiler(config, workers=workers, engines=engines)
    asked = None
    for step in range(7):
        if step == 2:
            asked = trainer.request(2, ranks=[1], roles=["actor"], reason="rank 1 looks odd")
        if step == 5:
            write_request(str(tmp_path), CaptureRequest(id="everyone", steps=1, ranks="all", created=time.time()))
        with trainer.step(step):
            with trainer.rollout():
                ray.get([e.generate.remote(4) for e in engines])
            ray.get([w.update.remote(step) for w in workers])
    trainer.close()
    assert trainer.errors == []
    # fused roles share the process's one session: one trace per step, named by the first role
    assert traces(tmp_path) == {("actor", 2, 1), ("actor", 3, 1), ("actor", 5, 0), ("actor", 5, 1)}
    records = read_manifest(tmp_path)
    assert sorted(r["step"] for r in records if r["kind"] == "rollout") == [5]
    trace = {(r["step"], r["rank"]): r for r in records if r["kind"] == "trace"}
    assert trace[(2, 1)]["capture"] == {
        "source": "ray",
        "request": asked,
        "steps": [2, 3],
        "reason": "rank 1 looks odd",
    }
    assert trace[(2, 1)].get("roles") in (None, ["actor"])  # ref was not asked
    for rank in (0, 1):
        assert trace[(5, rank)]["roles"] == ["actor", "ref"]
        assert trace[(5, rank)]["capture"] == {"source": "file", "request": "everyone", "steps": [5, 5]}


def test_slow_rank_and_straggler(ray_cluster: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Rank 1's update takes 0.5 s at steps 6 and 10 (else 20 ms) and 0.3 s at steps 12-14. The
    slow step 6 traces step 7 on rank 1 (its own rolling median) and on rank 0, the typical rank
    (the driver's comparison), once: step 10 is not captured (max_captures=1). Steps 12-14 make
    one straggler episode: logged once, in the flat metrics, and on rank 1's Prometheus endpoint
    (back to 0 when it ends)."""
    pytest.importorskip("prometheus_client")
    config = ProfilerConfig(
        enable=True,
        save_path=str(tmp_path),
        torch=TorchOptions(contents=["cpu"]),
        auto=AutoCapture(
            stages=["update_actor"],
            slower_than=5.0,
            baseline_steps=3,
            max_captures=1,
            cooldown_steps=0,
            min_seconds=0.2,
        ),
        metrics=Metrics(
            enabled=True,
            exporters=["prometheus"],
            port=0,
            stragglers=Stragglers(factor=5.0, consecutive=3, min_seconds=0.2, stages=["update_actor"]),
        ),
    )
    slow = {6: 0.5, 10: 0.5, 12: 0.3, 13: 0.3, 14: 0.3}
    workers = [remote(PacedWorker, config, 0, 2, 0.02, {}), remote(PacedWorker, config, 1, 2, 0.02, slow)]
    trainer = RayStepProfiler(config, workers=workers)
    port = ray.get(workers[1].metrics_port.remote())
    flats: dict[int, dict[str, float]] = {}
    gauges: dict[int, float] = {}
    with caplog.at_level(logging.INFO, logger="profdsl"):
        for step in range(17):
            with trainer.step(step):
                ray.get([w.update.remote(step) for w in workers])
            assert trainer.metrics is not None
            flats[step] = trainer.metrics.flat()
            if step in (14, 15, 16):
                gauges[step] = _gauge(port)
    trainer.close()
    assert trainer.errors == []
    assert traces(tmp_path) == {("actor", 7, 0), ("actor", 7, 1)}  # one fused trace per rank
    notes = {r["rank"]: r["capture"] for r in read_manifest(tmp_path) if r["kind"] == "trace" and r["role"] == "actor"}
    assert notes[0]["source"] == "auto" and "rank 1 took" in notes[0]["reason"]
    assert "rank 0 is typical" in notes[0]["reason"]
    assert notes[1]["source"] == "auto" and notes[1]["steps"] == [7, 7]
    assert caplog.text.count("straggler: rank 1 took") == 1
    assert "for 3 consecutive steps (steps 12-14)" in caplog.text
    assert "straggler episode over: rank 1" in caplog.text
    key = "actor/update_actor"
    assert flats[14][f"timing_straggler_rank/{key}"] == 1 and flats[14][f"timing_straggler_steps/{key}"] == 3
    assert flats[14][f"timing_straggler_factor/{key}"] > 5
    assert not any(k.startswith("timing_straggler") for k in flats[13]) and not any(
        k.startswith("timing_straggler") for k in flats[15]
    )
    # the alert of step 14 reaches rank 1's endpoint with step 15's start, its end with step 16's
    assert gauges[14] == 0.0 and gauges[15] > 5 and gauges[16] == 0.0


def _gauge(port: int) -> float:
    """``profdsl_straggler_factor{role="actor",stage="update_actor",rank="1"}`` on the endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "profdsl_straggler_factor":
            for sample in family.samples:
                if sample.labels == {"role": "actor", "stage": "update_actor", "rank": "1"}:
                    return float(sample.value)
    return 0.0


def test_a_request_every_worker_refused_blinds_nothing(
    ray_cluster: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``request(50)`` (over ``OnDemand.max_steps``: every worker refuses it) before step 0 traces
    nothing; the driver still counts steps 0-49 as untraced, so rank 1's straggler episode at steps
    2-4 is found (it is blind to traced steps, whose times profiling skews)."""
    config = ProfilerConfig(
        enable=True,
        save_path=str(tmp_path),
        torch=TorchOptions(contents=["cpu"]),
        metrics=Metrics(enabled=True, stragglers=Stragglers(factor=5.0, consecutive=3, min_seconds=0.2)),
    )
    slow = {2: 0.3, 3: 0.3, 4: 0.3}
    workers = [remote(PacedWorker, config, 0, 2, 0.02, {}), remote(PacedWorker, config, 1, 2, 0.02, slow)]
    trainer = RayStepProfiler(config, workers=workers)
    with caplog.at_level(logging.INFO, logger="profdsl"):
        assert trainer.request(50, ranks="all") is not None
        for step in range(6):
            with trainer.step(step):
                ray.get([w.update.remote(step) for w in workers])
    trainer.close()
    assert trainer.errors == []
    assert traces(tmp_path) == set()
    assert caplog.text.count("straggler: rank 1 took") == 1, caplog.text


def test_a_straggler_that_stops_reporting_has_not_recovered(
    ray_cluster: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rank 1 is slow at steps 2-4 (an episode), then its reports are lost from step 5: the
    driver says once that it stopped reporting, and never that it is back within the median."""
    from .metrics_actors import SilentWorker

    config = ProfilerConfig(
        enable=True,
        save_path=str(tmp_path),
        torch=TorchOptions(contents=["cpu"]),
        metrics=Metrics(enabled=True, stragglers=Stragglers(factor=5.0, consecutive=3, min_seconds=0.2)),
    )
    slow = {2: 0.3, 3: 0.3, 4: 0.3}
    workers = [
        remote(PacedWorker, config, 0, 2, 0.02, {}),
        remote(SilentWorker, config, 1, 2, 0.02, slow, 5),
    ]
    trainer = RayStepProfiler(config, workers=workers, call_timeout_s=120)
    with caplog.at_level(logging.INFO, logger="profdsl"):
        for step in range(8):
            with trainer.step(step):
                ray.get([w.update.remote(step) for w in workers])
    trainer.close()
    assert [e.worker for e in trainer.errors] == [1, 1, 1]  # steps 5-7
    assert caplog.text.count("straggler: rank 1 took") == 1
    assert caplog.text.count("rank 1 in actor update_actor stopped reporting at step 5") == 1
    assert "straggler episode over" not in caplog.text
