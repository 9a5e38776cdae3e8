"""Request files dated in the future (an NFS clock ahead, ``touch -d``) cost one read each, are
reported, and do not make every step boundary rescan the folder: the documented one-``stat``
cost holds."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from profdsl import Profiler, profile_stage
from profdsl.collect import _requests as requests
from profdsl.collect._requests import REQUESTS_DIR

from .profiling import config, work

pytest.importorskip("torch")


def test_future_dated_bad_files_are_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)
    folder = tmp_path / REQUESTS_DIR
    folder.mkdir()
    ahead = time.time() + 86_400
    for i in range(50):
        path = folder / f"bad{i:03d}.json"
        path.write_text("{not json")
        os.utime(path, (ahead, ahead))
    os.utime(folder, (ahead, ahead))
    reads: list[str] = []
    scans: list[int] = []
    real_read, real_scan = requests.read_request, requests.RequestFolder.scan

    def read(path: str) -> object:
        reads.append(path)
        return real_read(path)

    def scan(self: requests.RequestFolder) -> object:
        scans.append(1)
        return real_scan(self)

    monkeypatch.setattr(requests, "read_request", read)
    monkeypatch.setattr(requests.RequestFolder, "scan", scan)
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        for step in range(8):
            with profiler.step(step), profile_stage("update_actor", profiler=profiler):
                work()
    profiler.close()
    assert sorted(reads) == sorted(str(p) for p in folder.iterdir())  # each once
    assert len(scans) <= 2, len(scans)
    assert "bad000.json" in caplog.text
