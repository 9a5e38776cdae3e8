"""The manifest and the metrics logs are read within a bound, and the bound is on the read itself.

The metrics-log reader checked its bound on the size ``fstat`` gave before reading, then read to
the end: a file that grew while read was read past it. The manifest had no bound at all. Both now
read at most their bound plus one byte (``core/_files.read_within``) and refuse a file past it as
they refuse one found too large at the start (``more than ... holds``): the metrics log's
problem line, the manifest's ``OSError`` (which every command reports as ``unreadable``).
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from profdsl.collect import _manifest, metrics_log
from profdsl.collect._manifest import MANIFEST_NAME, append_record, make_record, read_lines
from profdsl.collect.metrics_log import log_name, read_log_lines
from profdsl.core import _files

ROOT = Path(__file__).resolve().parents[1]
LINE = json.dumps({"role": "actor", "step": 1, "rank": 0, "stages": {}, "wall_s": 1.0}) + "\n"


def _growing(monkeypatch: pytest.MonkeyPatch, module: Any, extra: bytes) -> None:
    """``module``'s ``open_regular`` made to append ``extra`` to the file once it is open and its
    size checked: the file grows between the check and the read, every time."""
    real = _files.open_regular

    def open_and_grow(path: str, **kwargs: Any) -> BinaryIO:
        file = real(path, **kwargs)
        with open(path, "ab") as more:
            more.write(extra)
        return file

    monkeypatch.setattr(module, "open_regular", open_and_grow)


# -- the metrics log ------------------------------------------------------------------------------


def test_a_metrics_log_that_grows_past_its_bound_while_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / log_name(0, "h", 1)
    path.write_text(LINE)
    monkeypatch.setattr(metrics_log, "MAX_LOG_BYTES", len(LINE) + 10)
    _growing(monkeypatch, _files, LINE.replace('"step": 1', '"step": 2').encode())
    lines, problems = read_log_lines(tmp_path)
    assert lines == [] and len(problems) == 1, (lines, problems)
    assert problems[0].startswith(f"{path}: unreadable: ") and "more than a metrics log holds" in problems[0]
    assert "grew while read" in problems[0]


def test_a_metrics_log_that_grows_within_its_bound_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Growing is no fault: within the bound, what was appended while read is read too."""
    path = tmp_path / log_name(0, "h", 1)
    path.write_text(LINE)
    _growing(monkeypatch, _files, LINE.replace('"step": 1', '"step": 2').encode())
    lines, problems = read_log_lines(tmp_path)
    assert problems == [] and [line.step for _, _, line in lines] == [1, 2]


def test_a_sparse_metrics_log_over_its_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / log_name(0, "h", 1)
    with open(path, "wb") as file:
        file.truncate(metrics_log.MAX_LOG_BYTES + 1)
    lines, problems = read_log_lines(tmp_path)
    assert lines == [] and problems == [
        f"{path}: unreadable: {metrics_log.MAX_LOG_BYTES + 1} bytes, more than a metrics log holds "
        f"({metrics_log.MAX_LOG_BYTES})"
    ]


# -- the manifest -----------------------------------------------------------------------------------


def _manifest_of(folder: Path) -> bytes:
    record = make_record("trace", "x.pt.trace.json.gz", role="actor", step=1, rank=0, world_size=1)
    assert append_record(folder, record)
    return (folder / MANIFEST_NAME).read_bytes()


def test_a_sparse_manifest_over_its_bound_is_refused_unread(tmp_path: Path) -> None:
    bound = _manifest.MAX_MANIFEST_BYTES
    with open(tmp_path / MANIFEST_NAME, "wb") as file:
        file.truncate(bound + 1)
    with pytest.raises(OSError) as caught:
        read_lines(tmp_path)
    assert caught.value.errno == errno.EFBIG
    assert caught.value.strerror == f"{bound + 1} bytes, more than a manifest holds ({bound})"


def test_a_manifest_at_its_bound_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _manifest_of(tmp_path)
    monkeypatch.setattr(_manifest, "MAX_MANIFEST_BYTES", len(data))
    assert [line.value["step"] for line in read_lines(tmp_path)] == [1]
    monkeypatch.setattr(_manifest, "MAX_MANIFEST_BYTES", len(data) - 1)
    with pytest.raises(OSError, match="more than a manifest holds"):
        read_lines(tmp_path)


def test_a_manifest_that_grows_past_its_bound_while_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _manifest_of(tmp_path)
    monkeypatch.setattr(_manifest, "MAX_MANIFEST_BYTES", len(data) + 10, raising=False)
    _growing(monkeypatch, _manifest, data)
    with pytest.raises(OSError) as caught:
        read_lines(tmp_path)
    assert caught.value.errno == errno.EFBIG and "grew while read" in str(caught.value.strerror)


def test_ls_and_summary_skip_a_manifest_over_its_bound_and_say_why(tmp_path: Path) -> None:
    """Through the command line, a sparse manifest one byte over the bound (nothing of it read):
    named as unreadable, exit 1, no traceback."""
    with open(tmp_path / MANIFEST_NAME, "wb") as file:
        file.truncate(_manifest.MAX_MANIFEST_BYTES + 1)
    (tmp_path / log_name(0, "h", 1)).write_text(LINE)  # something to summarize
    for command in (["ls"], ["summary"]):
        done = subprocess.run(
            [sys.executable, "-m", "profdsl", *command, str(tmp_path)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 1, (command, done.returncode, done.stderr)
        assert f"{tmp_path / MANIFEST_NAME}: unreadable: " in done.stderr
        assert "more than a manifest holds" in done.stderr


def test_the_reads_never_reserve_the_whole_bound(tmp_path: Path) -> None:
    """A file that grows while read is read on in pieces, never one read of the whole bound (a
    64 GiB ``read`` would reserve 64 GiB)."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    asked: list[int] = []

    class Counted:
        def __init__(self, file: BinaryIO) -> None:
            self.file = file

        def fileno(self) -> int:
            return self.file.fileno()

        def read(self, size: int = -1) -> bytes:
            asked.append(size)
            return self.file.read(size)

    with _files.open_regular(path) as file:
        with open(path, "ab") as more:
            more.write(b"y" * 50)
        found = _files.read_within(Counted(file), limit=64 * 1024**3, holds="it")  # type: ignore[arg-type]
    assert found == b"x" * 100 + b"y" * 50
    assert asked and all(0 < size <= 2**20 for size in asked), asked


# -- a capture request -----------------------------------------------------------------------------


def test_a_capture_request_that_grows_past_its_bound_while_read_is_too_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that grew past its bound after it was opened was read to the bound plus a byte
    and reported as "not JSON"; it is refused as too large (``core/_files.read_within``)."""
    from profdsl.collect import _requests

    path = tmp_path / "req.json"
    body = json.dumps({"id": "s", "steps": 3}).encode()
    path.write_bytes(body)
    monkeypatch.setattr(_requests, "MAX_REQUEST_BYTES", len(body) + 10)
    _growing(monkeypatch, _files, b"x" * 20)
    with pytest.raises(OSError) as caught:
        _requests.read_request(str(path))
    assert caught.value.errno == errno.EFBIG and "grew while read" in str(caught.value.strerror)
    assert "more than a request holds" in str(caught.value.strerror)


def test_a_capture_request_that_grows_within_its_bound_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from profdsl.collect import _requests

    path = tmp_path / "req.json"
    path.write_bytes(json.dumps({"id": "s", "steps": 3}).encode())
    _growing(monkeypatch, _files, b"  \n")
    assert _requests.read_request(str(path)).id == "s"
