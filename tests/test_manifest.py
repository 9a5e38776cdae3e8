"""Tests for `profdsl.manifest`: records, torn lines, and real concurrent writers."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from profdsl.collect._manifest import MANIFEST_NAME, RECORD_KEYS, append_record, make_record
from profdsl.manifest import read_manifest


class TestRecords:
    """Tests for `make_record`."""

    def test_every_contract_key(self) -> None:
        """A record carries every contract key, None where not applicable, status ok."""
        record = make_record("trace", "x.json.gz", role="actor", window=(1, 2))
        assert set(RECORD_KEYS) <= set(record)
        assert record["status"] == "ok" and record["window"] == [1, 2] and record["replica"] is None

    @pytest.mark.parametrize("path", ["/abs/x.json.gz", "../x.json.gz", "a/../../x"])
    def test_paths_stay_relative(self, path: str) -> None:
        """Absolute paths and .. are refused."""
        with pytest.raises(ValueError, match="relative to save_path"):
            make_record("trace", path)

    def test_unknown_kind(self) -> None:
        """Only the contract's kinds are accepted."""
        with pytest.raises(ValueError, match="manifest kind must be one of"):
            make_record("blob", "x")


class TestReadWrite:
    """Appending and reading back."""

    def test_round_trip(self, tmp_path: Path) -> None:
        """Appended records read back in order."""
        for step in range(3):
            assert append_record(tmp_path, make_record("trace", f"t{step}", step=step))
        assert [r["step"] for r in read_manifest(tmp_path)] == [0, 1, 2]

    def test_missing_manifest_is_empty(self, tmp_path: Path) -> None:
        """A folder without a manifest reads as no records."""
        assert read_manifest(tmp_path) == []

    def test_torn_last_line_skipped_quietly(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A writer killed mid-line leaves a torn last line: skipped without a warning."""
        append_record(tmp_path, make_record("trace", "a"))
        with open(tmp_path / MANIFEST_NAME, "a") as f:
            f.write('{"kind": "trace", "pa')
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            assert [r["path"] for r in read_manifest(tmp_path)] == ["a"]
        assert caplog.text == ""

    def test_corrupt_middle_line_skipped_with_warning(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A corrupt line in the middle is skipped with a warning naming it."""
        (tmp_path / MANIFEST_NAME).write_text(
            '{"kind": "trace", "path": "a"}\nGARBAGE\n{"kind": "hook", "path": null}\n'
        )
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            assert [r["kind"] for r in read_manifest(tmp_path)] == ["trace", "hook"]
        assert "skipping unreadable line 2" in caplog.text

    def test_unwritable_folder(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A save_path that cannot be created: False and one log line, no exception."""
        (tmp_path / "file").write_text("x")
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            assert not append_record(tmp_path / "file" / "sub", make_record("trace", "a"))
            assert not append_record(tmp_path / "file" / "sub", make_record("trace", "b"))
        assert caplog.text.count("cannot append to the manifest") == 1

    def test_concurrent_processes(self, tmp_path: Path) -> None:
        """Four processes appending 300 long records each: every line whole, none lost."""
        code = (
            "import sys\n"
            "from profdsl.collect._manifest import append_record, make_record\n"
            "w = int(sys.argv[2])\n"
            "for i in range(300):\n"
            "    assert append_record(sys.argv[1], make_record('trace', f'w{w}-{i}', note='x' * 5000))\n"
        )
        procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(w)]) for w in range(4)]
        try:
            assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
        finally:
            for p in procs:
                p.kill()
        lines = (tmp_path / MANIFEST_NAME).read_bytes().split(b"\n")
        assert lines[-1] == b""
        parsed = [json.loads(line) for line in lines[:-1]]
        assert sorted(r["path"] for r in parsed) == sorted(f"w{w}-{i}" for w in range(4) for i in range(300))
