"""Floods of bad or refused requests cost a few log lines and no memory per request; text from
a request never forges a log line; a slow step's capture is announced only once it is taken."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from profdsl import Profiler
from profdsl._runtime.process import PROCESS

from .profiling import config

pytest.importorskip("torch")


def _profiler(tmp_path: Path) -> Profiler:
    return Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)


def test_a_thousand_malformed_bodies_are_a_few_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = _profiler(tmp_path)
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        for i in range(1000):
            status, _ = PROCESS.inbox.from_http(f'{{"steps": 1, "bad{i}": '.encode())
            assert status == 400
    profiler.close()
    lines = [r for r in caplog.records if "POST /profile" in r.getMessage()]
    assert 10 < len(lines) <= 14, len(lines)
    assert "1000 malformed POST /profile bodies so far" in caplog.text


def test_refused_requests_keep_no_id_and_few_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = _profiler(tmp_path)
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        for i in range(500):
            body = json.dumps({"id": f"r{i}", "steps": 50}).encode()  # over max_steps: refused
            assert PROCESS.inbox.from_http(body)[0] == 409
    profiler.close()
    assert len(PROCESS.inbox._answers) == 0  # no id reserved by a refusal
    assert len([r for r in caplog.records if "not taken" in r.getMessage()]) <= 10
    assert "100 capture requests refused so far" in caplog.text


def test_request_text_cannot_forge_log_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = _profiler(tmp_path)
    forged = "look\nprofdsl: finish hook ok: uploaded to s3://attacker-bucket\x1b[2J"
    with caplog.at_level(logging.INFO, logger="profdsl"):
        body = json.dumps({"id": "ok1", "steps": 1, "reason": forged, "roles": ["actor\nx"]}).encode()
        status, answer = PROCESS.inbox.from_http(body)
        assert status == 409 and all("\n" not in why for why in answer["why"]), answer
        PROCESS.inbox.from_http(json.dumps({"id": "ok2", "steps": 1, "reason": forged}).encode())
    profiler.close()
    for record in caplog.records:
        message = record.getMessage()
        assert "\n" not in message and "\x1b" not in message, message
    assert "look\\nprofdsl: finish hook ok" in caplog.text
