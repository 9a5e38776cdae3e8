"""Tests for `profdsl.collect._relocate`: relocation plans (pure) and applying them to real files."""

from __future__ import annotations

import gzip
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import Profiler, ProfilerConfig, profile_stage
from profdsl.collect._relocate import Move, Skip, apply, gzip_complete, plan_nsys, wait_complete
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName

LABEL = {"role": "actor", "rank": 3, "world_size": 8, "host": "node-1"}


def move_to(tmp_path: Path, source: Path, **name: object) -> Move:
    fields = {"role": "rollout", "host": "h", "pid": 1, "time_ms": 1_795_000_000_000, **name}
    return Move(str(source), TraceName(**fields), "rollout", {"role": "rollout"})  # type: ignore[arg-type]


class TestPlanNsys:
    """Tests for `plan_nsys` (pure)."""

    def test_only_this_process_finished_reports(self) -> None:
        """This pid's finished reports move; other pids' and converting ones stay."""
        names = [
            "worker_process_42.nsys-rep",
            "worker_process_42.1.nsys-rep",
            "worker_process_42.1.qdstrm",
            "worker_process_7.nsys-rep",
            "worker_process_420.nsys-rep",
            "notes.txt",
        ]
        plan = plan_nsys(names, source_dir="/r", pid=42, label=LABEL, time_ms=1_795_000_000_000)
        moves = [p for p in plan if isinstance(p, Move)]
        skips = [p for p in plan if isinstance(p, Skip)]
        assert [m.source for m in moves] == ["/r/worker_process_42.nsys-rep"]
        assert [s.source for s in skips] == ["/r/worker_process_42.1.nsys-rep"]
        assert moves[0].name.ext == ".nsys-rep" and (moves[0].name.rank, moves[0].name.role) == (3, "actor")

    @given(st.lists(st.integers(min_value=0, max_value=50), unique=True))
    def test_destinations_unique_and_flat(self, indexes: list[int]) -> None:
        """Distinct reports get distinct destination names, none with a path separator."""
        names = [f"worker_process_9.{i}.nsys-rep" for i in indexes]
        plan = plan_nsys(names, source_dir="/r", pid=9, label=LABEL, time_ms=1_795_000_000_000)
        formatted = [m.name.format() for m in plan if isinstance(m, Move)]
        assert len(set(formatted)) == len(indexes)
        assert all(os.path.basename(n) == n for n in formatted)


class TestApply:
    """Tests for `apply` on real files."""

    def test_moves_and_records(self, tmp_path: Path) -> None:
        """A complete file is moved under its name and recorded with its size."""
        src = tmp_path / "src" / "a.trace.json.gz"
        src.parent.mkdir()
        data = gzip.compress(b'{"traceEvents": []}')  # once: the gzip header carries the time
        src.write_bytes(data)
        save = tmp_path / "save"
        [record] = apply(
            [move_to(tmp_path, src, step=3, ext=".trace.json.gz")], str(save), wait_s=5, record_incomplete=True
        )
        assert record["status"] == "ok" and not src.exists()
        assert (save / record["path"]).read_bytes() == data
        assert read_manifest(save)[0]["path"] == record["path"]

    def test_never_overwrites(self, tmp_path: Path) -> None:
        """A taken destination name is never overwritten: the next part is used."""
        save = tmp_path / "save"
        save.mkdir()
        move = move_to(tmp_path, tmp_path / "x.json", ext=".json")
        (tmp_path / "x.json").write_text("new")
        (save / move.name.format()).write_text("old")
        [record] = apply([move], str(save), wait_s=5, record_incomplete=True)
        assert (save / move.name.format()).read_text() == "old"
        assert TraceName.parse(record["path"]).part == 1 and (save / record["path"]).read_text() == "new"

    def test_symlink_not_followed(self, tmp_path: Path) -> None:
        """A symlink in the source folder is skipped; its target is untouched."""
        outside = tmp_path / "secret.txt"
        outside.write_text("keep me")
        link = tmp_path / "link.json"
        link.symlink_to(outside)
        [record] = apply(
            [move_to(tmp_path, link, ext=".json")], str(tmp_path / "save"), wait_s=1, record_incomplete=True
        )
        assert record["status"] == "skipped" and outside.read_text() == "keep me" and link.is_symlink()

    def test_growing_file_is_left_and_recorded_incomplete(self, tmp_path: Path) -> None:
        """A file still being written stays put; at the last pass it is recorded incomplete."""
        src = tmp_path / "growing.json"
        src.write_text("x")
        stop = threading.Event()

        def grow() -> None:
            with open(src, "a") as f:
                while not stop.is_set():
                    f.write("x")
                    f.flush()
                    time.sleep(0.01)

        writer = threading.Thread(target=grow)
        writer.start()
        try:
            [record] = apply(
                [move_to(tmp_path, src, ext=".json")], str(tmp_path / "save"), wait_s=1, record_incomplete=True
            )
        finally:
            stop.set()
            writer.join()
        assert record["status"] == "incomplete" and record["path"] is None and src.exists()

    def test_a_whole_gzip_stream_is_complete_without_a_poll(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A .gz that already is a whole gzip stream (an engine's finished trace, profdsl's own
        torch sampler's) is complete at once: the training thread, waiting on the rollout's
        relocation, does not wait a poll for it (it waited POLL_S, 0.2 s, per profiled window).
        A plain file still has to hold still over one poll."""
        from types import SimpleNamespace

        from profdsl.collect import _relocate as relocate

        polls: list[float] = []
        clock = SimpleNamespace(monotonic=time.monotonic, sleep=polls.append)  # polls counted, not slept
        monkeypatch.setattr(relocate, "time", clock)
        whole = tmp_path / "t.trace.json.gz"
        whole.write_bytes(gzip.compress(b"x" * 10000))
        assert wait_complete([str(whole)], 60) == [] and polls == []
        plain = tmp_path / "t.json"
        plain.write_text("{}")
        assert wait_complete([str(whole), str(plain)], 60) == [] and polls == [relocate.POLL_S]

    def test_truncated_gzip_is_incomplete(self, tmp_path: Path) -> None:
        """A .gz without its trailer is not moved."""
        src = tmp_path / "t.trace.json.gz"
        src.write_bytes(gzip.compress(b"x" * 10000)[:-6])
        assert not gzip_complete(str(src))
        assert wait_complete([str(src)], 0.5) == [str(src)]
        assert (
            apply(
                [move_to(tmp_path, src, ext=".trace.json.gz")], str(tmp_path / "s"), wait_s=0.5, record_incomplete=False
            )
            == []
        )

    def test_cross_device_move(self, tmp_path: Path) -> None:
        """Across filesystems: copied, fsynced, renamed, source removed."""
        shm = Path("/dev/shm")
        if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("no second filesystem here")
        src = shm / f"profdsl-test-{os.getpid()}.json"
        src.write_text("payload")
        try:
            [record] = apply(
                [move_to(tmp_path, src, ext=".json")], str(tmp_path / "save"), wait_s=5, record_incomplete=True
            )
        finally:
            src.unlink(missing_ok=True)
        assert record["status"] == "ok" and (tmp_path / "save" / record["path"]).read_text() == "payload"
        assert not [p for p in (tmp_path / "save").iterdir() if p.name.startswith(".profdsl-tmp")]


class TestNsysWithProfiler:
    """tool='nsys': this process's reports are moved at each stop and at close (nsys itself
    cannot run on a CPU machine: the report files are written the way Ray's nsight plugin names
    them)."""

    def test_reports_moved_late_ones_at_close(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from profdsl._runtime import step_events

        monkeypatch.setattr(step_events, "NSYS_FINAL_WAIT_S", 0.3)  # how long the last step waits for nsys
        nsight = tmp_path / "nsight"
        nsight.mkdir()
        pid = os.getpid()
        cfg = ProfilerConfig(
            enable=True, tool="nsys", steps=[1, 2], save_path=str(tmp_path / "save"), nsys_report_dir=str(nsight)
        )
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        (nsight / f"worker_process_{pid}.1.nsys-rep").write_bytes(b"report 1")
        (nsight / f"worker_process_{pid + 1}.nsys-rep").write_bytes(b"another process")
        with profiler.step(1), profile_stage("s"):
            pass
        assert profiler.process.writer.wait(timeout=60)  # the writer moves them in the background
        moved = [r for r in read_manifest(tmp_path / "save") if r["kind"] == "nsys"]
        assert [(r["status"], r["rank"]) for r in moved] == [("ok", 0)]
        (nsight / f"worker_process_{pid}.2.qdstrm").write_bytes(b"converting")
        (nsight / f"worker_process_{pid}.2.nsys-rep").write_bytes(b"partial")
        with profiler.step(2):
            pass
        profiler.close()
        statuses = sorted(r["status"] for r in read_manifest(tmp_path / "save") if r["kind"] == "nsys")
        assert statuses == ["incomplete", "ok"]
        assert (nsight / f"worker_process_{pid + 1}.nsys-rep").exists()
        assert (nsight / f"worker_process_{pid}.2.qdstrm").exists()
        files = sorted(p.name for p in (tmp_path / "save").iterdir() if p.suffix == ".nsys-rep")
        assert len(files) == 1 and (tmp_path / "save" / files[0]).read_bytes() == b"report 1"


def test_hostile_labels_stay_inside_save_path(tmp_path: Path) -> None:
    """Labels full of `..` and separators cannot place a file outside save_path."""
    src = tmp_path / "engine.json"
    src.write_text("{}")
    name = TraceName(role="../../etc", stage="/abs/../x", host="..\\..", pid=1, time_ms=1_795_000_000_000, ext=".json")
    save = tmp_path / "deep" / "save"
    [record] = apply([Move(str(src), name, "rollout", {})], str(save), wait_s=5, record_incomplete=True)
    assert record["status"] == "ok" and "/" not in record["path"] and ".." not in record["path"]
    assert [p.parent for p in save.iterdir() if p.suffix == ".json"] == [save]


@pytest.mark.parametrize("source_kind", ["dangling symlink", "missing"])
def test_a_stray_file_that_cannot_be_moved_is_recorded_for_that(tmp_path: Path, source_kind: str) -> None:
    """A file planned as ``stray`` (an engine's profile that outlived its window) that is not a
    regular file, or is gone, is recorded with what happened to it: applying the plan never
    raises."""
    src = tmp_path / "stray-t.json"
    if source_kind == "dangling symlink":
        src.symlink_to(tmp_path / "nowhere")
    move = Move(
        str(src),
        TraceName(role="rollout", host="h", pid=1, time_ms=1_795_000_000_000, ext=".json"),
        "rollout",
        {"role": "rollout", "status": "stray", "reason": "written after its window"},
    )
    [record] = apply([move], str(tmp_path / "save"), wait_s=0.3, record_incomplete=True)
    assert record["status"] == "skipped" and "regular" in record["reason"]
    assert [r["status"] for r in read_manifest(tmp_path / "save")] == [record["status"]]


def test_the_records_page_reads_a_manifest_as_it_says(tmp_path: Path) -> None:
    """docs/records.md's "Reading them in Python" runs as written (its imports are public; it
    once imported a name the module does not export): its code, run on a real run's folder,
    reads each of the run's records."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "records.md").read_text(encoding="utf-8")
    section = text[text.index("## Reading them in Python") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("```\n", start)]
    save = tmp_path / "profiles"
    with Profiler(ProfilerConfig(enable=True, steps=[1], save_path=str(save)), role="actor", rank=0, world_size=1) as p:
        with p.step(1), profile_stage("update"):
            pass
    seen: list[object] = []
    code = code.replace('"profiles"', repr(str(save))).replace(
        "    if isinstance(record, TraceRecord)", "    seen.append(record)\n    if isinstance(record, TraceRecord)"
    )
    exec(compile(code, "records.md", "exec"), {"seen": seen})
    from profdsl.records import TraceRecord

    assert len(seen) == len(read_manifest(save)) >= 1
    assert all(isinstance(r, TraceRecord) and r.role == "actor" for r in seen)
