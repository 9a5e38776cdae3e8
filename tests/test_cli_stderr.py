"""Every line a command writes to stderr goes through ``_cli/common.say``: control characters
escaped, whatever names the line (a folder given on the command line included)."""

from __future__ import annotations

from pathlib import Path

import pytest

import profdsl._cli

ESC = "\x1b[2J"


@pytest.mark.parametrize("command", ["merge", "plot"])
def test_a_folder_named_in_nothing_to_do_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A folder whose manifest holds no valid record: exit 1, and the line saying there is nothing
    to merge or draw names the folder escaped, as the skipped manifest line does."""
    pytest.importorskip("matplotlib")
    folder = tmp_path / f"run{ESC}"
    folder.mkdir()
    (folder / "profdsl-manifest.jsonl").write_text("not a record\n")
    assert profdsl._cli.main([command, str(folder), "-o", str(tmp_path / "out.png")]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "run\\x1b[2J: no " in err
