"""``core/_log.failing_once``: a profiling step's ``Exception`` is logged once by its key and never
reaches the caller; an interrupt still does."""

from __future__ import annotations

import logging

import pytest

from profdsl.core._log import ONCE, failing_once


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    ONCE.clear()


def test_an_exception_is_logged_once_with_its_arguments_and_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        for _ in range(3):
            with failing_once("k", "moving %s failed: %s", "x"):
                raise OSError("disk gone")
    assert [r.getMessage() for r in caplog.records] == ["moving x failed: disk gone"]


def test_by_kind_logs_each_kind_of_exception_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        for exc in (OSError("a"), ValueError("b"), OSError("c")):
            with failing_once("k", "failed: %r", by_kind=True):
                raise exc
    assert [r.getMessage() for r in caplog.records] == ["failed: OSError('a')", "failed: ValueError('b')"]


def test_an_interrupt_is_not_swallowed() -> None:
    with pytest.raises(KeyboardInterrupt), failing_once("k", "failed: %r"):
        raise KeyboardInterrupt
