"""The README's commands, run as written: its set-up line installs what the commands it names
need, and each `profdsl ...` command it names after "Then read what was captured" runs, verbatim,
on the folder `profdsl demo --out profiles` writes (real subprocesses, in a scratch folder)."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: The extra each named command needs beyond the core install.
NEEDS = {"demo": "torch", "plot": "plot"}


def _setup_line() -> str:
    start = README.index("## Set up")
    begin = README.index("```bash\n", start) + len("```bash\n")
    return README[begin : README.index("\n```", begin)].strip()


def _named_commands() -> list[str]:
    start = README.index("Then read what was captured")
    section = README[start : README.index("\n## ", start)]
    return [" ".join(c.split()) for c in re.findall(r"`(profdsl [^`]+)`", section)]


def _extras(line: str) -> set[str]:
    match = re.search(r"-e '\.\[([a-z,]+)\]'", line)
    assert match, line
    return set(match.group(1).split(","))


def test_the_set_up_line_installs_what_the_named_commands_need() -> None:
    """Every extra the set-up line names exists, and the commands' own needs are in it
    (``plot`` exits 2 without matplotlib); the HTA reader's extra is named where the README
    names ``export --hta``."""
    line = _setup_line()
    extras = _extras(line)
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    assert extras <= set(parser["options.extras_require"])
    for command in ["demo", *(c.split()[1] for c in _named_commands())]:
        if command in NEEDS:
            assert NEEDS[command] in extras, command
    assert "[hta]" in README[README.index("export --hta") :][:600]


def test_the_named_commands_run_on_the_demos_folder(tmp_path: Path) -> None:
    """The demo's command of the set-up line, then every command the README names, verbatim, in
    one folder (examples/ beside it, as in a clone): each exits 0."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    demo = _setup_line().split("&&")[-1].strip()
    commands = [demo, *_named_commands()]
    assert len(commands) >= 8 and any(c.startswith("profdsl plan examples/") for c in commands), commands
    for command in commands:
        argv = [sys.executable, "-m", "profdsl", *shlex.split(command)[1:]]
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert (tmp_path / "stages.png").stat().st_size > 0 and (tmp_path / "run.json.gz").stat().st_size > 0
    assert any((tmp_path / "hta").iterdir())


def test_the_quick_pass_time_is_stated_once() -> None:
    """How long the quick pass takes is said in the README only: setup.cfg's marker comment points
    there instead of giving a second, different figure."""
    comment = [line for line in (ROOT / "setup.cfg").read_text().splitlines() if "quick pass" in line]
    duration = re.compile(r"\b(minutes?|seconds?|hours?|\d+\s*s)\b")  # "about a minute and a half", "90 s"
    assert comment and not any(duration.search(line) for line in comment), comment
    assert re.search(r"quick pass \(under [a-z0-9]+ minutes", README)


def test_the_readme_says_how_to_get_torch_s_cpu_build() -> None:
    """The constraints pin torch; outside CI the registry's build is the CUDA one: the README gives
    PyTorch's CPU wheel index, with the pinned version."""
    pinned = re.search(r"^torch==(\S+)", (ROOT / ".ci" / "constraints.txt").read_text(), re.MULTILINE)
    assert pinned
    assert f"--index-url https://download.pytorch.org/whl/cpu torch=={pinned.group(1)}" in README
