"""At run time profdsl says where the traces went (issue 29 item 9): one INFO line at the first
trace a process writes into a save_path, and one at close, naming it as an absolute path, however
it was given."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from profdsl import Profiler, profile_stage

from .profiling import config, work

pytest.importorskip("torch")


def test_one_info_line_at_the_first_trace_names_the_absolute_save_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = config("profiles", steps=[1, 2])  # relative, as a user may write it
    with caplog.at_level(logging.INFO, logger="profdsl"):
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in (1, 2):
                with profiler.step(step), profile_stage("update_actor"):
                    work()
    where = str(tmp_path / "profiles")
    said = [r for r in caplog.records if where in r.getMessage()]
    assert len(said) == 2, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.INFO and "rank 0" in r.getMessage() for r in said)
    assert "traces go into" in said[0].getMessage() and "closed" in said[1].getMessage()
    assert os.path.isabs(where) and len(list(Path(where).glob("*.json.gz"))) == 2


def test_a_process_that_wrote_no_trace_says_nothing_of_where(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rank the config does not trace (rank 1 of 2 here) writes nothing, so it names no folder."""
    with caplog.at_level(logging.INFO, logger="profdsl"):
        with Profiler(config(tmp_path, steps=[1]), role="actor", rank=1, world_size=2) as profiler:
            with profiler.step(1), profile_stage("update_actor"):
                work()
    assert not [r for r in caplog.records if str(tmp_path) in r.getMessage()]
