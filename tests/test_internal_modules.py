"""Issue 31: internal modules are marked internal (docs/architecture.md, "Public and internal
modules"). A module is public only when it is listed here; every other one has a leading
underscore in its path, and the API reference documents public paths only."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The public module paths (the contract's, the docs', the examples'): everything else is internal.
PUBLIC = {
    "profdsl",
    "profdsl.__main__",
    "profdsl.analysis",
    "profdsl.analysis.culprits",
    "profdsl.analysis.merge",
    "profdsl.collect",
    "profdsl.collect.metrics_log",
    "profdsl.config",
    "profdsl.config.selector",
    "profdsl.core",
    "profdsl.core.preview",
    "profdsl.core.step_plan",
    "profdsl.errors",
    "profdsl.integrations",
    "profdsl.integrations.transformers",
    "profdsl.integrations.verl",
    "profdsl.integrations.verl.config",
    "profdsl.manifest",
    "profdsl.metrics",
    "profdsl.metrics.aggregate",
    "profdsl.naming",
    "profdsl.ranks",
    "profdsl.ray",
    "profdsl.records",
    "profdsl.records.fields",
    "profdsl.records.manifest",
    "profdsl.records.meta",
    "profdsl.records.metrics_log",
    "profdsl.records.requests",
    "profdsl.rollout",
    "profdsl.rollout.sglang",
    "profdsl.rollout.torch_sampler",
    "profdsl.rollout.vllm",
    "profdsl.schedule",
    "profdsl.testing",
}


def modules() -> list[str]:
    out = []
    for path in sorted((ROOT / "profdsl").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "__pycache__" not in parts:
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_a_module_is_public_or_says_internal() -> None:
    """No module outside the public list has a path without a leading underscore."""
    unmarked = [m for m in modules() if m not in PUBLIC and not any(p.startswith("_") for p in m.split(".")[1:])]
    assert unmarked == [], "neither public nor internal (underscore it, or list it public and document it)"


def test_every_public_module_imports() -> None:
    for name in sorted(PUBLIC):
        if name != "profdsl.__main__":
            importlib.import_module(name)


def test_the_docs_import_public_modules_only() -> None:
    """What the README, the docs and the examples tell a user to import is public."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    imported = {
        (path.name, name)
        for path in files
        for name in re.findall(r"^\s*(?:from|import) (profdsl[\w.]*)", path.read_text(), flags=re.M)
    }
    assert imported
    assert sorted((f, n) for f, n in imported if n not in PUBLIC) == []


def test_the_api_reference_shows_public_paths_only() -> None:
    api = (ROOT / "docs" / "api.md").read_text()
    targets = re.findall(r"^::: (\S+)$", api, flags=re.M)
    assert targets
    assert [t for t in targets if any(p.startswith("_") for p in t.split("."))] == []
