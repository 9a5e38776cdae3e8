"""The documentation site builds without a warning: pages, links, and the API reference generated
from the docstrings (a renamed or removed symbol breaks this build, not a reader)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for symbol in (
        "profdsl.Profiler",
        "profdsl.profile_stage",
        "profdsl.schedule.recorded_windows",
        "profdsl.naming.TraceName",
        "profdsl.testing.reset",
    ):
        assert f'id="{symbol}"' in api, symbol


def test_a_broken_reference_fails_the_build(tmp_path: Path) -> None:
    """The check has teeth: a page naming a symbol that does not exist fails --strict."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n::: profdsl.schedule.no_such_function\n")
    config = (ROOT / "mkdocs.yml").read_text().split("\nnav:")[0]
    config = (
        config.replace("docs_dir: docs", f"docs_dir: {docs}") + "\nplugins:\n  - mkdocstrings:\n"
        "      handlers:\n        python:\n          paths: [" + str(ROOT) + "]\n"
    )
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode != 0 and "no_such_function" in done.stdout + done.stderr
