"""Milliseconds have one home as the views print them, ``core/_units.ms_text``: the digits a view
prints (three; the demo's tables two, its slow-step table one) and a change's sign are its
arguments. The formats it replaced (``diff``'s figures and change, its noise, the culprits, the
stragglers view, the ledger's notes, ``summary --by``, the demo's tables) print what they did."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl._cli import diff
from profdsl.core._units import ms_text

MS = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)


@settings(deadline=None)
@given(ms=MS, digits=st.integers(0, 6))
def test_ms_text_prints_the_digits_asked_and_a_change_signed(ms: float, digits: int) -> None:
    assert ms_text(ms, digits) == f"{ms:.{digits}f}"
    assert ms_text(ms, digits, signed=True) == f"{ms:+.{digits}f}"
    assert ms_text(ms) == f"{ms:.3f}"


@settings(deadline=None)
@given(seconds=st.one_of(st.none(), st.floats(min_value=0, max_value=1e9)))
def test_diff_prints_seconds_as_milliseconds_and_entries_to_a_tenth(seconds: float | None) -> None:
    assert diff._ms(seconds) == ("-" if seconds is None else f"{seconds * 1e3:.3f}")
    assert diff._pair(seconds, 2.25, diff._entries) == ("-" if seconds is None else f"{seconds:.1f}") + "/2.2"
