"""Writing a trace touches nothing outside ``save_path``, and only verified traces are recorded ok
(torch compressed ``.gz`` exports through ``TMPDIR``: a full ``TMPDIR`` gave an empty trace
recorded ok and left a temporary file behind)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli
from profdsl.analysis._reader import header
from profdsl.collect._export import PendingTrace, TraceLabel, finish
from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.manifest import read_manifest

from .traces import load, names, trace_files

ROOT = Path(__file__).resolve().parents[1]

#: A profiled step of a discrete stage with many regions (a trace of a few hundred KB), then
#: close(); prints the manifest as JSON. argv: save_path.
PROFILE = """
import json, sys
from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
from profdsl.manifest import read_manifest
cfg = ProfilerConfig(enable=True, steps=[1], discrete=True, save_path=sys.argv[1],
                     torch=TorchOptions(contents=["cpu"]))
with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
    with profile_stage("update"):
        for i in range(2000):
            with profile_stage(f"inner{i}"):
                pass
print(json.dumps(read_manifest(sys.argv[1])))
"""


def _label(save_path: Path, **kwargs: Any) -> TraceLabel:
    fields: dict[str, Any] = dict(
        role='r"ôle',
        stage="st\\age",
        step=1,
        rank=0,
        world_size=1,
        save_path=str(save_path),
        host="vm",
        pid=os.getpid(),
        config_hash="c",
    )
    fields.update(kwargs)
    return TraceLabel(**fields)


def export_trace(write: Any, label: TraceLabel, **kwargs: Any) -> str | None:
    """A trace's export, as the writer runs it: torch's write of the events, then the rest."""
    return finish(PendingTrace(write=write, label=label, **kwargs))


def _writer(content: bytes, header: dict[str, Any] | None = None) -> Any:
    def write(path: str) -> dict[str, Any] | None:
        with open(path, "wb") as f:
            f.write(content)
        return header

    return write


class TestExportTrace:
    """export_trace on its own, with stand-ins for torch's export."""

    def test_metadata_is_spliced_in_as_json(self, tmp_path: Path) -> None:
        """The metadata ``write`` returns becomes the first top-level keys, as proper JSON: any
        string survives, and header() reads it without reading the events."""
        meta = {
            "profdsl": {"role": 'r"ôle', "stage": "st\\age", "odd": "tab\t nl\n 🙂 \x01"},
            "distributedInfo": {"rank": 0},
        }
        events = b' {\n  "schemaVersion": 1,\n  "traceEvents": [{"ph": "X", "name": "a%22b"}]\n}\n'
        path = export_trace(_writer(events, meta), _label(tmp_path), window=None, time_ms=1)
        assert path is not None and path.endswith(".pt.trace.json.gz")
        trace = load(path)
        assert list(trace)[:3] == ["profdsl", "distributedInfo", "schemaVersion"]
        assert trace["profdsl"] == meta["profdsl"] and trace["traceEvents"] == [{"ph": "X", "name": "a%22b"}]
        assert header(path)["profdsl"] == meta["profdsl"]
        [record] = read_manifest(tmp_path)
        assert (record["status"], record["role"], record["stage"]) == ("ok", 'r"ôle', "st\\age")
        assert record["bytes"] == os.path.getsize(path)

    def test_large_trace_streams_whole(self, tmp_path: Path) -> None:
        """A trace of several 1 MB blocks comes out byte for byte, after the spliced metadata."""
        body = b"".join(b'{"ph": "X", "name": "e%d", "ts": %d},\n' % (i, i) for i in range(120_000))
        events = b'{"traceEvents": [' + body + b'{"ph": "M"}]}'
        assert len(events) > 3 * (1 << 20)
        path = export_trace(_writer(events, {"profdsl": {"k": 1}}), _label(tmp_path), window=None, time_ms=1)
        assert path is not None
        with gzip.open(path, "rb") as f:
            assert f.read() == b'{"profdsl": {"k": 1},' + events[1:]

    @pytest.mark.parametrize(
        ("content", "reason"),
        [
            (b"", "empty"),
            (b"  \n ", "empty"),
            (b'{"traceEvents": [{"ph": "X"},', "end"),
            (b'[{"ph": "X"}]', "object"),
            (b'{"schemaVersion": 1}', "traceEvents"),
        ],
    )
    def test_a_bad_trace_is_recorded_failed(self, tmp_path: Path, content: bytes, reason: str) -> None:
        """An empty, cut-short or malformed export is recorded failed with the reason, and
        nothing of it is left in save_path."""
        assert export_trace(_writer(content, {"profdsl": {}}), _label(tmp_path), window=None, time_ms=1) is None
        [record] = read_manifest(tmp_path)
        assert record["status"] == "failed" and reason in record["error"]
        assert (record["role"], record["stage"]) == ('r"ôle', "st\\age")
        assert os.listdir(tmp_path) == [MANIFEST_NAME]
        # no path to a file that does not exist: the name it would have had is apart
        assert record["path"] is None and record["intended"].endswith(".pt.trace.json.gz")
        assert profdsl._cli.main(["check", str(tmp_path)]) == 1  # the loss, named once

    def test_an_export_that_writes_nothing(self, tmp_path: Path) -> None:
        """An export that returns without writing the file is a failure."""
        assert export_trace(lambda path: None, _label(tmp_path), window=None, time_ms=1) is None
        [record] = read_manifest(tmp_path)
        assert record["status"] == "failed" and record["error"]
        assert os.listdir(tmp_path) == [MANIFEST_NAME]

    def test_an_export_that_raises(self, tmp_path: Path) -> None:
        """A raising export is recorded failed with its message; nothing is left behind."""

        def write(path: str) -> None:
            Path(path).write_bytes(b"{")
            raise RuntimeError("kineto said no")

        assert export_trace(write, _label(tmp_path), window=None, time_ms=1) is None
        [record] = read_manifest(tmp_path)
        assert record["status"] == "failed" and "kineto said no" in record["error"]
        assert os.listdir(tmp_path) == [MANIFEST_NAME]

    def test_compressed_file_is_checked_on_disk(self, tmp_path: Path) -> None:
        """The check of a written gzip file: a file cut short, or whose trailer does not match
        what was compressed, is refused."""
        from profdsl.collect._tracefile import InvalidTraceError, check_written

        data = b'{"traceEvents": []}'
        packed = gzip.compress(data)
        good = tmp_path / "good.gz"
        good.write_bytes(packed)
        crc = zlib.crc32(data)
        check_written(str(good), compressed=len(packed), crc=crc, size=len(data))
        cut = tmp_path / "cut.gz"
        cut.write_bytes(packed[:-3])
        with pytest.raises(InvalidTraceError, match="cut short"):
            check_written(str(cut), compressed=len(packed), crc=crc, size=len(data))
        with pytest.raises(InvalidTraceError, match="trailer"):
            check_written(str(good), compressed=len(packed), crc=crc ^ 1, size=len(data))


@pytest.mark.parametrize("folder", ['q"d', "new\nline", "back\\slash", "é"])
def test_odd_save_paths_give_valid_traces(tmp_path: Path, folder: str) -> None:
    """torch writes the export's path into the trace unescaped (and cannot rename across a
    backslash): a save_path with any character still gives a complete, valid trace."""
    pytest.importorskip("torch")
    from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage

    save = tmp_path / folder
    cfg = ProfilerConfig(
        enable=True, steps=[1], discrete=True, save_path=str(save), torch=TorchOptions(contents=["cpu"])
    )
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        with profile_stage("update"):
            pass
    [path] = trace_files(save)
    assert names(load(path), "update") == ["update"]
    assert [r["status"] for r in read_manifest(save)] == ["ok"]
    assert sorted(os.listdir(save)) == sorted([MANIFEST_NAME, path.name])


@pytest.mark.slow
def test_nothing_is_written_outside_save_path(tmp_path: Path) -> None:
    """Every file profdsl and torch open for writing while a step is profiled and written lies
    in save_path (an audit hook sees each open; TMPDIR is an empty folder of its own)."""
    pytest.importorskip("torch")
    save, tmpdir = tmp_path / "save", tmp_path / "tmpdir"
    tmpdir.mkdir()
    code = textwrap.dedent("""
        import os, sys
        save = os.path.realpath(sys.argv[1])
        import torch, torch._dynamo  # imports make cache folders: only profiling is watched
        from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
        outside = []
        watching = False

        def hook(event, args):
            if not watching:
                return
            if event == "open" and isinstance(args[0], (str, bytes)):
                path, mode, flags = args
                writes = (any(c in mode for c in "wax+") if isinstance(mode, str)
                          else bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)))
            elif event in ("os.rename", "os.remove", "os.mkdir", "shutil.move"):
                path, writes = args[0], True
            else:
                return
            path = os.path.realpath(os.fsdecode(path))
            if writes and not path.startswith(save + os.sep) and path != save:
                outside.append((event, path))

        sys.addaudithook(hook)
        print("BEFORE", sorted(os.listdir(os.environ["TMPDIR"])))  # what the imports made
        cfg = ProfilerConfig(enable=True, steps=[1], discrete=True, save_path=save,
                             torch=TorchOptions(contents=["cpu"]))
        watching = True
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            with profile_stage("update"):
                torch.ones(4).sum()
        watching = False
        print("OUTSIDE", outside)
    """)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(save)], capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path)
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OUTSIDE []" in out.stdout, out.stdout
    # Imports may make cache folders in TMPDIR (torch._dynamo's, on some machines): profiling
    # adds nothing to what they made.
    [before] = [line for line in out.stdout.splitlines() if line.startswith("BEFORE ")]
    assert f"BEFORE {sorted(os.listdir(tmpdir))}" == before
    [path] = trace_files(save)
    assert names(load(path), "update") == ["update"]


def _in_tiny_filesystem(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sh -c script`` in a private mount namespace, where it may mount a small tmpfs
    (skipped where user namespaces or mounts are not allowed)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True, timeout=60
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace: {probe.stderr!r}")
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *args], capture_output=True, text=True, timeout=600, cwd=str(ROOT)
    )


@pytest.mark.slow
def test_full_tmpdir(tmp_path: Path) -> None:
    """TMPDIR on a filesystem with 8 KiB left (enough for tempfile to pick it, not for a trace),
    room in save_path: the trace is whole, valid and recorded ok, and TMPDIR holds nothing new."""
    pytest.importorskip("torch")
    save = tmp_path / "save"
    script = textwrap.dedent("""
        set -e
        TINY=$(mktemp -d)
        mount -t tmpfs -o size=64k tmpfs "$TINY"
        dd if=/dev/zero of="$TINY/filler" bs=4096 count=14 2>/dev/null
        TMPDIR="$TINY" "$1" -c "$2" "$3"
        echo "TMPDIR HOLDS: $(cd "$TINY" && find . -type f | tr '\\n' ' ')"
    """)
    out = _in_tiny_filesystem(script, sys.executable, PROFILE, str(save))
    assert out.returncode == 0, out.stderr[-3000:]
    # (torch's own import of torch._dynamo makes an empty cache folder there: no file)
    assert "TMPDIR HOLDS: ./filler \n" in out.stdout, out.stdout[-2000:]
    [record] = read_manifest(save)
    assert record["status"] == "ok"
    trace = load(save / record["path"])
    assert len(names(trace, "inner")) == 2000
    assert record["bytes"] == os.path.getsize(save / record["path"]) > 10_000


@pytest.mark.slow
def test_full_save_path(tmp_path: Path) -> None:
    """save_path on a filesystem with room for the manifest but not the trace: the trace is
    recorded failed with the reason, and no temporary file is left in save_path."""
    pytest.importorskip("torch")
    script = textwrap.dedent("""
        set -e
        TINY=$(mktemp -d)
        mount -t tmpfs -o size=16k tmpfs "$TINY"
        "$1" -c "$2" "$TINY" > "$3/manifest.json"
        echo "SAVE_PATH HOLDS: $(ls -A "$TINY" | tr '\\n' ' ')"
    """)
    out = _in_tiny_filesystem(script, sys.executable, PROFILE, str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"SAVE_PATH HOLDS: {MANIFEST_NAME} \n" in out.stdout, out.stdout[-2000:]
    [record] = json.loads((tmp_path / "manifest.json").read_text())
    assert record["status"] == "failed" and record["error"] and record["stage"] == "update"
