"""Tests for the package as a user installs it: light import, public names, console script."""

from __future__ import annotations

import subprocess
import sys

import profdsl

HEAVY = ("torch", "ray", "nvtx", "vllm", "sglang", "numpy", "yaml")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)


class TestImport:
    """`import profdsl` stays light."""

    def test_import_pulls_in_no_heavy_module(self) -> None:
        """A fresh interpreter importing profdsl (and its pure core) loads none of the heavy deps."""
        code = (
            "import sys, profdsl, profdsl.schedule, profdsl.core.step_plan, profdsl.config, profdsl.naming, "
            "profdsl.ranks, profdsl.manifest, profdsl.ray, profdsl.testing, profdsl.core.preview\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
        )
        assert run_python(code).stdout.strip() == ""

    def test_all_is_sorted_and_resolves(self) -> None:
        """__all__ is sorted and every name in it exists."""
        assert list(profdsl.__all__) == sorted(profdsl.__all__)
        for name in profdsl.__all__:
            assert hasattr(profdsl, name), name

    def test_contract_names_exported(self) -> None:
        """The config classes of the contract are importable from profdsl."""
        for name in ("ConfigError", "FinishHook", "ProfilerConfig", "Schedule", "TorchOptions"):
            assert name in profdsl.__all__

    def test_config_error_is_value_error(self) -> None:
        """ConfigError is a ValueError, as the contract says."""
        assert issubclass(profdsl.ConfigError, ValueError)


class TestPublicSurface:
    """`profdsl.__all__` and the documented faces: one import path per public name."""

    #: The faces docs/api.md documents, and what each exports.
    FACES = (
        "profdsl",
        "profdsl.config",
        "profdsl.schedule",
        "profdsl.naming",
        "profdsl.ranks",
        "profdsl.manifest",
        "profdsl.metrics",
        "profdsl.rollout",
        "profdsl.ray",
        "profdsl.integrations.verl",
        "profdsl.integrations.transformers",
        "profdsl.testing",
    )
    CONTRACT = {
        "profdsl.schedule": {"Action", "action_at", "recorded_windows"},
        "profdsl.naming": {"TraceName"},
        "profdsl.ranks": {"replicas_for_ranks", "local_rank_from_trace_name"},
        "profdsl.manifest": {"read_manifest"},
    }

    def test_contract_modules_export_the_contracts_names_only(self) -> None:
        """The four contract modules hold their contract's names and nothing else public
        (`TEMP_PREFIX`, `append_record`, `discover_rank`... stay inside)."""
        import importlib

        for face, names in self.CONTRACT.items():
            module = importlib.import_module(face)
            assert set(module.__all__) == names, face
            assert {n for n in vars(module) if not n.startswith("_")} == names, face
        assert not hasattr(importlib.import_module("profdsl.naming"), "TEMP_PREFIX")

    def test_one_import_path_per_name(self) -> None:
        """No public name is exported by two faces, but the configuration classes `profdsl`
        re-exports from `profdsl.config` (the contract's two paths)."""
        import importlib

        homes: dict[str, list[str]] = {}
        for face in self.FACES:
            for name in importlib.import_module(face).__all__:
                homes.setdefault(name, []).append(face)
        config = set(importlib.import_module("profdsl.config").__all__)
        twice = {
            n: f for n, f in homes.items() if len(f) > 1 and not (f == ["profdsl", "profdsl.config"] and n in config)
        }
        assert twice == {}

    def test_every_face_is_documented(self) -> None:
        """docs/api.md shows each face (a name of `profdsl` as `profdsl.<name>`)."""
        from pathlib import Path

        api = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
        for face in self.FACES[1:]:
            assert f"::: {face}" in api, face
        for name in ("Profiler", "profile_stage", "mini_batch_window", "rollout_window", "ConfigError"):
            assert f"::: profdsl.{name}\n" in api, name


class TestCommandLine:
    """The `profdsl` console script and `python -m profdsl`."""

    def test_version(self) -> None:
        """--version prints the package version."""
        out = subprocess.run(
            [sys.executable, "-m", "profdsl", "--version"], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0 and out.stdout.strip() == f"profdsl {profdsl.__version__}"

    def test_help(self) -> None:
        """--help exits 0 and shows an example."""
        out = subprocess.run([sys.executable, "-m", "profdsl", "--help"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "usage: profdsl" in out.stdout and "examples:" in out.stdout

    def test_no_command_is_usage_error(self) -> None:
        """No subcommand prints usage to stderr and exits 2."""
        out = subprocess.run([sys.executable, "-m", "profdsl"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "usage: profdsl" in out.stderr

    def test_console_script_installed(self) -> None:
        """The installed `profdsl` entry point runs."""
        import shutil

        exe = shutil.which("profdsl", path=str(__import__("pathlib").Path(sys.executable).parent))
        assert exe is not None, "profdsl console script not installed next to the interpreter"
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and profdsl.__version__ in out.stdout

    def test_py_typed_shipped(self) -> None:
        """The package ships its py.typed marker."""
        from importlib.resources import files

        assert files("profdsl").joinpath("py.typed").is_file()


def test_mypy_strict_clean() -> None:
    """The package type-checks under mypy --strict (setup.cfg's [mypy] section)."""
    import pytest

    pytest.importorskip("mypy")
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(root / "setup.cfg"), str(root / "profdsl")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_clean() -> None:
    """Lint and import order are clean under ruff (ruff.toml)."""
    import pytest

    pytest.importorskip("ruff")
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "profdsl", "tests", "benchmarks", "examples"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_clean() -> None:
    """The code is as ``ruff format`` writes it (ruff.toml): ``ruff format --check`` in CI."""
    import pytest

    pytest.importorskip("ruff")
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "profdsl", "tests", "benchmarks", "examples"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_verl_integration_imports_nothing_heavy() -> None:
    """``profdsl.integrations.verl`` (and the parallel discovery) import neither verl, torch,
    megatron nor omegaconf."""
    code = (
        "import sys, profdsl.integrations.verl, profdsl.core._parallel_discovery\n"
        "print(' '.join(m for m in ('verl', 'torch', 'megatron', 'omegaconf', 'yaml') if m in sys.modules))"
    )
    assert run_python(code).stdout.strip() == ""


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run calls the README's test command verbatim (one command, kept in agreement)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    start = readme.index("Run the tests")
    begin = readme.index("```bash\n", start) + len("```bash\n")
    command = readme[begin : readme.index("\n```", begin)].strip()
    assert "python -m pytest" in command
    assert command in (root / ".ci" / "run").read_text().splitlines()


def test_dsl_functions_are_short() -> None:
    """No function of the DSL (its words, its decorator, the rollout window, verl's facade, the
    entries) is over 40 lines."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "profdsl"
    files = [
        *(root / "_dsl").glob("*.py"),
        root / "rollout" / "_window.py",
        root / "_runtime" / "context.py",
        root / "integrations" / "verl" / "_facade.py",
    ]
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"  # type: ignore[operator]
        for path in files
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 40
    ]  # type: ignore[operator]
    assert long == []
