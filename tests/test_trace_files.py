"""What the commands read from a folder: only regular files (a FIFO named like a trace never blocks
a command, with or without a manifest), files not named by profdsl listed as skipped and still
read where they can be (a plain torch.profiler trace by its events), and every file they open
closed again (no ``ResourceWarning``)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl.collect._manifest import MANIFEST_NAME, append_record, make_record

from .profiling import profile_two_ranks

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[1]
#: A name profdsl could have written (rank 1's update_actor at step 1).
FIFO_NAME = "actor.update-actor_step000001_rank1-of-2_vm_pid1_20260101T000000000.pt.trace.json.gz"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pristine") / "profiles"
    profile_two_ranks(folder)
    return folder


def profdsl_cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command in a fresh interpreter, killed after ``timeout`` (a blocked read fails the test)."""
    return subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-m", "profdsl", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def run_all(folder: Path, scratch: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    return {
        "check": profdsl_cli("check", str(folder)),
        "summary": profdsl_cli("summary", str(folder), "--json"),
        "merge": profdsl_cli("merge", str(folder), "-o", str(scratch / "merged.json")),
        "export": profdsl_cli(
            "export", "--hta", str(folder), "--step", "1", "--stage", "update_actor", "-o", str(scratch / "hta")
        ),
    }


# -- not regular files ---------------------------------------------------------------------------

SPECIAL = {
    "a FIFO": lambda path: os.mkfifo(path),
    "a folder": lambda path: path.mkdir(),
    "a symlink loop": lambda path: os.symlink(path.name, path),
}


@pytest.mark.slow
@pytest.mark.parametrize("manifest", [True, False], ids=["listed in a manifest", "no manifest"])
@pytest.mark.parametrize("special", sorted(SPECIAL))
def test_a_file_that_is_not_regular_is_skipped_not_opened(
    pristine: Path, tmp_path: Path, special: str, manifest: bool
) -> None:
    folder = Path(shutil.copytree(pristine, tmp_path / "profiles"))
    if not manifest:
        (folder / MANIFEST_NAME).unlink()
    SPECIAL[special](folder / FIFO_NAME)
    if manifest:
        append_record(
            folder,
            make_record(
                "trace", FIFO_NAME, role="actor", stage="update_actor", step=1, rank=1, world_size=2, bytes=100
            ),
        )
    results = run_all(folder, tmp_path)
    for name, done in results.items():
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        said = done.stdout + done.stderr
        assert FIFO_NAME in said and "Traceback" not in said and "ResourceWarning" not in said, (name, said)
    if special == "a FIFO":
        for name, done in results.items():
            assert "not a regular file (a FIFO)" in done.stdout + done.stderr, name
    rows = json.loads(results["summary"].stdout)
    assert {r["rank"] for r in rows} == {0, 1}  # the other traces are read


# -- names that are not profdsl's ----------------------------------------------------------------


def torch_trace(path: Path) -> None:
    """A plain ``torch.profiler`` trace, named as torch names it (``{host}_{pid}.{ns}.pt.trace.json``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("train_step"):
        torch.ones(8).mul(2).sum()
    prof.export_chrome_trace(str(path))


@pytest.mark.slow
def test_traces_not_named_by_profdsl_are_listed_and_read(pristine: Path, tmp_path: Path) -> None:
    """Without a manifest: a plain torch trace and a profdsl trace under an older name are each
    named as skipped (``check`` fails: it does not say "all well"), and still read by their
    events; a non-JSON file of that kind is only named."""
    folder = Path(shutil.copytree(pristine, tmp_path / "profiles"))
    (folder / MANIFEST_NAME).unlink()
    plain = folder / "host_123.1700000000000.pt.trace.json"
    torch_trace(plain)
    old = next(p for p in sorted(folder.iterdir()) if "rank1" in p.name and "update-actor" in p.name)
    old = old.rename(folder / "actor_update_actor_step1_rank1.pt.trace.json.gz")
    (folder / "report.nsys-rep").write_bytes(b"nsys")
    results = run_all(folder, tmp_path) | {
        "ls": profdsl_cli("ls", str(folder)),
        "plot": profdsl_cli("plot", str(folder), "-o", str(tmp_path / "p.png")),
    }
    for name, done in results.items():
        if name == "plot" and "matplotlib" in done.stderr:
            continue
        said = done.stdout + done.stderr
        assert done.returncode == 1, (name, said)
        for file in (plain.name, old.name, "report.nsys-rep"):
            assert f"{file}: not a profdsl trace name" in said, (name, file, said)
    assert "all well" not in results["check"].stdout
    rows: list[dict[str, Any]] = json.loads(results["summary"].stdout)
    assert any(r["stage"] == "whole trace" and r["rank"] is None for r in rows), rows  # the torch trace
    # the old profdsl trace still holds its regions: its update_actor and mini-batches are read
    assert any(r["stage"] == "update_actor" and r["rank"] is None for r in rows), rows
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert any(e.get("name") == "train_step" for e in merged["traceEvents"])


# -- files closed ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_reading_gzipped_traces_leaves_no_file_open(pristine: Path) -> None:
    """``check`` and ``summary`` read every ``.gz`` trace through ``open_trace``; with
    ``-W error::ResourceWarning`` an unclosed file would print a warning (or fail) at collection."""
    assert list(pristine.glob("*.gz"))
    for argv in (("check", str(pristine)), ("summary", str(pristine)), ("ls", str(pristine))):
        done = subprocess.run(
            [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-m", "profdsl", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr
        assert "ResourceWarning" not in done.stderr and "unclosed" not in done.stderr, done.stderr


def test_reading_a_trace_closes_every_file_it_opened(tmp_path: Path) -> None:
    """In-process, by the readers themselves: no ``ResourceWarning`` once they are done (a
    ``GzipFile`` given a file object leaves it open)."""
    import gc
    import warnings

    from profdsl.analysis._reader import events, header

    path = tmp_path / "t.json.gz"
    path.write_bytes(
        gzip.compress(
            json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}).encode()
        )
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        header(path)
        assert len(list(events(path))) == 1
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
