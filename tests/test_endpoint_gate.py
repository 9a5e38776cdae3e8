"""``POST /profile`` refuses what a web page can send (a cross-site ``fetch`` in ``no-cors``
mode, a DNS-rebinding page) and, with ``OnDemand(token=...)``, anything without the token.
A real local HTTP client against the real endpoint."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl import ConfigError, Metrics, OnDemand, Profiler
from profdsl.metrics._prometheus import PrometheusExporter

from .profiling import config

pytest.importorskip("prometheus_client")

BODY = b'{"steps": 1}'


@pytest.fixture
def endpoint(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    on_demand = getattr(request, "param", OnDemand())
    cfg = config(
        tmp_path, steps=[], on_demand=on_demand, metrics=Metrics(enabled=True, exporters=["prometheus"], port=0)
    )
    profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
    [exporter] = profiler.meter.exporters  # type: ignore[attr-defined]
    assert isinstance(exporter, PrometheusExporter)
    yield exporter.server.port
    profiler.close()


def post(port: int, headers: dict[str, str], body: bytes = BODY) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("POST", "/profile", skip_host="Host" in headers, skip_accept_encoding=True)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


JSON = {"Content-Type": "application/json"}


def test_what_a_browser_sends_cross_site_is_refused(endpoint: int) -> None:
    """fetch(url, {method: "POST", mode: "no-cors", body}) from https://evil.example."""
    browser = {
        "Content-Type": "text/plain;charset=UTF-8",
        "Origin": "https://evil.example",
        "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "no-cors",
    }
    status, answer = post(endpoint, browser)
    assert status in (403, 415) and answer["status"] == "refused"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "text/plain"}, 415),
        ({}, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({**JSON, "Origin": "https://evil.example"}, 403),
        ({**JSON, "Origin": "null"}, 403),
        ({**JSON, "Sec-Fetch-Site": "cross-site"}, 403),
        ({**JSON, "Sec-Fetch-Site": "same-site"}, 403),
        ({**JSON, "Host": "evil.example:80"}, 403),  # a rebinding page: its own name
        ({**JSON, "Host": "evil.example"}, 403),
        ({**JSON, "Origin": "http://127.0.0.1.evil.example"}, 403),  # a name that starts like ours
        ({**JSON, "Origin": "http://127.0.0.1:8000"}, 403),  # another site of this machine: another port
        ({**JSON, "Origin": "http://localhost:8888"}, 403),  # (a notebook server's page, say)
        ({**JSON, "Origin": "http://localhost"}, 403),
        ({**JSON, "Host": "localhost.evil.example:80"}, 403),
        ({"Content-Type": "application/json, text/plain"}, 415),
        ({"Content-Type": "application/jsonx"}, 415),
    ],
)
def test_each_sign_of_a_web_page_is_refused(endpoint: int, headers: dict[str, str], status: int) -> None:
    got, answer = post(endpoint, headers)
    assert got == status, answer
    assert answer["why"] and all("\n" not in why for why in answer["why"])


def test_a_plain_client_is_taken(endpoint: int) -> None:
    plain = (JSON, {"Content-Type": "application/json; charset=utf-8"}, {**JSON, "Host": f"localhost:{endpoint}"})
    for i, headers in enumerate(plain):
        status, answer = post(endpoint, headers, json.dumps({"steps": 1, "id": f"ok{i}"}).encode())
        assert status == 202, answer
    same = {**JSON, "Origin": f"http://127.0.0.1:{endpoint}", "Sec-Fetch-Site": "same-origin"}
    assert post(endpoint, same, b'{"steps": 1, "id": "same"}')[0] == 202


@pytest.mark.parametrize("endpoint", [OnDemand(token="s3cret-token")], indirect=True)
def test_the_token_is_required_when_set(endpoint: int) -> None:
    assert post(endpoint, JSON)[0] == 401
    assert post(endpoint, {**JSON, "X-Profdsl-Token": "wrong"})[0] == 401
    assert post(endpoint, {**JSON, "X-Profdsl-Token": "s3cret-token"})[0] == 202


@pytest.mark.parametrize("endpoint", [OnDemand(hosts=["trainer-7.internal"])], indirect=True)
def test_a_configured_host_name_is_taken(endpoint: int) -> None:
    assert post(endpoint, {**JSON, "Host": f"trainer-7.internal:{endpoint}"})[0] == 202
    assert post(endpoint, {**JSON, "Host": f"trainer-8.internal:{endpoint}"})[0] == 403


@pytest.mark.parametrize(
    "kwargs",
    [{"token": ""}, {"token": "a b"}, {"token": "x" * 300}, {"token": 5}, {"hosts": ["bad host"]}, {"hosts": "h"}],
)
def test_bad_gate_settings_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"OnDemand\.(token|hosts)"):
        OnDemand(**kwargs)
