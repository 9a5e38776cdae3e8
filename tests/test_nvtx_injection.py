"""``runtime_env``'s NVTX guard against a real NVTX injection library, compiled here with ``cc``.

NVTX v3 (the C library compiled into the ``nvtx`` package's extension modules, and into torch)
loads a tool on its first call: when ``NVTX_INJECTION64_PATH`` is set it ``dlopen``s that value
and calls the library's ``InitializeInjectionNvtx2(NvtxGetExportTableFunc_t)`` (``nvtxInit.h``,
load sequence 2). The library built here only writes a marker file when NVTX calls it, so a test
can see whether a process was injected. An empty value is the trap: glibc's ``dlopen("")`` returns
the main program, whose symbol scope includes an ``LD_PRELOAD``ed library, so a tool preloaded
into the process still injects. A path that cannot exist fails the ``dlopen``, and NVTX then stays
a no-op.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profdsl import ProfilerConfig
from profdsl.ray import runtime_env

pytest.importorskip("nvtx")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and glibc dlopen")

MARKER_VAR = "PROFDSL_TEST_NVTX_MARKER"

INJECTION_SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef const void *(*nvtx_get_export_table_t)(uint32_t export_table_id);

/* NVTX v3's entry point for a dynamic injection (nvtxInit.h). Returning 0 declines: NVTX then
   unloads the library and turns every call into a no-op, so nothing else is needed here. */
__attribute__((visibility("default")))
int InitializeInjectionNvtx2(nvtx_get_export_table_t get_export_table) {
    const char *marker = getenv("PROFDSL_TEST_NVTX_MARKER");
    (void)get_export_table;
    if (marker != NULL) {
        FILE *out = fopen(marker, "a");
        if (out != NULL) {
            fputs("injected\n", out);
            fclose(out);
        }
    }
    return 0;
}
"""

# A process that uses NVTX the way profdsl's annotator does: a domain range pushed and popped.
PUSH_RANGE = (
    "import nvtx\n"
    "domain = nvtx.get_domain('profdsl')\n"
    "domain.push_range(domain.get_event_attributes(message='stage'))\n"
    "domain.pop_range()\n"
    "print('ran')\n"
)


@pytest.fixture(scope="module")
def injection_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library exporting ``InitializeInjectionNvtx2`` (skipped without a C compiler)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the NVTX injection library")
    folder = tmp_path_factory.mktemp("nvtx-injection")
    source, library = folder / "inject.c", folder / "libprofdsl_test_inject.so"
    source.write_text(INJECTION_SOURCE)
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr
    return library


def injected(tmp_path: Path, **env: str) -> bool:
    """Run ``PUSH_RANGE`` in a fresh interpreter with ``env`` on top of a clean environment;
    whether NVTX called the injection library."""
    marker = tmp_path / "marker"
    marker.unlink(missing_ok=True)
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "LD_PRELOAD", "NVTX_DISABLE")
    }
    result = subprocess.run(
        [sys.executable, "-c", PUSH_RANGE],
        env={**base, MARKER_VAR: str(marker), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "ran" in result.stdout, result.stderr
    return marker.exists()


def guard_env() -> dict[str, str]:
    env: dict[str, str] = runtime_env(ProfilerConfig(enable=True))["env_vars"]
    return env


class TestInjectionLibraryIsSeen:
    """The test can detect an injection at all (otherwise "no marker" would prove nothing)."""

    def test_named_by_the_variable(self, injection_library: Path, tmp_path: Path) -> None:
        assert injected(tmp_path, NVTX_INJECTION64_PATH=str(injection_library))

    def test_empty_value_lets_a_preloaded_library_in(self, injection_library: Path, tmp_path: Path) -> None:
        """The old guard, ``NVTX_INJECTION64_PATH=""``, does not keep out a preloaded tool."""
        assert injected(tmp_path, LD_PRELOAD=str(injection_library), NVTX_INJECTION64_PATH="")


class TestGuard:
    """profdsl's ``runtime_env`` for ``tool="torch"`` really keeps NVTX tools out."""

    def test_preloaded_library_is_not_injected(self, injection_library: Path, tmp_path: Path) -> None:
        assert not injected(tmp_path, LD_PRELOAD=str(injection_library), **guard_env())

    def test_guard_overrides_an_inherited_tool(self, injection_library: Path, tmp_path: Path) -> None:
        """A worker that inherited a tool's NVTX_INJECTION64_PATH (and its preload) gets none."""
        env = {"NVTX_INJECTION64_PATH": str(injection_library), **guard_env()}
        assert not injected(tmp_path, LD_PRELOAD=str(injection_library), **env)

    def test_guard_value_is_a_path_that_cannot_exist(self) -> None:
        path = guard_env()["NVTX_INJECTION64_PATH"]
        assert path and os.path.isabs(path) and not os.path.exists(path)
