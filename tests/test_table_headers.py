"""The one table printer (``_cli/common.table``) prints every header whole, on a terminal of any
width: a left-aligned last column (a name) is cut to fit, never narrower than its header.

``profdsl summary DIR --cost`` on a terminal narrower than about 110 columns printed its last
header, ``export cpu ms`` (13 characters), as ``export cpu m``: the cut column's floor was 12
characters, whatever its header.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import profdsl._cli
from profdsl._cli.common import table
from profdsl.analysis import _cost as cost
from profdsl.collect._manifest import append_record, make_record


class Terminal(io.StringIO):
    """Standard output that is a terminal."""

    def isatty(self) -> bool:
        return True


@contextlib.contextmanager
def terminal(columns: int) -> Iterator[Terminal]:
    """Standard output a terminal ``columns`` wide (``COLUMNS``, as a shell sets it)."""
    out = Terminal()
    with mock.patch.dict(os.environ, {"COLUMNS": str(columns)}), contextlib.redirect_stdout(out):
        yield out


def spans(rule: str) -> list[tuple[int, int]]:
    """Where each column lies, from the rule under the header (``---``, two spaces apart)."""
    return [match.span() for match in re.finditer("-+", rule)]


NAMES = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="-"), min_size=1, max_size=20)


@settings(deadline=None)
@given(
    headers=st.lists(NAMES, min_size=1, max_size=6),
    cells=st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40), max_size=6),
    left=st.one_of(st.none(), st.integers(0, 6)),
    columns=st.integers(1, 200),
)
def test_every_header_is_printed_whole_on_a_terminal_of_any_width(
    headers: list[str], cells: list[str], left: int | None, columns: int
) -> None:
    rows = [[*cells, *[""] * len(headers)][: len(headers)]]
    with terminal(columns):
        head, rule, *_ = table(headers, rows, left=left).splitlines()
    assert len(spans(rule)) == len(headers)
    for header, (start, end) in zip(headers, spans(rule)):
        assert len(header) <= end - start and head[start:end].strip() == header, (head, rule)


@pytest.fixture(scope="module")
def costs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A manifest of trace records that carry the cost's parts (the table's widest form)."""
    folder = tmp_path_factory.mktemp("costs")
    parts = {"init_ms": 3.0, "start_ms": 1.0, "stop_ms": 2.0, "wait_ms": 0.5, "export_cpu_ms": 20.125}
    for step in (1, 2):
        for rank in (0, 1):
            name = f"t{step}{rank}.pt.trace.json.gz"
            fields = {"blocked_ms": 12.5, "export_ms": 30.25, **parts}
            record = make_record("trace", name, role="actor_rollout_ref", step=step, rank=rank, world_size=2, **fields)
            assert append_record(folder, record)
    return folder


@settings(deadline=None)
@given(columns=st.integers(1, 200))
def test_summary_cost_prints_every_header_whole(costs: Path, columns: int) -> None:
    with terminal(columns) as out:
        assert profdsl._cli.main(["summary", str(costs), "--cost"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == cost.TITLE
    assert re.split(r"\s{2,}", lines[1]) == list(cost.HEADERS + cost.PART_HEADERS), lines[1]
