"""A hostile round against the day's changes: a metrics log torn by a full disk, a skipped reason
of a megabyte (issue 31's follow-up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profdsl._cli.common import skipped
from profdsl.collect.metrics_log import append_line, log_name, read_log_lines


def _line(step: int) -> bytes:
    data = {"rank": 0, "role": "actor", "step": step, "wall_s": 1.0, "stages": {}}
    return (json.dumps(data) + "\n").encode()


def test_a_line_appended_after_a_torn_one_is_not_swallowed(tmp_path: Path) -> None:
    # a full disk cut the last append short: the file ends mid-line
    path = tmp_path / log_name(0, "h", 1)
    path.write_bytes(_line(1) + _line(2)[:9])
    assert append_line(str(path), _line(3))
    found, problems = read_log_lines(tmp_path)
    assert [line.step for _, _, line in found] == [1, 3]
    assert len(problems) == 1 and "line 2" in problems[0]


def test_a_skipped_reason_is_bounded_in_length(capsys: pytest.CaptureFixture[str]) -> None:
    assert skipped("diff", ["A" * 1_000_000 + "\x1b[2J", "short"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert len(err[0]) < 2000 and "1000004 characters" in err[0] and "\x1b" not in err[0]
    assert err[1] == "profdsl diff: skipped short"


def test_a_reason_cut_is_cut_after_escaping(capsys: pytest.CaptureFixture[str]) -> None:
    skipped("ls", ["\n" * 5000])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 2000
