"""``collect.tracefile``'s in-place packing and its :class:`Census` at every block boundary: with
blocks of a few bytes, every pattern (``traceEvents``, the first ``{``, the last ``}``, an event's
category) is cut somewhere, and the result is the same as reading the file whole."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profdsl.collect import _tracefile as tracefile
from profdsl.collect._tracefile import Census, InvalidTraceError, compress_trace

CATS = ["cpu_op", "user_annotation", "kernel", "gpu_memcpy", "cuda_runtime", "Trace"]


def kineto_text(cats: list[str], pad: str) -> str:
    """Events in kineto's layout (``"cat": "..."``, two spaces, a newline before each event)."""
    events = ",".join(
        f'\n  {{\n    "ph": "X", "cat": "{c}", "name": "e{i}", "ts": {i}, "dur": 1\n  }}' for i, c in enumerate(cats)
    )
    return f'{pad}{{\n  "schemaVersion": 1,\n  "traceEvents": [{events}\n  ]}}{pad}'


@settings(max_examples=60, deadline=None)
@given(
    cats=st.lists(st.sampled_from(CATS), max_size=6),
    pad=st.sampled_from(["", " ", "\n\t ", " " * 9]),
    block=st.integers(1, 40),
    level=st.sampled_from([0, 1]),
    device=st.booleans(),
)
def test_small_blocks_give_what_a_whole_read_gives(
    tmp_path_factory: pytest.TempPathFactory, cats: list[str], pad: str, block: int, level: int, device: bool
) -> None:
    folder = tmp_path_factory.mktemp("census")
    source = folder / "events.json"
    source.write_text(kineto_text(cats, pad))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracefile, "BLOCK", block)
        census = Census(device=device)
        out = folder / ("t.json.gz" if level else "t.json")
        compress_trace(str(source), str(out), {"profdsl": {"role": "a"}}, level=level, census=census)
    data = out.read_bytes()
    text = gzip.decompress(data) if level else data
    assert json.loads(text) == {"profdsl": {"role": "a"}, **json.loads(source.read_text())}
    seen = census.seen()
    assert seen.json_bytes == len(text)
    assert seen.events == any(c != "Trace" for c in cats)
    if device:
        assert seen.regions == ("user_annotation" in cats)
        assert seen.device == any(c in ("kernel", "gpu_memcpy", "cuda_runtime") for c in cats)


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"  \n ", "empty trace"),
        (b'{"traceEvents": [', "cut short"),
        (b" [1] ", "not a JSON object"),
        (b"{}", "no traceEvents"),
    ],
)
def test_bad_exports_refused_at_any_block_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, content: bytes, why: str
) -> None:
    monkeypatch.setattr(tracefile, "BLOCK", block)
    source = tmp_path / "events.json"
    source.write_bytes(content)
    with pytest.raises(InvalidTraceError, match=why):
        compress_trace(str(source), str(tmp_path / "t.json.gz"))
