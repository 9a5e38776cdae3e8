"""Files in save_path are untrusted, on the write side too: a link planted where profdsl appends
(the manifest, a metrics log) or writes a temporary (a request, a file moved in) is never
followed, so the file it points at, outside save_path, stays unchanged; a FIFO there never
hangs the writer. The fault is logged once, escaped, and the loop goes on."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from profdsl import Metrics, Profiler, ProfilerConfig
from profdsl.collect import _relocate as relocate
from profdsl.collect._manifest import MANIFEST_NAME, append_record, make_record
from profdsl.collect._requests import REQUESTS_DIR, new_id, write_request
from profdsl.collect.metrics_log import append_line, log_name
from profdsl.core._files import LINK, open_append
from profdsl.core._log import COUNTED_IN_FULL
from profdsl.records.requests import CaptureRequest

ORIGINAL = b"# a file outside save_path\n"
#: A generous bound on a write that must not block (never asserted on: only a hang reaches it).
HANG_S = 120


def _outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside" / ".bashrc"
    target.parent.mkdir()
    target.write_bytes(ORIGINAL)
    return target


def _save_path(tmp_path: Path) -> Path:
    folder = tmp_path / "save"
    folder.mkdir()
    return folder


def _bounded(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child process; one still blocked after :data:`HANG_S` is killed."""
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=HANG_S
        )
    except subprocess.TimeoutExpired:  # run() has killed and reaped the child
        pytest.fail("the write blocked on a FIFO")


def test_open_append_refuses_a_link_and_a_fifo_unfollowed(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    save = _save_path(tmp_path)
    os.symlink(outside, save / "log.jsonl")
    with pytest.raises(OSError) as caught:
        open_append(save / "log.jsonl")
    assert caught.value.strerror == LINK
    os.mkfifo(save / "fifo.jsonl")
    for read in (False, True):
        with pytest.raises(OSError, match="not a regular file \\(a FIFO\\)"):
            open_append(save / "fifo.jsonl", read=read)
    fd = open_append(save / "new.jsonl")
    try:
        os.write(fd, b"x\n")
    finally:
        os.close(fd)
    assert (save / "new.jsonl").read_bytes() == b"x\n" and outside.read_bytes() == ORIGINAL


def test_a_manifest_planted_as_a_link_is_not_appended_to(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outside = _outside(tmp_path)
    save = _save_path(tmp_path)
    os.symlink(outside, save / MANIFEST_NAME)
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        assert not append_record(save, make_record("trace", "a.pt.trace.json.gz"))
        assert not append_record(save, make_record("trace", "b.pt.trace.json.gz"))
    assert outside.read_bytes() == ORIGINAL
    said = [r.getMessage() for r in caplog.records if "manifest" in r.getMessage()]
    assert len(said) == 1 and LINK in said[0]


def test_a_metrics_log_planted_as_a_link_is_not_appended_to(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outside = _outside(tmp_path)
    save = _save_path(tmp_path)
    os.symlink(outside, save / "profdsl-metrics-rank0-h-1.jsonl")
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        assert not append_line(str(save / "profdsl-metrics-rank0-h-1.jsonl"), b"{}\n")
    assert outside.read_bytes() == ORIGINAL
    assert any(LINK in r.getMessage() for r in caplog.records)


def test_the_profiler_appends_to_no_planted_link(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Through the real Profiler: the metrics log and the manifest (the hook's record) are links
    to a file outside save_path; the steps go on, that file stays unchanged, each fault is
    logged once."""
    outside = _outside(tmp_path)
    save = _save_path(tmp_path)
    os.symlink(outside, save / log_name(0, socket.gethostname(), os.getpid()))
    os.symlink(outside, save / MANIFEST_NAME)
    cfg = ProfilerConfig(save_path=str(save), metrics=Metrics(enabled=True, log=True))
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
            for step in (1, 2, 3):
                with profiler.step(step):
                    pass
    assert outside.read_bytes() == ORIGINAL
    said = [r.getMessage() for r in caplog.records if LINK in r.getMessage()]
    assert said and len(said) == len(set(said))


def test_appends_to_a_fifo_do_not_block(tmp_path: Path) -> None:
    """A FIFO in the manifest's or a metrics log's place (no reader): the write is refused at
    once, in a child process bounded so that a hang fails the test instead of stalling it."""
    save = _save_path(tmp_path)
    os.mkfifo(save / MANIFEST_NAME)
    os.mkfifo(save / "profdsl-metrics-rank0-h-1.jsonl")
    done = _bounded(
        """
        import sys
        from profdsl.collect._manifest import append_record, make_record
        from profdsl.collect.metrics_log import append_line
        save = sys.argv[1]
        print(append_record(save, make_record("trace", "a.pt.trace.json.gz")))
        print(append_line(save + "/profdsl-metrics-rank0-h-1.jsonl", b"{}\\n"))
        """,
        str(save),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert "not a regular file (a FIFO)" in done.stderr


def test_a_request_is_not_written_through_a_planted_temporary(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    save = _save_path(tmp_path)
    request = CaptureRequest(id=new_id("trigger"), steps=1)
    (save / REQUESTS_DIR).mkdir()
    os.symlink(outside, save / REQUESTS_DIR / f".{request.id}.{os.getpid()}.tmp")
    with pytest.raises(OSError):
        write_request(str(save), request)
    assert outside.read_bytes() == ORIGINAL
    assert not (save / REQUESTS_DIR / f"{request.id}.json").exists()


def test_a_copy_is_not_written_through_a_planted_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = _outside(tmp_path)
    save = _save_path(tmp_path)
    source = tmp_path / "engine.nsys-rep"
    source.write_bytes(b"report")

    class Fixed:
        hex = "0" * 32

    monkeypatch.setattr(relocate.uuid, "uuid4", Fixed)
    os.symlink(outside, save / f"{relocate.TEMP_PREFIX}{os.getpid()}-{Fixed.hex}")
    with pytest.raises(OSError):
        relocate._copy_across(str(source), str(save), str(save / "engine.nsys-rep"))
    assert outside.read_bytes() == ORIGINAL and source.read_bytes() == b"report"


# --- summary names the metrics log lines it cannot read ----------------------------------------


def _summary(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("view", [["--ledger"], []], ids=["ledger", "stages"])
def test_summary_says_which_metrics_log_lines_it_left_out(tmp_path: Path, view: list[str]) -> None:
    """Lines of a metrics log that do not parse (one with an ESC sequence) are named on stderr,
    escaped, the first few in full and the rest counted; summary exits 1, as for any input it
    skipped."""
    from .test_hostile_ledger import _line, _trace

    _trace(tmp_path, "a.pt.trace.json.gz", 0, [("update_actor", 1, 0.0, 10.0)])
    bad = ['{"role": "\x1b[2J', *(f"not json {n}" for n in range(20))]
    with open(tmp_path / log_name(0, "h", 1), "w") as file:
        file.write(json.dumps(_line()) + "\n" + "\n".join(bad) + "\n")
    done = _summary(tmp_path, *view)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    named = [line for line in done.stderr.splitlines() if log_name(0, "h", 1) in line]
    assert named and "line 2:" in named[0] and "\x1b" not in done.stderr
    assert len(named) <= COUNTED_IN_FULL
    assert f"{len(bad) - len(named)} more" in done.stderr
