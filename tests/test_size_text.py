"""A size reads the same wherever a command prints one.

``ls`` printed sizes in binary units as ``1.5 KB`` while the reading progress line of ``summary``,
``plot`` and ``merge`` printed the same number of bytes as ``1.5 kB`` (kB being 1000 bytes):
both now come from ``core/_units.size_text``.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl._cli import ls
from profdsl.analysis import _load


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@settings(deadline=None)
@given(st.integers(0, 2**45), st.integers(0, 2**45))
def test_ls_and_the_progress_line_print_a_size_alike(done: int, total: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_load, "PROGRESS_AFTER_S", -1.0)
        stream = _Terminal()
        _load.Progress(3, total, stream).update(1, done)
    assert stream.getvalue() == f"\rprofdsl: reading traces 1/3 ({ls._size(done)} of {ls._size(total)})"


def test_sizes_in_binary_units() -> None:
    assert [ls._size(n) for n in (0, 1023, 1024, 1536, 5 << 20, 3 << 30, 5 << 40)] == [
        "0 B", "1023 B", "1.0 KB", "1.5 KB", "5.0 MB", "3.0 GB", "5120.0 GB",
    ]  # fmt: skip
    assert ls._size(None) is None
