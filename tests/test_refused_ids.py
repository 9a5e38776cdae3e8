"""A refused request does not reserve its id: the corrected request with the same id is taken
(HTTP, ``request()``, and a request file replaced under the same name)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from profdsl import Profiler, profile_stage
from profdsl._runtime.process import PROCESS
from profdsl.collect._requests import REQUESTS_DIR

from .profiling import config, records, work

pytest.importorskip("torch")


def _traced(folder: Path) -> list[int]:
    return sorted(r["step"] for r in records(folder, "trace") if r["status"] == "ok")


def _step(profiler: Profiler, step: int) -> None:
    with profiler.step(step), profile_stage("update_actor", profiler=profiler):
        work()


def test_a_refused_id_can_be_asked_again(tmp_path: Path) -> None:
    profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)
    _step(profiler, 0)
    status, answer = PROCESS.inbox.from_http(json.dumps({"id": "x", "steps": 20}).encode())
    assert (status, answer["status"]) == (409, "refused")
    status, answer = PROCESS.inbox.from_http(json.dumps({"id": "x", "steps": 2}).encode())
    assert (status, answer["status"]) == (202, "accepted")
    status, answer = PROCESS.inbox.from_http(json.dumps({"id": "x", "steps": 2}).encode())
    assert (status, answer["status"]) == (200, "duplicate")  # taken: once
    for step in range(1, 5):
        _step(profiler, step)
    profiler.close()
    assert _traced(tmp_path) == [1, 2]


def test_a_replaced_request_file_is_read_again(tmp_path: Path) -> None:
    profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)
    folder = tmp_path / REQUESTS_DIR
    folder.mkdir()
    path = folder / "x.json"
    path.write_text(json.dumps({"id": "x", "steps": 20, "created": time.time()}))
    _step(profiler, 0)  # refused: 20 > max_steps
    fresh = folder / ".x.tmp"
    fresh.write_text(json.dumps({"id": "x", "steps": 1, "created": time.time()}))
    later = time.time() + 1
    os.utime(fresh, (later, later))
    os.replace(fresh, path)
    for step in range(1, 4):
        _step(profiler, step)
    profiler.close()
    assert _traced(tmp_path) == [1]
