"""An idle client of the metrics endpoint (connects, sends part of a request or nothing, then
waits) is dropped quietly: one DEBUG line, no socketserver traceback on the training process's
stderr."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from profdsl import Metrics, Profiler
from profdsl.metrics import _prometheus as prometheus
from profdsl.metrics._prometheus import PrometheusExporter

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


def test_a_flood_of_connections_holds_a_bounded_number_of_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Each connection the endpoint takes costs a thread for as long as its client keeps it
    open: a local process (or, bound to 0.0.0.0, anyone) opening hundreds of idle connections
    must not make the training process run hundreds of threads (the process's thread limit is
    the training's too). Connections past ``MAX_CLIENTS`` are answered 503 and closed at once,
    counted in the log; the endpoint serves again once its clients went away."""
    monkeypatch.setattr(prometheus._Quiet, "timeout", 600.0)  # no idle client is dropped meanwhile
    profiler = Profiler(
        config(tmp_path, steps=[], metrics=Metrics(enabled=True, exporters=["prometheus"], port=0)),
        role="actor",
        rank=0,
        world_size=1,
    )
    [exporter] = profiler.meter.exporters  # type: ignore[attr-defined]
    assert isinstance(exporter, PrometheusExporter)
    port = exporter.server.port
    before = threading.active_count()
    flood = 4 * prometheus.MAX_CLIENTS
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(flood)]
        # The kernel may queue connections in another order than they were made: wait for the
        # answers, whichever clients they go to.
        waiting, refused = set(clients), 0
        deadline = time.monotonic() + 120
        while refused < flood - prometheus.MAX_CLIENTS and time.monotonic() < deadline:
            readable, _, _ = select.select(list(waiting), [], [], 1.0)
            for client in readable:
                waiting.discard(client)
                refused += client.recv(64).startswith(b"HTTP/1.0 503")
        peak = threading.active_count() - before
        for client in clients:
            client.close()
    assert refused == flood - prometheus.MAX_CLIENTS
    assert peak <= prometheus.MAX_CLIENTS
    assert "connections past" in caplog.text and caplog.text.count("connections past") <= 12
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the served clients' threads end as they went away
        with socket.create_connection(("127.0.0.1", port), timeout=30) as alive:
            alive.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            if alive.recv(12).startswith(b"HTTP/1.0 200"):
                break
        time.sleep(0.1)
    else:
        pytest.fail("the endpoint never served again after the flood")
    profiler.close()
    assert "Traceback" not in capfd.readouterr().err


def test_a_client_that_trickles_its_request_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A client sending its request a byte at a time (each byte well within the idle timeout)
    would hold a connection, a thread and one of the bounded slots for as long as it likes: the
    timeout bounds the whole request, not each read."""
    monkeypatch.setattr(prometheus._Quiet, "timeout", 1.0)
    profiler = Profiler(
        config(tmp_path, steps=[], metrics=Metrics(enabled=True, exporters=["prometheus"], port=0)),
        role="actor",
        rank=0,
        world_size=1,
    )
    [exporter] = profiler.meter.exporters  # type: ignore[attr-defined]
    port = exporter.server.port
    request = b"GET /metrics HTTP/1.0\r\n" + b"X-Padding: " + b"a" * 4000 + b"\r\n\r\n"
    sent, dropped = 0, False
    with caplog.at_level(logging.DEBUG, logger="profdsl"), socket.create_connection(("127.0.0.1", port)) as client:
        deadline = time.monotonic() + 60
        try:
            while sent < len(request) and time.monotonic() < deadline:
                client.sendall(request[sent : sent + 1])
                sent += 1
                readable, _, _ = select.select([client], [], [], 0.05)
                if readable and client.recv(1) == b"":
                    dropped = True  # the endpoint hung up
                    break
        except OSError:
            dropped = True  # reset by the endpoint
    profiler.close()
    assert dropped and sent < len(request), f"the trickling client was never dropped ({sent} bytes sent)"
    assert "idle client" in caplog.text
