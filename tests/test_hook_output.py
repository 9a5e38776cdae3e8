"""A failing finish hook says why: the last lines of its command's output (stdout and stderr,
bounded, control characters escaped) are in the one log line of its failure (at the default
level: the command's own lines are logged at INFO), in its manifest record and in ``profdsl
check``'s line. Real hook commands, real profiler."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import profdsl._cli
from profdsl import FinishHook, Profiler, profile_stage
from profdsl.collect import _finish_hook as finish_hook
from profdsl.collect._hook_output import OUTPUT_MAX_CHARS, OUTPUT_MAX_LINES
from profdsl.records.manifest import HookRecord

from .profiling import config, hooks

pytest.importorskip("torch")

CREDENTIALS = 'echo "Unable to locate credentials" >&2; exit 1'


def run_hook(save: Path, cmd: str) -> None:
    profiler = Profiler(config(save, finish_hook=FinishHook(cmd=cmd)), role="actor", rank=0, world_size=1)
    with profiler.step(1), profile_stage("stage"):
        pass
    profiler.close()


def test_the_failure_line_and_record_carry_the_command_s_stderr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        run_hook(tmp_path, CREDENTIALS)
    [failure] = [r for r in caplog.records if "finish hook failed" in r.getMessage()]
    assert failure.levelno >= logging.WARNING
    assert "exit code 1" in failure.getMessage() and "Unable to locate credentials" in failure.getMessage()
    [record] = hooks(tmp_path)
    assert (record["status"], record["exit_code"]) == ("failed", 1)
    assert record["output"] == ["Unable to locate credentials"]


def test_check_names_the_last_output_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_hook(tmp_path, 'echo "uploading"; ' + CREDENTIALS)
    capsys.readouterr()
    assert profdsl._cli.main(["check", str(tmp_path)]) == 1
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert "hook failed" in line and "exit code 1" in line and "Unable to locate credentials" in line


def test_a_hook_that_succeeds_keeps_no_output(tmp_path: Path) -> None:
    run_hook(tmp_path, "echo all fine")
    [record] = hooks(tmp_path)
    assert record["status"] == "ok" and "output" not in record


def test_the_output_is_the_last_lines_and_bounded(tmp_path: Path) -> None:
    """100 lines: the last 20 are kept; long lines: at most OUTPUT_MAX_CHARS in all."""
    run_hook(tmp_path / "many", "seq 1 100; exit 2")
    [record] = hooks(tmp_path / "many")
    assert record["output"] == [str(n) for n in range(81, 101)]
    run_hook(tmp_path / "long", "for i in 1 2 3 4 5 6 7 8; do printf '%01000d\\n' $i; done; echo last; exit 2")
    [record] = hooks(tmp_path / "long")
    kept = record["output"]
    assert kept[-1] == "last" and sum(len(line) for line in kept) <= OUTPUT_MAX_CHARS
    assert len(kept) < 9 and all(line == f"{int(line):01000d}" for line in kept[:-1])


def test_one_huge_line_is_cut_to_its_end(tmp_path: Path) -> None:
    run_hook(tmp_path, "head -c 200000 /dev/zero | tr '\\0' x; echo END; exit 1")
    [record] = hooks(tmp_path)
    [line] = record["output"]
    assert line.endswith("xEND") and len(line) <= OUTPUT_MAX_CHARS


def test_control_characters_are_escaped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="profdsl"):
        run_hook(tmp_path, "printf 'bad \\033]0;title\\007 \\r\\342\\200\\250done\\n' >&2; exit 1")
    [record] = hooks(tmp_path)
    assert record["output"] == ["bad \\x1b]0;title\\x07 \\r\\u2028done"]
    assert "\x1b" not in caplog.text and "\x07" not in caplog.text and "\u2028" not in caplog.text


def test_a_timed_out_hook_keeps_what_it_said(tmp_path: Path) -> None:
    cmd = 'echo "waiting for the bucket"; sleep 60'
    profiler = Profiler(
        config(tmp_path, finish_hook=FinishHook(cmd=cmd, timeout_s=1.0)), role="actor", rank=0, world_size=1
    )
    with profiler.step(1), profile_stage("stage"):
        pass
    profiler.close()
    [record] = hooks(tmp_path)
    assert record["status"] == "timeout" and record["output"] == ["waiting for the bucket"]


def test_run_command_result_has_the_tail() -> None:
    result = finish_hook.run_command(CREDENTIALS, dict(os.environ), timeout_s=60, rank=0)
    assert (result.status, result.output) == ("failed", ("Unable to locate credentials",))


def test_the_schema_states_the_bounds() -> None:
    [field] = [f for f in HookRecord.__attrs_attrs__ if f.name == "output"]
    assert f"{OUTPUT_MAX_LINES} lines and {OUTPUT_MAX_CHARS} characters" in field.metadata["doc"]
