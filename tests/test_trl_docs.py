"""docs/transformers.md, the README and the example agree with what CI installs for TRL
(.ci/engines-trl.txt, made by .ci/run): the versions named as tested are the pinned ones, and the
environment the docs tell you to make is made as CI makes it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "transformers.md").read_text()


def _pins() -> dict[str, str]:
    lines = (ROOT / ".ci" / "engines-trl.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def test_the_tested_versions_named_are_the_pinned_ones() -> None:
    pins = _pins()
    tested = f"tested: transformers {pins['transformers']}, TRL {pins['trl']}"
    assert tested in DOC
    example = (ROOT / "examples" / "trl_grpo.py").read_text()
    assert f"trl=={pins['trl']}" in example and f"transformers=={pins['transformers']}" in example
    assert f"trl=={pins['trl']}" in DOC and f"transformers=={pins['transformers']}" in DOC  # how a user installs them


def test_the_test_environment_is_made_as_ci_makes_it() -> None:
    """.ci/run installs torch and the pinned list in one call without the resolver, then profdsl
    without its dependencies, then runs tests/test_trl.py: the docs' commands do the same."""
    run = (ROOT / ".ci" / "run").read_text()
    assert '-m pip install -q --no-compile --no-deps -c .ci/constraints.txt torch -r "$2"' in run
    assert 'engine_env "$trl_env" .ci/engines-trl.txt' in run
    block = DOC[DOC.index("## Tests") :]
    commands = re.findall(r"^\.ci-trl-venv/bin/python (.+)$", block, re.MULTILINE)
    assert commands == [
        "-m pip install --no-deps -c .ci/constraints.txt torch -r .ci/engines-trl.txt",
        "-m pip install --no-deps -e .",
        "-m pytest -p no:cacheprovider -rs tests/test_trl.py",
    ]


def test_the_readme_names_the_integration() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "profile_trainer" in readme and "docs/transformers.md" in readme
