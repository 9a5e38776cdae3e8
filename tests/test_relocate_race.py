"""A source swapped for a link (or a FIFO) after ``apply`` checked it is never moved into
``save_path`` under a trace name.

``apply`` checks each source with ``lstat`` (a link is skipped, never followed), then waits for it
to hold still, then moves it: a source turned into a link between the check and the move was
renamed into save_path under a trace name (a name every reader refuses, but that the finish
hook's upload would follow), and across filesystems its target's bytes were copied in. Now what
was moved is checked after the rename, in a private staging name, and a link goes back out; the
copy opens the source itself, never through a link, never blocked by a FIFO. The race is made
deterministic by swapping the source right after the check (``_is_regular``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from profdsl.collect import _relocate as relocate
from profdsl.collect._relocate import Move
from profdsl.core._naming import TraceName
from profdsl.manifest import read_manifest

SECRET = "hunter2-secret"


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, Move]:
    outside = tmp_path / "outside" / "id_rsa"
    outside.parent.mkdir()
    outside.write_text(SECRET)
    source = tmp_path / "engine" / "rollout.json"
    source.parent.mkdir()
    source.write_text('{"traceEvents": []}')
    name = TraceName(role="rollout", host="h", pid=1, time_ms=1_795_000_000_000, ext=".json")
    move = Move(str(source), name, "rollout", {"role": "rollout"})
    return outside, source, tmp_path / "save", move


def _swap_after_the_check(monkeypatch: pytest.MonkeyPatch, source: Path, swap: Any) -> None:
    real = relocate._is_regular

    def checked_then_swapped(path: str) -> bool:
        found = real(path)
        if path == str(source):
            source.unlink()
            swap(source)
        return found

    monkeypatch.setattr(relocate, "_is_regular", checked_then_swapped)


def _swap_after_the_wait(monkeypatch: pytest.MonkeyPatch, source: Path, swap: Any) -> None:
    """The same, once the source held still (the wait is the window's widest part)."""
    real = relocate.wait_complete

    def waited_then_swapped(paths: Any, timeout_s: float) -> list[str]:
        found = real(paths, timeout_s)
        source.unlink()
        swap(source)
        return found

    monkeypatch.setattr(relocate, "wait_complete", waited_then_swapped)


def _no_link_and_no_secret(save: Path) -> None:
    for path in save.rglob("*"):
        assert not path.is_symlink(), path
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_a_source_swapped_for_a_link_is_moved_back_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside, source, save, move = _setup(tmp_path)
    _swap_after_the_check(monkeypatch, source, lambda path: path.symlink_to(outside))
    [record] = relocate.apply([move], str(save), wait_s=0.5, record_incomplete=True)
    assert record["status"] == "skipped" and record["path"] is None, record
    assert "not a regular file" in record["reason"] and record["source"] == str(source)
    _no_link_and_no_secret(save)
    assert sorted(p.name for p in save.iterdir()) == ["profdsl-manifest.jsonl"]
    assert source.is_symlink() and outside.read_text() == SECRET  # back where it was, untouched
    assert [r["status"] for r in read_manifest(save)] == ["skipped"]


def test_across_filesystems_a_source_swapped_for_a_link_is_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the rename fails with EXDEV (another filesystem), the copy opened the source by its
    name, following a link to the file it points at: that file's bytes landed under a trace name."""
    outside, source, save, move = _setup(tmp_path)
    _swap_after_the_check(monkeypatch, source, lambda path: path.symlink_to(outside))
    real = os.replace

    def across(src: Any, dst: Any) -> None:
        if os.fspath(src) == str(source):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(src, dst)

    monkeypatch.setattr(relocate.os, "replace", across)
    [record] = relocate.apply([move], str(save), wait_s=0.5, record_incomplete=True)
    assert record["status"] == "skipped" and record["path"] is None, record
    _no_link_and_no_secret(save)
    assert sorted(p.name for p in save.iterdir()) == ["profdsl-manifest.jsonl"]
    assert source.is_symlink() and outside.read_text() == SECRET


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("across", [False, True], ids=["rename", "copy"])
def test_a_source_swapped_for_a_fifo_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, across: bool
) -> None:
    _, source, save, move = _setup(tmp_path)
    _swap_after_the_wait(monkeypatch, source, os.mkfifo)
    if across:
        real = os.replace

        def fail_across(src: Any, dst: Any) -> None:
            if os.fspath(src) == str(source):
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            real(src, dst)

        monkeypatch.setattr(relocate.os, "replace", fail_across)
    [record] = relocate.apply([move], str(save), wait_s=0.5, record_incomplete=True)
    assert record["status"] == "skipped" and record["path"] is None, record
    assert sorted(p.name for p in save.iterdir()) == ["profdsl-manifest.jsonl"]


def test_a_regular_source_is_still_moved(tmp_path: Path) -> None:
    _, source, save, move = _setup(tmp_path)
    [record] = relocate.apply([move], str(save), wait_s=0.5, record_incomplete=True)
    assert record["status"] == "ok" and (save / record["path"]).read_text() == '{"traceEvents": []}'
    assert not source.exists() and record["bytes"] == len('{"traceEvents": []}')
    assert sorted(p.name for p in save.iterdir()) == sorted([record["path"], "profdsl-manifest.jsonl"])
