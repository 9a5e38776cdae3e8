"""Profiling faults never hurt training: full disks, concurrent writers."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
from profdsl.manifest import read_manifest

from .traces import load, trace_files

pytest.importorskip("torch")


def test_full_disk_during_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ENOSPC while writing a trace: one log line, the stage's result is intact, the loss is
    recorded in the manifest, no temporary or empty file is left behind."""
    import profdsl.collect._export as export

    real_replace = os.replace

    def full_disk(src: str, dst: str) -> None:
        if ".profdsl-tmp-" in src:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(export.os, "replace", full_disk)
    cfg = ProfilerConfig(
        enable=True, steps=[1, 2], discrete=True, save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"])
    )
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in (1, 2):
                with profiler.step(step):
                    assert profile_stage("update")(lambda s=step: s * 10)() == step * 10
    assert caplog.text.count("No space left on device") == 1
    assert [(r["status"], r["step"]) for r in read_manifest(tmp_path)] == [("failed", 1), ("failed", 2)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profdsl-manifest.jsonl"]


@pytest.mark.slow
def test_concurrent_processes_share_a_save_path(tmp_path: Path) -> None:
    """Four processes (ranks) writing stage traces into one folder at once: nothing lost, nothing
    overwritten, every manifest line whole."""
    script = textwrap.dedent("""
        import sys
        from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
        rank = int(sys.argv[2])
        cfg = ProfilerConfig(enable=True, steps=[1, 2], all_ranks=True, discrete=True, save_path=sys.argv[1],
                             torch=TorchOptions(contents=["cpu"]))
        with Profiler(cfg, role="actor", rank=rank, world_size=4) as profiler:
            for step in (1, 2):
                with profiler.step(step):
                    for _ in range(3):
                        with profile_stage("train_batch"):
                            pass
    """)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), str(r)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        for r in range(4)
    ]
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert codes == [0, 0, 0, 0], [p.stderr.read() for p in procs if p.stderr]
    files = trace_files(tmp_path)
    records = read_manifest(tmp_path)
    assert len(files) == len(records) == 4 * 2 * 3
    assert sorted(r["path"] for r in records) == [f.name for f in files]
    assert all(r["status"] == "ok" for r in records)
    for f in files:
        assert load(f)["traceEvents"]
