"""An idle client of the metrics endpoint (connects, sends part of a request or nothing, then
waits) is dropped quietly: one DEBUG line, no socketserver traceback on the training process's
stderr."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from profdsl import Metrics, Profiler
from profdsl.metrics import prometheus
from profdsl.metrics.prometheus import PrometheusExporter

from .profiling import config

pytest.importorskip("prometheus_client")


def test_idle_clients_are_dropped_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(prometheus._Quiet, "timeout", 0.3)
    profiler = Profiler(
        config(tmp_path, steps=[], metrics=Metrics(enabled=True, exporters=["prometheus"], port=0)),
        role="actor",
        rank=0,
        world_size=1,
    )
    [exporter] = profiler.meter.exporters  # type: ignore[attr-defined]
    assert isinstance(exporter, PrometheusExporter)
    port = exporter.server.port
    with caplog.at_level(logging.DEBUG, logger="profdsl"):
        clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
        clients[0].sendall(b"POST /profile HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and then nothing
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and caplog.text.count("idle client") < 3:
            time.sleep(0.05)
        for client in clients:
            client.close()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as alive:  # still serving
            alive.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert alive.recv(12).startswith(b"HTTP/1.0 200")
    profiler.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "TimeoutError" not in err, err
    assert caplog.text.count("idle client") == 3
