"""Shared test configuration: hypothesis profiles."""

from __future__ import annotations

import os

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
