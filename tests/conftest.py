"""Shared test configuration: hypothesis profiles, the session's one local Ray cluster, the
session's one run of ``profdsl demo``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

# CI machines are shared and noisy: no deadlines, and a derandomized profile so a run is repeatable.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100)
# The quick pass (python -m pytest -m "not slow"): every property, with fewer examples.
settings.register_profile("quick", deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


import pytest  # noqa: E402

# Stand-in modules for the optional SGLang environment only (sgl_kernel, torchvision): never
# imported here, not even as doctest modules.
collect_ignore = ["sglang_stubs"]


def pytest_configure(config: pytest.Config) -> None:
    """The quick pass (``-m "not slow"``) checks every property with the ``quick`` profile's
    fewer examples, unless a profile is asked for (``HYPOTHESIS_PROFILE``)."""
    if "HYPOTHESIS_PROFILE" not in os.environ and config.getoption("markexpr", "") == "not slow":
        settings.load_profile("quick")


@pytest.fixture(autouse=True)
def _reset_profdsl():
    """Every test starts and ends with no started profiler, open session or logged-once key."""
    from profdsl.testing import reset as reset_for_tests

    reset_for_tests()
    yield
    reset_for_tests()


@pytest.fixture(scope="session")
def _ray_session() -> Iterator[Callable[[], Any]]:
    """The session's one local Ray cluster of 2 CPUs, started by the first test that asks for it
    (``ray_cluster``) and shut down at the session's end. A test that needs a cluster of another
    shape (tests/test_ray_nodes.py) shuts it down; the next test that asks starts it again."""
    ray = pytest.importorskip("ray")

    def started() -> Any:
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="profdsl-tests")
        return ray

    try:
        yield started
    finally:
        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture
def ray_cluster(_ray_session: Callable[[], Any], request: pytest.FixtureRequest) -> Iterator[str]:
    """The session's local Ray cluster (one for every test that runs Ray in this process: each
    cluster costs seconds to start). Yields this test's own namespace: a named actor is made and
    looked up in it (``.options(name=..., namespace=...)``, ``ray.get_actor(name, namespace=...)``),
    so no test sees another's; any named actor left there is killed after the test. Unnamed actors
    end with their last handle, at the latest at the session's end."""
    ray = _ray_session()
    namespace = "profdsl-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.nodeid)
    try:
        yield namespace
    finally:
        if ray.is_initialized():
            for entry in ray.util.list_named_actors(all_namespaces=True):
                if entry["namespace"] == namespace:
                    ray.kill(ray.get_actor(entry["name"], namespace=namespace))


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``profdsl demo --out DIR`` as the README runs it (a real subprocess, without ``--ray``), once
    for the session: its result and its folder, which tests only read (copy it to change it)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("demo") / "profiles"
    command = [sys.executable, "-m", "profdsl", "demo", "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600), out
