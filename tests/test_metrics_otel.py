"""The OpenTelemetry exporter, recording through the real SDK's in-memory reader (in a fresh
process: the global meter provider can be set once per process)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

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
    }


def test_without_the_api(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        profiler = metered("actor", exporters=["otel"])
    assert "profdsl[otel]" in caplog.text and profiler.meter.exporters == []
    with profiler, profiler.step(1), profile_stage("gen"):
        pass
    assert "timing_s/gen" in profiler.metrics
