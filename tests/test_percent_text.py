"""A share has one home as the views print it, ``core/_units.percent_text``: one decimal and a
``%``. The formats it replaced (``summary``'s share column, the step ledger's idle and outside
shares and its idle headline) print what they did."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl.core._units import percent_text

SHARES = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


@settings(deadline=None)
@given(share=SHARES)
def test_a_share_prints_as_summary_printed_it(share: float) -> None:
    assert percent_text(share) == f"{100 * share:.1f}%"


@settings(deadline=None)
@given(part=st.integers(0, 2**62) | SHARES, whole=st.integers(1, 2**62))
def test_a_part_of_a_whole_prints_as_the_ledger_printed_it(part: float, whole: int) -> None:
    assert percent_text(part, whole) == f"{100 * part / whole:.1f}%"
