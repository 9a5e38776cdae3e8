"""Checking whether a file to move into ``save_path`` is complete never follows a link, never
opens a FIFO blocking: ``gzip_complete`` and ``wait_complete`` open (``open_regular``) and stat
(``lstat``) the name itself. A link or any file that is no regular file is no trace: it is not
waited on, and its move records it ``skipped`` (``_take``'s rule, ``NOT_REGULAR``).

They opened and stat'ed what a link pointed at: whoever can write where the files come from (or
into save_path) could point one at a FIFO, hanging the finish hook or the training thread that
waits on the relocation, or at a file elsewhere, whose size and completeness were then reported.
What hung on the old code runs on a daemon thread with a generous bound, the FIFO opened for
writing afterwards to release it.
"""

from __future__ import annotations

import gzip
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from profdsl.collect import _relocate as relocate
from profdsl.collect._relocate import NOT_REGULAR, Move, gzip_complete, wait_complete
from profdsl.core._naming import TraceName

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")

T = TypeVar("T")
#: How long a call may take before it is taken for hung (it takes milliseconds).
BOUND_S = 60.0


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO outside the source folder; released after the test, should a reader block on it."""
    path = tmp_path / "elsewhere" / "fifo"
    path.parent.mkdir()
    os.mkfifo(path)
    yield path
    try:  # a reader blocked on it (the old code) gets its end of file
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def bounded(call: Callable[[], T]) -> T:
    """``call()`` on a daemon thread: its result, or a failure when it is still running after
    :data:`BOUND_S` (blocked)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), f"still running after {BOUND_S} s: blocked"
    return result[0]  # type: ignore[no-any-return]


def _whole_gzip(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    return path


def test_gzip_complete_does_not_open_a_fifo_a_link_points_at(tmp_path: Path, fifo: Path) -> None:
    link = tmp_path / "engine.trace.json.gz"
    link.symlink_to(fifo)
    assert bounded(lambda: gzip_complete(str(link))) is False


def test_gzip_complete_of_a_fifo_itself_never_blocks(tmp_path: Path, fifo: Path) -> None:
    assert bounded(lambda: gzip_complete(str(fifo))) is False


def test_gzip_complete_does_not_follow_a_link_to_a_whole_stream(tmp_path: Path) -> None:
    target = _whole_gzip(tmp_path / "elsewhere" / "whole.gz")
    link = tmp_path / "engine.trace.json.gz"
    link.symlink_to(target)
    assert gzip_complete(str(target)) is True
    assert gzip_complete(str(link)) is False


def test_wait_complete_does_not_wait_on_a_link_or_a_fifo(tmp_path: Path, fifo: Path) -> None:
    """A link (to a FIFO; to an empty file that never grows) and a FIFO are no trace: not waited
    on, so not incomplete either (the move records them skipped). A link to an empty file was
    waited on to the deadline and called incomplete, with its target's size."""
    empty = tmp_path / "elsewhere" / "empty.nsys-rep"
    empty.write_bytes(b"")
    to_fifo, to_empty = tmp_path / "a.trace.json.gz", tmp_path / "b.nsys-rep"
    to_fifo.symlink_to(fifo)
    to_empty.symlink_to(empty)
    assert bounded(lambda: wait_complete([str(to_fifo), str(to_empty), str(fifo)], 1.0)) == []
    assert wait_complete([str(empty)], 0.5) == [str(empty)]  # a regular file is waited on as before


def _move(source: Path) -> Move:
    name = TraceName(role="rollout", host="h", pid=1, time_ms=1_795_000_000_000, ext=".trace.json.gz")
    return Move(str(source), name, "rollout", {"role": "rollout"})


def _swapped_after_the_check(monkeypatch: pytest.MonkeyPatch, source: Path, target: Path) -> None:
    """``apply`` checks the source (``lstat``), then waits on it: it turns into a link to
    ``target`` right after the check."""
    real = relocate._is_regular
    swapped: list[str] = []

    def checked_then_swapped(path: str) -> bool:
        found = real(path)
        if path == str(source) and not swapped:
            swapped.append(path)
            source.unlink()
            source.symlink_to(target)
        return found

    monkeypatch.setattr(relocate, "_is_regular", checked_then_swapped)


@pytest.mark.parametrize("points_at", ["fifo", "empty file", "whole gzip"])
def test_a_source_turned_into_a_link_before_the_wait_is_recorded_skipped(
    tmp_path: Path, fifo: Path, monkeypatch: pytest.MonkeyPatch, points_at: str
) -> None:
    """Never blocked on a FIFO, never waited on to the deadline (``incomplete``, with its target's
    size): skipped, as a source found a link at the check is, and left where it was."""
    targets = {"fifo": fifo, "empty file": tmp_path / "elsewhere" / "empty", "whole gzip": fifo.parent / "w.gz"}
    target = targets[points_at]
    if points_at == "empty file":
        target.write_bytes(b"")
    elif points_at == "whole gzip":
        _whole_gzip(target)
    source = _whole_gzip(tmp_path / "engine" / "rollout.trace.json.gz")
    save = tmp_path / "save"
    _swapped_after_the_check(monkeypatch, source, target)
    [record] = bounded(lambda: relocate.apply([_move(source)], str(save), wait_s=1.0, record_incomplete=True))
    assert (record["status"], record["reason"], record["path"]) == ("skipped", NOT_REGULAR, None), record
    assert "source_bytes" not in record
    assert source.is_symlink() and sorted(p.name for p in save.iterdir()) == ["profdsl-manifest.jsonl"]
