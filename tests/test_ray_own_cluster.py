"""``profdsl demo --ray`` and examples/ray_ppo.py start a Ray cluster of their own, never attach to
one that ``RAY_ADDRESS`` or an earlier ``ray start`` on the machine points to (their ``num_cpus``
would then be an error or ignored, and their actors would land on someone's cluster). Checked on
the argument they give ``ray.init``, which is stopped there: no cluster is started."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli

ROOT = Path(__file__).resolve().parents[1]


class _StopError(Exception):
    """Raised by the fake ``ray.init``: the run goes no further."""


@pytest.fixture
def init_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every ``ray.init`` call, each stopped; a cluster some other job
    runs is announced the ways Ray finds one."""
    ray = pytest.importorskip("ray")
    calls: list[dict[str, Any]] = []

    def init(*args: Any, **kwargs: Any) -> None:
        calls.append({"args": args, **kwargs})
        raise _StopError

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: None)  # the session's cluster, if running, is left alone
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    return calls


def test_the_demo_starts_its_own_local_cluster(tmp_path: Path, init_calls: list[dict[str, Any]]) -> None:
    pytest.importorskip("torch")
    with pytest.raises(_StopError):
        profdsl._cli.main(["demo", "--out", str(tmp_path / "p"), "--ray"])
    (call,) = init_calls
    assert call["address"] == "local" and call["num_cpus"] == 2 and not call["args"]


def test_the_ray_example_starts_its_own_local_cluster(
    tmp_path: Path, init_calls: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(sys, "argv", ["ray_ppo.py", "--out", str(tmp_path / "p")])
    with pytest.raises(_StopError):
        runpy.run_path(str(ROOT / "examples" / "ray_ppo.py"), run_name="__main__")
    (call,) = init_calls
    assert call["address"] == "local" and call["num_cpus"] == 2 and not call["args"]
