"""The OpenTelemetry exporter, recording through the real SDK's in-memory reader (in a fresh
process: the global meter provider can be set once per process)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from profdsl import profile_stage

from .metrics_support import metered

pytest.importorskip("opentelemetry.sdk.metrics")

SCRIPT = textwrap.dedent("""
    import json
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from profdsl import Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    config = ProfilerConfig(metrics=Metrics(enabled=True, exporters=["otel"], rank_label=True))
    with Profiler(config, role="actor", rank=1, world_size=2) as profiler:
        for step in range(3):
            with profiler.step(step):
                with profile_stage("update_actor"):
                    for _ in mini_batch_window(range(2)):
                        pass
    out = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attrs = dict(point.attributes)
                    key = f"{metric.name}|{attrs.get('role')}|{attrs.get('stage')}|{attrs.get('rank')}"
                    out[key] = [point.count, metric.unit]
    print(json.dumps(out))
""")


def test_stage_histogram_through_the_sdk() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout.strip().splitlines()[-1])
    assert points == {
        "profdsl.stage.duration|actor|update_actor|1": [3, "s"],
        "profdsl.stage.duration|actor|update_actor/mini_batch|1": [3, "s"],
        "profdsl.step.duration|actor|None|1": [3, "s"],
        # the step ledger (issue 32), its buckets under one key here: test_the_ledger_histograms
        "profdsl.step.ledger|actor|None|1": [3, "s"],
        "profdsl.step.ledger.concurrent|actor|None|1": [3, "s"],
    }


def test_without_the_api(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        profiler = metered("actor", exporters=["otel"])
    assert "profdsl[otel]" in caplog.text and profiler.meter.exporters == []
    with profiler, profiler.step(1), profile_stage("gen"):
        pass
    assert "timing_s/gen" in profiler.metrics


def _points(reader: Any) -> dict[tuple[str, str | None, str | None], tuple[int, float]]:
    """(instrument, role, bucket) -> (count, sum) of each histogram point."""
    out = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attrs = dict(point.attributes)
                    out[(metric.name, attrs.get("role"), attrs.get("bucket"))] = (point.count, point.sum)
    return out


def test_the_ledger_histograms() -> None:
    """Each step's ledger, one record per bucket (its sum over steps against the steps' wall
    time), its concurrent time, and with device time its device split; a step without a ledger
    or a device split records none of it. Through the SDK's in-memory reader, the exporter
    given its own meter provider (the global one can be set once per process)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from profdsl.metrics._otel import OtelExporter
    from profdsl.metrics._timings import StepTimings

    reader = InMemoryMetricReader()
    exporter = OtelExporter(rank_label=False, provider=MeterProvider(metric_readers=[reader]))
    kinds = {"generation": 0.0, "inference": 0.0, "update": 0.0, "weight_sync": 0.0, "reward": 0.0, "data": 0.0}
    for step, (update, overhead, outside) in enumerate([(1.0, 0.25, 0.75), (0.5, 0.0, 0.5)]):
        exporter.export(
            StepTimings(
                role="actor", rank=0, step=step, wall_s=update + overhead + outside,
                ledger={**kinds, "other": 0.0, "update": update, "overhead": overhead, "outside": outside},
                concurrent_s=0.125, ledger_device={**kinds, "other": 0.0, "update": 2.0 * update, "outside": 0.5},
            )
        )  # fmt: skip
    exporter.export(StepTimings(role="actor", rank=0, step=2, wall_s=9.0, ledger_why="too many stretches"))
    points = _points(reader)
    assert points[("profdsl.step.duration", "actor", None)] == (3, 12.0)
    assert points[("profdsl.step.ledger", "actor", "update")] == (2, 1.5)
    assert points[("profdsl.step.ledger", "actor", "overhead")] == (2, 0.25)
    assert points[("profdsl.step.ledger", "actor", "outside")] == (2, 1.25)
    ledger = {k: v for k, v in points.items() if k[0] == "profdsl.step.ledger"}
    assert len(ledger) == 9 and sum(total for _, total in ledger.values()) == 3.0  # the two steps' wall time
    assert points[("profdsl.step.ledger.concurrent", "actor", None)] == (2, 0.25)
    assert points[("profdsl.step.ledger.device", "actor", "update")] == (2, 3.0)
    assert points[("profdsl.step.ledger.device", "actor", "outside")] == (2, 1.0)
    assert len({k for k in points if k[0] == "profdsl.step.ledger.device"}) == 8  # every kind, outside
