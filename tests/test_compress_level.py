"""``TorchOptions.compress_level``: the gzip level of the traces profdsl writes is a
choice, and level 0 writes plain JSON (``.pt.trace.json``) that every command reads."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import profdsl._cli
from profdsl import ConfigError, Profiler, ProfilerConfig, TorchOptions, profile_stage
from profdsl.collect._export import TraceLabel
from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.collect._tracefile import BLOCK, COMPRESS_LEVEL, InvalidTraceError, check_size, compress_trace
from profdsl.core._naming import JSON_TRACE_SUFFIXES, PLAIN_TRACE_EXT, TRACE_EXT
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName

from .profiling import config, work

GZIP_MAGIC = b"\x1f\x8b"


def read_back(path: Path, level: int) -> bytes:
    """The JSON text of a trace compress_trace wrote at ``level`` (an independent reader)."""
    data = path.read_bytes()
    if level == 0:
        assert data[:2] != GZIP_MAGIC
        return data
    assert data[:2] == GZIP_MAGIC
    return gzip.decompress(data)


class TestOption:
    """The option is validated when the config is built, naming the field."""

    @pytest.mark.parametrize("level", range(10))
    def test_levels_0_to_9_accepted(self, level: int) -> None:
        """Every zlib level, and 0 for plain JSON, round trips through a mapping."""
        cfg = ProfilerConfig(torch=TorchOptions(compress_level=level))
        assert cfg.torch.compress_level == level
        assert ProfilerConfig.from_mapping(cfg.to_mapping()) == cfg

    @pytest.mark.parametrize("bad", [-1, 10, True, False, 1.5, "1", None])
    def test_bad_levels_refused(self, bad: object) -> None:
        """Out of range, bools, floats, strings and None: a ConfigError naming the field."""
        with pytest.raises(ConfigError, match=r"TorchOptions\.compress_level must be an integer in 0\.\.9"):
            TorchOptions(compress_level=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"TorchOptions\.compress_level"):
            ProfilerConfig.from_mapping({"torch": {"compress_level": bad}})

    @pytest.mark.parametrize(
        ("text", "error"),
        [
            ("compress_level: 0", None),
            ("compress_level: 9", None),
            ("compress_level: yes", "got True"),  # YAML's bool, not 1
            ("compress_level: '1'", "got '1'"),
            ("compress_level: 1.0", "got 1.0"),
            ("compress_level: 10", "got 10"),
        ],
    )
    def test_yaml(self, tmp_path: Path, text: str, error: str | None) -> None:
        """A YAML file gets the same check."""
        pytest.importorskip("yaml")
        path = tmp_path / "profiler.yaml"
        path.write_text(f"enable: true\ntorch:\n  {text}\n")
        if error is None:
            assert ProfilerConfig.from_file(path).torch.compress_level == int(text.split()[-1])
        else:
            with pytest.raises(ConfigError, match=rf"TorchOptions\.compress_level .*{error}"):
                ProfilerConfig.from_file(path)

    def test_one_default(self) -> None:
        """The config, the trace label and compress_trace share the default level."""
        assert TorchOptions().compress_level == COMPRESS_LEVEL == 1
        label = TraceLabel(
            role="r", stage=None, step=1, rank=0, world_size=1, save_path="/x", host="h", pid=1, config_hash="c"
        )
        assert label.export.level == COMPRESS_LEVEL

    def test_merges_keep_the_left_level(self) -> None:
        """union and intersect keep a's level (a per-file output setting, like save_path)."""
        a = ProfilerConfig(enable=True, torch=TorchOptions(compress_level=0))
        b = ProfilerConfig(enable=True, torch=TorchOptions(compress_level=9))
        assert a.union(b).torch.compress_level == a.intersect(b).torch.compress_level == 0

    def test_plain_extension_is_read_as_a_json_trace(self) -> None:
        """The plain extension is a trace name extension every command reads."""
        assert PLAIN_TRACE_EXT.endswith(JSON_TRACE_SUFFIXES) and TRACE_EXT.endswith(JSON_TRACE_SUFFIXES)
        name = TraceName(role="actor", step=1, rank=0, host="h", pid=1, time_ms=0, ext=PLAIN_TRACE_EXT)
        assert name.format().endswith("000.pt.trace.json")
        assert TraceName.parse(name.format()) == name


headers = st.dictionaries(
    st.sampled_from(["profdsl", "distributedInfo", "h\u00f4te", 'k"ey']),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)
trace_events = st.lists(
    st.fixed_dictionaries(
        {
            "ph": st.sampled_from(["X", "i", "M"]),
            "name": st.text(max_size=30),
            "ts": st.integers(0, 10**15),
            "dur": st.integers(0, 10**9),
        }
    ),
    max_size=40,
)


class TestCompressTrace:
    """compress_trace at every level: the content and the header round trip (json.loads the oracle)."""

    @settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        level=st.integers(0, 9),
        header=headers,
        events=trace_events,
        indent=st.sampled_from([None, 1]),
        space=st.sampled_from(["", "\n  "]),
    )
    def test_round_trip(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        level: int,
        header: dict[str, Any],
        events: list[dict[str, Any]],
        indent: int | None,
        space: str,
    ) -> None:
        """The file holds the source's object with the header's keys first; gzip at 1..9, plain
        at 0; the size returned is the size on disk."""
        folder = tmp_path_factory.mktemp("level")
        source = folder / "events.json"
        content = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": []}
        source.write_text(space + json.dumps(content, indent=indent) + space)
        out = folder / "out"
        size = compress_trace(str(source), str(out), header, level=level)
        assert size == out.stat().st_size
        text = read_back(out, level).decode()
        written = json.loads(text)
        assert written == {**json.loads(json.dumps(header, default=str)), **content}
        assert list(written)[: len(header)] == list(header)

    @pytest.mark.parametrize("level", [0, 1, 9])
    def test_many_blocks(self, tmp_path: Path, level: int) -> None:
        """A source of several 1 MB blocks streams through whole at each level."""
        events = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1} for i in range(3 * BLOCK // 40)]
        source = tmp_path / "events.json"
        source.write_text(json.dumps({"traceEvents": events}))
        assert source.stat().st_size > 2 * BLOCK
        out = tmp_path / "out"
        assert compress_trace(str(source), str(out), {"profdsl": {"step": 3}}, level=level) == out.stat().st_size
        assert json.loads(read_back(out, level)) == {"profdsl": {"step": 3}, "traceEvents": events}

    @pytest.mark.parametrize("level", [0, 6])
    @pytest.mark.parametrize(
        ("content", "why"),
        [
            (b"", "empty trace"),
            (b"[1, 2]", "not a JSON object"),
            (b'{"traceEvents": [{"ph": "X"', "cut short"),
            (b'{"other": []}', "no traceEvents"),
        ],
    )
    def test_bad_exports_refused_at_every_level(self, tmp_path: Path, level: int, content: bytes, why: str) -> None:
        """The plain path checks the export as the gzip path does."""
        source = tmp_path / "events.json"
        source.write_bytes(content)
        with pytest.raises(InvalidTraceError, match=why):
            compress_trace(str(source), str(tmp_path / "out"), None, level=level)

    @pytest.mark.parametrize("level", [-1, 10, True, 2.0])
    def test_bad_level_refused_before_writing(self, tmp_path: Path, level: Any) -> None:
        """A level zlib would take (-1: its default) or refuse is refused up front, nothing written."""
        source = tmp_path / "events.json"
        source.write_text('{"traceEvents": []}')
        with pytest.raises(ConfigError, match="compress_trace level must be an integer in 0..9"):
            compress_trace(str(source), str(tmp_path / "out"), None, level=level)
        assert not (tmp_path / "out").exists()

    def test_plain_check_is_the_size_on_disk(self, tmp_path: Path) -> None:
        """A plain file cut short or padded on disk fails its check."""
        path = tmp_path / "t.json"
        path.write_bytes(b'{"traceEvents": []}')
        check_size(str(path), 19)
        for wrong in (18, 20):
            with pytest.raises(InvalidTraceError, match="cut short or padded"):
                check_size(str(path), wrong)


class TestProfiledStep:
    """A real profiled step (torch CPU) at levels 0 and 9, read back by the commands."""

    @pytest.mark.parametrize("level", [0, 9])
    def test_trace_recorded_and_read_by_commands(
        self, tmp_path: Path, level: int, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Level 0 writes a ``.pt.trace.json`` that json.load parses, level 9 a gzip
        ``.pt.trace.json.gz``; either is recorded ok, and ``ls``, ``check`` and ``summary`` read it."""
        pytest.importorskip("torch")
        out = tmp_path / "profiles"
        cfg = config(out, discrete=True, torch=TorchOptions(contents=["cpu"], compress_level=level))
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update_actor"):
                for _ in range(20):
                    work()
        files = sorted(p.name for p in out.iterdir() if p.name != MANIFEST_NAME)
        assert len(files) == 1, files  # nothing left behind: no temporary, no second copy
        path = out / files[0]
        ext = PLAIN_TRACE_EXT if level == 0 else TRACE_EXT
        assert TraceName.parse(path.name).ext == ext
        if level == 0:
            with open(path, encoding="utf-8") as f:
                trace = json.load(f)
        else:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                trace = json.load(f)
        assert list(trace)[0] == "profdsl" and trace["profdsl"]["stage"] == "update_actor"
        assert sum(e.get("name") == "aten::mul" for e in trace["traceEvents"]) == 20
        [record] = [r for r in read_manifest(out) if r["kind"] == "trace"]
        assert (record["status"], record["path"], record["bytes"]) == ("ok", path.name, os.path.getsize(path))

        capsys.readouterr()
        assert profdsl._cli.main(["ls", str(out), "--json"]) == 0
        assert [r["path"] for r in json.loads(capsys.readouterr().out)] == [path.name]
        assert profdsl._cli.main(["check", str(out)]) == 0
        capsys.readouterr()
        assert profdsl._cli.main(["summary", str(out), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert {(r["role"], r["stage"], r["step"], r["rank"]) for r in rows} >= {("actor", "update_actor", 1, 0)}
