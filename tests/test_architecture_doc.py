"""docs/architecture.md stays true of the tree: its table of what each package holds names every
module of each package and no module that is gone, and every ``.py`` path the docs write exists.

The table is read as it is written: a row ``| `pkg/` | `a`, `b`; `sub/` (`c`, `d`) | ... |``
names the modules ``a``, ``b``, ``sub/c`` and ``sub/d`` of ``profdsl/pkg``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "profdsl"
DOCS = ROOT / "docs"

ROW = re.compile(r"^\| `(\w+)/` \| (.*?) \|", re.MULTILINE)
SUBPACKAGE = re.compile(r"`(\w+)/` \(([^)]*)\)")
NAME = re.compile(r"`(\w+)`")
PATH = re.compile(r"`[^`\n]*?(?<![\w./-])((?:\w+/)+\w+\.py)\b")


def package_rows() -> dict[str, set[str]]:
    """Each package the table lists (but the one module per command of ``_cli/``), and the
    modules it names."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("## What each package holds") :]
    table = table[: table.index("\n## ")]
    rows: dict[str, set[str]] = {}
    for package, cell in ROW.findall(table):
        if "one module per" in cell:
            continue
        named = {f"{sub}/{name}" for sub, inner in SUBPACKAGE.findall(cell) for name in NAME.findall(inner)}
        named |= set(NAME.findall(SUBPACKAGE.sub("", cell)))
        rows[package] = named
    return rows


def modules(package: str) -> set[str]:
    """The modules under ``profdsl/<package>``, as ``name`` or ``sub/name`` (no ``__init__``)."""
    base = PACKAGE / package
    return {p.relative_to(base).with_suffix("").as_posix() for p in base.rglob("*.py") if p.stem != "__init__"}


def test_the_table_reads_a_row_per_package() -> None:
    rows = package_rows()
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists() and p.name != "__pycache__"}
    assert len(rows) >= 8
    assert set(rows) <= folders


@pytest.mark.parametrize("package", sorted(package_rows()))
def test_each_package_row_names_its_modules_and_no_other(package: str) -> None:
    named, actual = package_rows()[package], modules(package)
    # A name in the row that is no module is a class or function the row mentions beside one
    # (``tracefile`` "with its ``Census``"): only a lower-case name must be a module.
    gone = {name for name in named - actual if name.islower()}
    assert not actual - named, f"docs/architecture.md's `{package}/` row leaves out {sorted(actual - named)}"
    assert not gone, f"docs/architecture.md's `{package}/` row names modules that are gone: {sorted(gone)}"


def test_every_python_path_the_docs_write_exists() -> None:
    missing = []
    for doc in sorted(DOCS.glob("*.md")):
        for path in PATH.findall(doc.read_text(encoding="utf-8")):
            if path.startswith(("torch/", "vllm/", "sglang/", "ray/", "trl/", "transformers/", "verl/", "c10/")):
                continue  # another project's source, named as where a fact comes from
            if not any((base / path).exists() for base in (ROOT, PACKAGE)):
                missing.append(f"{doc.name}: {path}")
    assert not missing, missing
