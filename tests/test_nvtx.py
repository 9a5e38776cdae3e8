"""Tests for NVTX ranges and the nsys capture, against the real `nvtx` package (spied on: no
NVTX tool is attached on a CPU machine, so the package's domain records nothing by itself)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, ProfilerConfig, TorchOptions, mini_batch_window, profile_stage
from profdsl._capture.annotators import DOMAIN, role_color

from .traces import names, parsed

nvtx = pytest.importorskip("nvtx")


class SpyDomain:
    """Forwards to the real nvtx domain and records what was asked of it."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[str, Any]] = []
        self.attributes: list[dict[str, Any]] = []

    def get_event_attributes(self, **kwargs: Any) -> Any:
        self.attributes.append(kwargs)
        real = self.real.get_event_attributes(**kwargs)
        return ("attrs", kwargs["message"]) if real is None else real

    def push_range(self, attributes: Any) -> None:
        self.calls.append(("push", attributes[1] if isinstance(attributes, tuple) else attributes))
        self.real.push_range(None if isinstance(attributes, tuple) else attributes)

    def pop_range(self) -> None:
        self.calls.append(("pop", None))
        self.real.pop_range()


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> SpyDomain:
    domain = SpyDomain(nvtx.get_domain(DOMAIN))
    requested: list[str] = []

    def get_domain(name: str | None = None) -> SpyDomain:
        requested.append(name or "")
        return domain

    monkeypatch.setattr(nvtx, "get_domain", get_domain)
    domain.requested = requested  # type: ignore[attr-defined]
    return domain


def balanced(calls: list[tuple[str, Any]]) -> list[str]:
    """The pushed names, checking every pop closes the innermost push."""
    stack: list[str] = []
    seen: list[str] = []
    for kind, name in calls:
        if kind == "push":
            stack.append(name)
            seen.append(name)
        else:
            assert stack, "pop without push"
            stack.pop()
    assert stack == []
    return seen


class TestNvtxRanges:
    """nvtx=True: every stage and mini-batch is also an NVTX range."""

    def test_ranges_with_torch(self, tmp_path: Path, spy: SpyDomain) -> None:
        """Stages and mini-batches push balanced ranges in the profdsl domain, role as category,
        the role's colour, attributes registered once per name; torch regions still recorded."""
        cfg = ProfilerConfig(
            enable=True, steps=[1], nvtx=True, save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"])
        )
        with Profiler(cfg, role="critic", rank=0, world_size=1) as profiler, profiler.step(1):
            for _ in range(2):
                with profile_stage("update_critic"):
                    for _ in mini_batch_window(range(2)):
                        pass
            with pytest.raises(RuntimeError), profile_stage("failing"):
                raise RuntimeError("x")
        assert spy.requested == [DOMAIN]  # type: ignore[attr-defined]
        assert balanced(spy.calls) == [
            "update_critic",
            "mini_batch0",
            "mini_batch1",
            "update_critic",
            "mini_batch2",
            "mini_batch3",
            "failing",
        ]
        assert [a["message"] for a in spy.attributes] == [
            "update_critic",
            "mini_batch0",
            "mini_batch1",
            "mini_batch2",
            "mini_batch3",
            "failing",
        ]
        assert {a["category"] for a in spy.attributes} == {"critic"}
        assert {a["color"] for a in spy.attributes} == {role_color("critic")}
        assert names(parsed(tmp_path)[0][1], "update_critic") == ["update_critic"] * 2

    def test_no_ranges_when_off(self, tmp_path: Path, spy: SpyDomain) -> None:
        """nvtx=False with torch: no NVTX call at all."""
        cfg = ProfilerConfig(enable=True, steps=[1], save_path=str(tmp_path), torch=TorchOptions(contents=["cpu"]))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("s"):
                pass
        assert spy.calls == []

    def test_stage_colour(self, tmp_path: Path, spy: SpyDomain) -> None:
        """profile_stage(color=...) colours its NVTX range (the role's colour otherwise)."""
        cfg = ProfilerConfig(enable=True, tool="nsys", steps=[1], save_path=str(tmp_path))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("named", color="green"), profile_stage("hex", color="#102030"):
                profile_stage("argb", color=0x80FF0000)(lambda: None)()
            with profile_stage("plain"):
                pass
        colours = {a["message"]: a["color"] for a in spy.attributes}
        assert colours == {"named": 0xFF008000, "hex": 0xFF102030, "argb": 0x80FF0000, "plain": role_color("actor")}

    def test_role_colours_are_stable(self) -> None:
        """A role's colour does not depend on the process (no salted hash)."""
        assert role_color("actor") == role_color("actor") != 0
        assert len({role_color(r) for r in ("actor", "ref", "critic", "rollout")}) > 1


class TestNsys:
    """tool='nsys' on a machine without CUDA."""

    def test_warns_once_and_still_emits_ranges(
        self, tmp_path: Path, spy: SpyDomain, caplog: pytest.LogCaptureFixture
    ) -> None:
        """No CUDA: one warning, NVTX ranges still pushed, no torch trace written."""
        cfg = ProfilerConfig(enable=True, tool="nsys", steps=[1, 2], save_path=str(tmp_path))
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler:
                for step in (1, 2):
                    with profiler.step(step), profile_stage("update_actor"):
                        pass
        assert caplog.text.count("CUDA is not available") == 1
        assert balanced(spy.calls) == ["update_actor", "update_actor"]
        assert not tmp_path.exists() or list(tmp_path.iterdir()) == []
