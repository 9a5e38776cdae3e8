"""``profdsl diff`` cannot lie or hang: a FIFO or a symlink to /dev/zero named like a metrics log
is refused, a schema-valid huge value is left out (named), a stage without ``total_s`` is missing
(its file and line named, not 0 s), and ranks traced in one run only are compared on the ranks
both runs have (what was left out said)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl._cli import main
from profdsl.collect.metrics_log import log_name


def line(rank: int, step: int, total: float | None, traced: bool = False) -> dict[str, Any]:
    stage: dict[str, Any] = {"self_s": 0.001, "count": 1}
    if total is not None:
        stage["total_s"] = total
    return {
        "role": "actor",
        "rank": rank,
        "world_size": 2,
        "step": step,
        "wall_s": 0.2,
        "stages": {"update_actor": stage},
        "traced": traced,
    }


def write(folder: Path, lines: list[dict[str, Any]], rank: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / log_name(rank, "h", 1)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def steady(folder: Path, ranks: tuple[int, ...] = (0, 1), traced: set[tuple[int, int]] = frozenset()) -> None:  # type: ignore[assignment]
    for rank in ranks:
        write(
            folder,
            [line(rank, s, 0.1 + 0.001 * (s % 3) + 0.05 * rank, (rank, s) in traced) for s in range(10)],
            rank,
        )


def diff(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> tuple[int, dict[str, Any], str]:
    code = main(["diff", str(a), str(b), "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else {}), captured.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_dev_zero_named_like_a_log_never_blocks(tmp_path: Path) -> None:
    steady(tmp_path / "a")
    steady(tmp_path / "b")
    os.mkfifo(tmp_path / "a" / log_name(5, "h", 9))
    os.symlink("/dev/zero", tmp_path / "b" / log_name(6, "h", 9))
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr  # 1: input was skipped (each named)
    assert done.stderr.count("not a regular file") == 2
    assert json.loads(done.stdout)["rows"]


def test_a_huge_value_is_left_out_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steady(tmp_path / "a")
    steady(tmp_path / "b")
    path = write(tmp_path / "b", [line(0, s, 1e200 if s == 3 else 0.1) for s in range(10)], 0)
    code, out, err = diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 1
    assert f"{path} line 4" in err and "update_actor" in err
    assert all(abs(r["change_s"]) < 1 for r in out["rows"])


def test_missing_total_is_missing_not_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steady(tmp_path / "a")
    write(tmp_path / "b", [line(r, s, None) for s in range(10) for r in (0,)], 0)
    write(tmp_path / "b", [line(1, s, None) for s in range(10)], 1)
    code, out, err = diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 1 and "line 1" in err and "no total_s" in err
    for row in out["rows"]:
        assert row["verdict"] != "faster" and row.get("ratio") != 0.0


def test_ranks_traced_in_one_run_only_are_compared_on_both_sides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Identical per-rank times; rank 0's every step traced in A (so A has no untraced rank 0):
    no change is reported, and the left-out rank is said."""
    steady(tmp_path / "a", traced={(0, s) for s in range(10)})
    steady(tmp_path / "b")
    code, out, err = diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 1  # something was left out, and said
    [row] = out["rows"]
    assert row["verdict"] == "unchanged" and abs(row["change_s"]) < 1e-9, row
    assert "rank 0" in err and "left out" in err


def test_a_flood_of_bad_lines_is_named_a_few_then_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A metrics log of thousands of lines that are no record (a file in the folder is
    untrusted) is said in a few lines and a count, not a line per bad line (it printed 5,000)."""
    steady(tmp_path / "a")
    steady(tmp_path / "b")
    log = next((tmp_path / "b").iterdir())
    with log.open("a") as file:
        file.write("not json\n" * 5000)
    code, report, err = diff(capsys, tmp_path / "a", tmp_path / "b")
    named = [x for x in err.splitlines() if x.startswith("profdsl diff: skipped")]
    assert code == 1 and report  # the comparison is still made, and the exit code says input was left out
    assert 1 <= len(named) <= 11, err[-2000:]
    assert named[-1] == f"profdsl diff: skipped {5000 - (len(named) - 1)} more (not named)", named[-1]
