"""Shared test configuration: hypothesis profiles, the session's one local Ray cluster, the
session's one run of ``profdsl demo``."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
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


# The session's one local Ray cluster (each costs seconds to start on a 2-core machine). How a test
# chooses:
#
# - ``ray_cluster`` (most Ray tests): the shared cluster of 2 CPUs, started by the first test that
#   asks. After each test every actor still on it is killed (named, detached or leaked through a
#   handle kept somewhere), so none holds a CPU or a name the next test needs. A named actor goes
#   in the namespace the fixture yields. Workers see the environment the cluster was started with
#   (the session's, whichever test starts it): a test whose workers must see a variable passes it
#   per actor, ``.options(runtime_env={"env_vars": {...}})``.
# - ``ray_session`` (a module-scoped fixture that runs Ray once for its tests): ``start()``, then
#   ``clear()`` once its actors are done with.
# - ``own_ray_cluster``: a test that needs a cluster of another shape (several nodes:
#   tests/test_ray_nodes.py) or its own ``ray.init`` arguments (a ``runtime_env``, variables),
#   here or in a subprocess (``profdsl demo --ray``, examples/ray_ppo.py: two clusters side by
#   side would compete for the 2 cores). The session's cluster is shut down before it; whatever
#   the test started here is shut down after it, and the next test that asks for ``ray_cluster``
#   starts the session's again (seconds: keep such tests after the shared ones where the order
#   allows; pytest runs files in name order).


class RaySession:
    """The session's local Ray cluster: 2 CPUs, no dashboard, started from the session's working
    directory and environment as they were when the tests were collected."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray

    def start(self) -> Any:
        """The cluster (started if it is not running), as the ``ray`` module."""
        if not self.ray.is_initialized():
            with _as_collected():
                # "local": a new cluster of this process's own, never one that RAY_ADDRESS or
                # another run on this machine (ray.cluster_utils.Cluster) points to
                self.ray.init(
                    address="local",
                    num_cpus=2,
                    include_dashboard=False,
                    log_to_driver=False,
                    namespace="profdsl-tests",
                )
        return self.ray

    def stop(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()

    def clear(self, timeout_s: float = 60) -> None:
        """Kill every actor still on the cluster and wait until they are gone; a cluster where
        one outlives ``timeout_s`` is shut down (the next test starts a fresh one)."""
        if not self.ray.is_initialized():
            return
        from ray._private import state

        core_worker = self.ray._private.worker.global_worker.core_worker
        for actor_id in _live_actors(state):
            with contextlib.suppress(Exception):  # one that died meanwhile
                core_worker.kill_actor(self.ray.ActorID.from_hex(actor_id), True)
        deadline = time.monotonic() + timeout_s
        while _live_actors(state):
            if time.monotonic() > deadline:
                self.stop()
                return
            time.sleep(0.1)


def _live_actors(state: Any) -> list[str]:
    return [actor_id for actor_id, info in state.actors().items() if info["State"] != "DEAD"]


_SESSION_CWD = os.getcwd()
_SESSION_ENVIRONMENT = dict(os.environ)


@contextlib.contextmanager
def _as_collected() -> Iterator[None]:
    """The session's working directory and environment, as they were when the tests were
    collected, for the block; after it the test's own again, plus what the block set (ray.init
    sets variables its next start needs, e.g. ``RAY_AUTH_MODE``)."""
    here, environment = os.getcwd(), dict(os.environ)
    os.chdir(_SESSION_CWD)
    os.environ.clear()
    os.environ.update(_SESSION_ENVIRONMENT)
    try:
        yield
    finally:
        added = {k: v for k, v in os.environ.items() if _SESSION_ENVIRONMENT.get(k) != v}
        os.environ.clear()
        os.environ.update(environment)
        os.environ.update(added)
        os.chdir(here)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[RaySession]:
    """The session's local Ray cluster (see above), shut down at the session's end."""
    session = RaySession(pytest.importorskip("ray"))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def ray_cluster(ray_session: RaySession, request: pytest.FixtureRequest) -> Iterator[str]:
    """The session's local Ray cluster, for one test. Yields this test's own namespace: a named
    actor is made and looked up in it (``.options(name=..., namespace=...)``,
    ``ray.get_actor(name, namespace=...)``). Every actor left on the cluster is killed after the
    test."""
    ray_session.start()
    try:
        yield "profdsl-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.nodeid)
    finally:
        ray_session.clear()


@pytest.fixture
def own_ray_cluster(ray_session: RaySession) -> Iterator[Any]:
    """No Ray cluster in this process: the test starts its own (and may shut it down); it is shut
    down after the test in any case. Yields the ``ray`` module."""
    ray_session.stop()
    try:
        yield ray_session.ray
    finally:
        ray_session.stop()


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``profdsl demo --out DIR`` as the README runs it (a real subprocess, without ``--ray``), once
    for the session: its result and its folder, which tests only read (copy it to change it)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("demo") / "profiles"
    command = [sys.executable, "-m", "profdsl", "demo", "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600), out


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each metrics log was read (``metrics_log``'s one read of a file)."""
    from profdsl.collect import metrics_log

    counted: Counter[str] = Counter()
    real = metrics_log.read_regular

    def read(path: str, **bound: Any) -> bytes:
        counted[path] += 1
        return real(path, **bound)

    monkeypatch.setattr(metrics_log, "read_regular", read)
    return counted
