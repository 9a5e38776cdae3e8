"""Any label (role, stage, mini-batch name) reaches a torch trace intact.

torch's chrome-trace export escapes nothing: a ``"`` in a ``record_function`` name is written raw,
``\\`` becomes ``/``, non-ASCII and control characters become ``unknown``, and
``add_metadata_json`` rewrites every ``\\`` to ``/``. profdsl therefore percent-encodes the
region names it gives torch (:mod:`profdsl.core._labels`) and writes its metadata itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.core._labels import decode, encode
from profdsl.manifest import read_manifest

from .profiling import config, work
from .traces import load, names, trace_files

#: Every character class torch's export mangles, plus ``%`` (the escape character itself).
ODD = ['a"b', "x\\y", "générer", "tab\there", "new\nline", "50%", "%22", "🙂 emoji", "ctl\x01z", "quote'<&>{}[]"]
ROLE = 'r"ôle\\%\t🙂'
#: Printable ASCII kept as it is: everything but the double quote, the backslash and ``%``.
KEPT = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\%')
#: ``urllib.parse.quote`` leaves letters, digits and ``_.-~`` alone; ``safe`` adds the rest of KEPT.
QUOTE_SAFE = "".join(c for c in KEPT if not (c.isalnum() or c in "_.-~"))


class TestEncoding:
    """The encoding, against urllib's independent percent-encoding."""

    @given(st.text())
    def test_matches_urllib_and_round_trips(self, label: str) -> None:
        """encode is urllib's quote with every printable ASCII but ``"``, ``\\``, ``%`` safe;
        urllib's unquote and decode both give the label back."""
        encoded = encode(label)
        assert encoded == urllib.parse.quote(label, safe=QUOTE_SAFE, errors="surrogatepass")
        assert urllib.parse.unquote(encoded, errors="surrogatepass") == label
        assert decode(encoded) == label
        assert set(encoded) <= set(KEPT) | {"%"}

    @given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
    def test_lone_surrogates_round_trip(self, label: str) -> None:
        """Any Python string, lone surrogates included, comes back."""
        assert decode(encode(label)) == label

    @given(st.text(alphabet=KEPT))
    def test_plain_names_are_unchanged(self, label: str) -> None:
        """Names of printable ASCII without ``"``, ``\\`` or ``%`` are given to torch as they are."""
        assert encode(label) == label
        assert decode(label) == label

    @given(st.text(), st.integers(min_value=0, max_value=10**9))
    def test_mini_batch_index_is_appended_unchanged(self, base: str, index: int) -> None:
        """A mini-batch name is the encoded base followed by its index."""
        assert encode(f"{base}{index}") == f"{encode(base)}{index}"

    @given(st.text(alphabet=st.characters(blacklist_characters="%")))
    def test_names_without_percent_decode_to_themselves(self, name: str) -> None:
        """Names that hold no escape (every event name torch makes) decode to themselves."""
        assert decode(name) == name

    def test_malformed_escapes_are_kept(self) -> None:
        """``%`` not followed by two hex digits, or bytes that are not UTF-8, stay as written."""
        assert [decode(s) for s in ("50%", "%zz", "%4", "%FF", "%C3")] == ["50%", "%zz", "%4", "%FF", "%C3"]


def _step_traces(folder: Path) -> list[dict[str, Any]]:
    return [load(path) for path in trace_files(folder)]


def _all_parse(folder: Path) -> None:
    """Every trace file in ``folder`` is whole, valid JSON (an independent reader)."""
    files = trace_files(folder)
    assert files
    for path in files:
        load(path)


class TestTraces:
    """Real torch traces with odd labels: valid JSON, the labels exact everywhere."""

    def test_discrete_stages(self, tmp_path: Path) -> None:
        """Each odd stage gets a valid trace whose metadata, manifest record and regions name it
        exactly; the next step's plain trace parses too."""
        cfg = config(tmp_path, discrete=True, steps=[1, 2])
        with Profiler(cfg, role=ROLE, rank=0, world_size=1) as profiler:
            with profiler.step(1):
                for stage in ODD:
                    with profile_stage(stage):
                        work()
            with profiler.step(2), profile_stage("plain"):
                work()
        _all_parse(tmp_path)
        traces = _step_traces(tmp_path)
        assert sorted(t["profdsl"]["stage"] for t in traces) == sorted([*ODD, "plain"])
        assert {t["profdsl"]["role"] for t in traces} == {ROLE}
        for trace in traces:
            stage = trace["profdsl"]["stage"]
            assert names(trace, encode(stage)) and encode(stage) in names(trace)
            assert trace["distributedInfo"] == {"rank": 0, "world_size": 1, "backend": None}
        records = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
        assert sorted(r["stage"] for r in records) == sorted([*ODD, "plain"])
        assert {r["role"] for r in records} == {ROLE} and {r["status"] for r in records} == {"ok"}

    def test_scheduled_windows_and_mini_batch_names(self, tmp_path: Path) -> None:
        """A scheduled odd stage with an odd mini-batch name: one valid trace per window, each
        describing its own window; the regions are the encoded names."""
        schedule = Schedule(active=2)
        cfg = config(tmp_path, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=schedule))
        with Profiler(cfg, role=ROLE, rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage('upd"até\\', scheduled=True):
                for _ in mini_batch_window(range(4), name='mb"é%'):
                    work()
        traces = _step_traces(tmp_path)
        assert sorted(t["profdsl"]["window"] for t in traces) == [[0, 1], [2, 3]]
        for trace in traces:
            first, last = trace["profdsl"]["window"]
            assert names(trace, "mb%22%C3%A9%25") == [f"mb%22%C3%A9%25{i}" for i in range(first, last + 1)]
            assert trace["profdsl"]["regions"]["mini_batches"] == ['mb"é%']
            assert trace["profdsl"]["stage"] == 'upd"até\\'

    def test_continuous_step(self, tmp_path: Path) -> None:
        """A continuous step with odd stages: one valid trace listing them exactly."""
        cfg = config(tmp_path)
        with Profiler(cfg, role=ROLE, rank=0, world_size=1) as profiler, profiler.step(1):
            for stage in ODD:
                with profile_stage(stage):
                    work()
        [trace] = _step_traces(tmp_path)
        assert trace["profdsl"]["regions"]["stages"] == sorted(ODD)
        assert trace["profdsl"]["role"] == ROLE

    def test_later_traces_parse(self, tmp_path: Path) -> None:
        """A ``"`` in a stage of a scheduled stage's first window breaks none of its later windows
        (torch kept it in their metadata), nor the traces of a later profiler of the process."""
        first, second = tmp_path / "first", tmp_path / "second"
        schedule = Schedule(active=1)
        cfg = config(first, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=schedule))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update", scheduled=True):
                for index in mini_batch_window(range(3)):
                    if index == 0:
                        with profile_stage('a"b'):
                            work()
                    work()
        with Profiler(config(second, discrete=True), role="actor", rank=0, world_size=1) as profiler:
            with profiler.step(1), profile_stage("plain"):
                work()
        windows = _step_traces(first)
        assert [t["profdsl"]["window"] for t in windows] == [[0, 0], [1, 1], [2, 2]]
        assert names(windows[0], "a%22b") and not names(windows[1], "a%22b")
        [trace] = _step_traces(second)
        assert trace["profdsl"]["stage"] == "plain" and names(trace, "plain")


@given(base=st.text(min_size=1), other=st.text(min_size=1), index=st.integers(min_value=0, max_value=10**6))
def test_any_mini_batch_label_is_found(base: str, other: str, index: int) -> None:
    """A mini-batch region (encoded base, then the index) is counted under its base label, even
    when the base ends in digits or in an escape such as ``%A9`` (``é``); when another base could
    have written the same name (``mb`` + ``12``, ``mb1`` + ``2``), under one of the two, with the
    index that base gives."""
    from profdsl.analysis._regions import RegionNames

    name = encode(base) + str(index)
    could = {
        (b, int(name[len(encode(b)) :]))
        for b in (base, other)
        if name.startswith(encode(b))
        and name[len(encode(b)) :].isdigit()
        and str(int(name[len(encode(b)) :])) == name[len(encode(b)) :]
    }
    names = RegionNames.from_header({"profdsl": {"regions": {"stages": [], "mini_batches": [base, other]}}})
    found = names.label(name)
    assert found in could if len(could) > 1 else found == (base, index)


class TestAnalysis:
    """summary and plot show the labels exactly as the program gave them."""

    @pytest.fixture
    def folder(self, tmp_path: Path) -> Path:
        cfg = config(tmp_path, discrete=True)
        with Profiler(cfg, role=ROLE, rank=0, world_size=1) as profiler, profiler.step(1):
            for stage in ("générer", 'a"b', "50%"):
                with profile_stage(stage):
                    with profile_stage("x\\y"):
                        work()
            with profile_stage("train", scheduled=True):
                for _ in mini_batch_window(range(2), name="mb é"):
                    work()
        return tmp_path

    def test_summary(self, folder: Path) -> None:
        """``profdsl summary --json`` (a real command) lists every label exactly."""
        out = subprocess.run(
            [sys.executable, "-m", "profdsl", "summary", str(folder), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)
        assert {(r["role"], r["stage"]) for r in rows} == {
            (ROLE, s) for s in ("générer", 'a"b', "50%", "x\\y", "train", "mb é")
        }
        assert sum(r["count"] for r in rows if r["stage"] == "x\\y") == 3  # one under each stage
        assert {tuple(r["path"]) for r in rows if r["stage"] == "x\\y"} == {
            (s, "x\\y") for s in ("générer", 'a"b', "50%")
        }

    def test_plot_bars(self, folder: Path) -> None:
        """plot's bars name their (outermost) stages exactly."""
        from profdsl._cli import plot
        from profdsl.analysis._catalog import catalog
        from profdsl.analysis._load import load_model

        bars = plot.bar_totals(load_model(folder, catalog(folder).artifacts, []))
        assert {stage for stages in bars.values() for stage in stages} == {"générer", 'a"b', "50%", "train"}
