"""The runtime's layers (docs/architecture.md, "Measures"): its modules import one another without
a circle, and imports back up a floor stay few; no module of the whole package reaches itself
through its imports either. Every import counts, type-only and late ones
included (``benchmarks/runtime_layers.py`` reads them, and prints the figures)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _layers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runtime_layers", ROOT / "benchmarks" / "runtime_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("runtime_layers", module)
    spec.loader.exec_module(module)
    return module


def test_runtime_imports_form_no_circle() -> None:
    """Each layer of the concurrency model stands on the ones below it: no group of runtime
    modules reaches itself through its imports (at import time, for type checking or inside a
    function)."""
    layers = _layers()
    assert layers.circles(layers.imports(ROOT)) == []


def test_the_package_imports_form_no_circle() -> None:
    """No group of profdsl's modules, anywhere in the package, reaches itself through its imports
    (type-only and in-function ones included): a shared piece sits below the modules that use it."""
    layers = _layers()
    assert layers.circles(layers.package_imports(ROOT)) == []


def test_few_imports_run_back_up() -> None:
    """At most 3 imports between the runtime's units run from a floor to a higher one (issue
    31's bar; a unit without a floor fails here too, until it is given one)."""
    layers = _layers()
    up = layers.back_up(layers.imports(ROOT))
    assert len(up) <= 3, up


def test_the_counter_sees_a_circle(tmp_path: Path) -> None:
    """The counter itself: a circle closed by a type-only import and one closed inside a function
    are both found, and an import of a higher floor counts as back up."""
    layers = _layers()
    runtime = tmp_path / "profdsl" / "_runtime"
    runtime.mkdir(parents=True)
    (runtime / "plan.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from profdsl._runtime.profiler import Profiler\n"
    )
    (runtime / "profiler.py").write_text("from profdsl._runtime.plan import resolve\n")
    (runtime / "inbox.py").write_text("def f():\n    from profdsl._runtime import context\n")
    (runtime / "context.py").write_text("from profdsl._runtime.inbox import Inbox\n")
    graph = layers.imports(tmp_path)
    assert layers.circles(graph) == [["context", "inbox"], ["plan", "profiler"]]
    assert layers.back_up(graph) == [("inbox", "context"), ("plan", "profiler")]


def test_the_package_counter_sees_a_circle(tmp_path: Path) -> None:
    """The whole package's counter: a circle closed by a type-only import and a module imported by
    its package's name (``from profdsl.metrics import _tree``), and one closed inside a function
    through relative imports, are found; imports that only go down close none."""
    layers = _layers()
    metrics = tmp_path / "profdsl" / "metrics"
    metrics.mkdir(parents=True)
    (tmp_path / "profdsl" / "__init__.py").write_text("from profdsl.metrics import _tree\n")
    (metrics / "__init__.py").write_text("")
    (metrics / "_tree.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from profdsl.metrics._device import Times\n"
    )
    (metrics / "_device.py").write_text("from profdsl.metrics import _tree\n")
    (metrics / "_a.py").write_text("def f():\n    from . import _b\n")
    (metrics / "_b.py").write_text("from ._a import f\n")
    (metrics / "_low.py").write_text("import os\n")
    (tmp_path / "profdsl" / "_top.py").write_text("from profdsl.metrics._low import os\n")
    graph = layers.package_imports(tmp_path)
    assert graph["profdsl.metrics._device"] == {"profdsl.metrics._tree"}
    assert layers.circles(graph) == [
        ["profdsl.metrics._a", "profdsl.metrics._b"],
        ["profdsl.metrics._device", "profdsl.metrics._tree"],
    ]
