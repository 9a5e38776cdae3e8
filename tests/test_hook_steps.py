"""``PROFDSL_STEPS`` stays under the kernel's limit on one environment string (128 KiB: past it
the hook cannot start, E2BIG) however many steps were profiled: long lists are written as ranges
(``1-25000``), bounded, and every step is in the file ``PROFDSL_STEPS_FILE``."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import FinishHook, Profiler, profile_stage
from profdsl._runtime.writer.hook import HookPlan
from profdsl.collect import _finish_hook as finish_hook

from .profiling import config, hooks

#: Linux's MAX_ARG_STRLEN: one argument or environment string, NUL included.
KERNEL_LIMIT = 32 * 4096


def _expand(text: str) -> tuple[set[int], bool]:
    """The steps a PROFDSL_STEPS text names, and whether it says it was cut (the oracle: read as
    a hook script would)."""
    cut = text.endswith(",...")
    body = text[: -len(",...")] if cut else text
    steps: set[int] = set()
    for item in filter(None, body.split(",")):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        assert match, item
        first, last = int(match[1]), int(match[2] or match[1])
        assert first < last or match[2] is None
        steps.update(range(first, last + 1))
    return steps, cut


@given(st.sets(st.integers(0, 10**7), max_size=3000), st.integers(20, 4000))
def test_text_names_the_steps_within_its_bound(steps: set[int], most: int) -> None:
    text = finish_hook.steps_text(steps, most=most)
    named, cut = _expand(text)
    assert len(text) <= most
    plain = ",".join(map(str, sorted(steps)))
    if len(plain) <= most:
        assert text == plain  # what hooks always saw, unchanged
    if not cut:
        assert named == steps
    else:  # a prefix of the steps, whole items only
        assert named and named <= steps and max(named) < min(steps - named)


def test_a_long_run_is_one_range() -> None:
    assert finish_hook.steps_text(range(1, 25001)) == "1-25000"
    assert finish_hook.steps_text([1, 2, 3]) == "1,2,3"


def _plan(save_path: Path, cmd: str) -> HookPlan:
    return HookPlan(
        save_path=str(save_path), cmd=cmd, timeout_s=60, background=False, tool="torch", role="actor", rank=0,
        world_size=1, host="h",
    )  # fmt: skip


def test_a_hook_after_many_steps_starts_and_reads_every_step(tmp_path: Path) -> None:
    """60,000 profiled steps, every other one (ranges do not help): the command starts, its
    variable is bounded, and the file lists every step; the file is gone afterwards."""
    steps = list(range(0, 120_000, 2))
    out = tmp_path / "seen"
    cmd = (
        f'printf "%s\\n" "${{#PROFDSL_STEPS}}" > {out}; wc -l < "$PROFDSL_STEPS_FILE" >> {out}; '
        f'echo "$PROFDSL_STEPS_FILE" >> {out}'
    )
    with finish_hook.steps_file(steps) as path:
        env = _plan(tmp_path, cmd).environment(steps, steps_file=path)
        result = finish_hook.run_command(cmd, env, timeout_s=60, rank=0)
    assert result.status == "ok", result
    length, count, where = out.read_text().split()
    assert int(length) < KERNEL_LIMIT and int(count) == len(steps)
    assert not os.path.exists(where)


def test_the_profiled_run_s_hook_sees_the_file(tmp_path: Path) -> None:
    out = tmp_path / "steps.out"
    cmd = f'cat "$PROFDSL_STEPS_FILE" > {out}; echo "$PROFDSL_STEPS" >> {out}'
    pytest.importorskip("torch")
    profiler = Profiler(
        config(tmp_path / "run", steps=[1, 2, 3], finish_hook=FinishHook(cmd=cmd)), role="actor", rank=0, world_size=1
    )
    for step in range(5):
        with profiler.step(step), profile_stage("s"):
            pass
    profiler.close()
    assert out.read_text().split() == ["1", "2", "3", "1,2,3"]
    assert [h["status"] for h in hooks(tmp_path / "run")] == ["ok"]
