"""Tests for ``profdsl merge``, on folders written by the real runtime and read back with plain
gzip + json."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import profdsl._cli
from profdsl.collect._manifest import append_record, make_record
from profdsl.naming import TraceName

from .traces import load, trace_files

ROWS = ["actor rank0", "actor rank1", "ref rank0", "ref rank1"]
REPO = Path(__file__).resolve().parent.parent


def write_run(folder: Path) -> None:
    """Profile actor ranks 0-1 and ref ranks 0-1 at step 1, and actor rank 0 again at step 2."""
    import torch

    from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
    from profdsl.testing import reset as reset_for_tests

    cfg = ProfilerConfig(
        enable=True,
        steps=[1, 2],
        all_ranks=True,
        discrete=True,
        save_path=str(folder),
        torch=TorchOptions(contents=["cpu"]),
    )
    for role in ("actor", "ref"):
        for rank in (0, 1):
            with Profiler(cfg, role=role, rank=rank, world_size=2) as p:
                for step in (1, 2) if (role, rank) == ("actor", 0) else (1,):
                    with p.step(step), profile_stage("update_actor"):
                        torch.ones(8).sum()
    reset_for_tests()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    write_run(folder)
    return folder


@pytest.fixture
def run_dir(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the runtime's folder, free to damage."""
    return Path(shutil.copytree(pristine, tmp_path / "run"))


@pytest.fixture
def merge(capsys: pytest.CaptureFixture[str]):
    """Run ``profdsl merge ARGS`` in-process; returns (exit code, stdout, stderr)."""

    def call(*args: str) -> tuple[int, str, str]:
        code = profdsl._cli.main(["merge", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return call


def dump(path: Path, trace: dict[str, Any]) -> None:
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)


def label_of(trace: dict[str, Any]) -> str:
    """The row an input belongs in, from the metadata the runtime wrote into the trace."""
    meta = trace["profdsl"]
    return f"{meta['role']} rank{meta['rank']}"


def read_merged(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return json.load(f)  # type: ignore[no-any-return]


def row_names(merged: dict[str, Any]) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"
    }


def merged_x(merged: dict[str, Any]) -> dict[str, list[tuple[float, str]]]:
    """Row name -> sorted (ts, name) of its complete events."""
    names = row_names(merged)
    rows: dict[str, list[tuple[float, str]]] = {}
    for e in merged["traceEvents"]:
        if e.get("ph") == "X":
            rows.setdefault(names[e["pid"]], []).append((e["ts"], e["name"]))
    return {k: sorted(v) for k, v in rows.items()}


def expected_x(inputs: list[dict[str, Any]]) -> dict[str, list[tuple[float, str]]]:
    """Row name -> sorted (ts, name) each input's X events should have after alignment."""
    low = min(t.get("baseTimeNanoseconds", 0) for t in inputs)
    rows: dict[str, list[tuple[float, str]]] = {}
    for t in inputs:
        shift = (t.get("baseTimeNanoseconds", 0) - low) / 1000
        rows.setdefault(label_of(t), []).extend(
            (e["ts"] + shift, e["name"]) for e in t["traceEvents"] if e.get("ph") == "X"
        )
    return {k: sorted(v) for k, v in rows.items()}


def assert_aligned(merged: dict[str, Any], inputs: list[dict[str, Any]], tol: float = 1e-3) -> None:
    want, got = expected_x(inputs), merged_x(merged)
    assert sorted(got) == sorted(want)
    for row, events in want.items():
        assert len(got[row]) == len(events), row
        for (ts, name), (merged_ts, merged_name) in zip(events, got[row]):
            assert merged_name == name
            assert abs(merged_ts - ts) <= tol, (row, name, ts, merged_ts)


class TestRows:
    """One named process row per (role, rank), with every input event moved onto it once."""

    def test_rows_are_named_and_numbered_in_label_order(self, run_dir: Path, tmp_path: Path, merge) -> None:
        code, out, err = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        assert (code, err) == (0, "")
        merged = read_merged(tmp_path / "m.json.gz")
        assert row_names(merged) == {i + 1: label for i, label in enumerate(ROWS)}
        sort_index = {
            e["pid"]: e["args"]["sort_index"]
            for e in merged["traceEvents"]
            if e.get("ph") == "M" and e["name"] == "process_sort_index"
        }
        assert sort_index == {1: 1, 2: 2, 3: 3, 4: 4}
        assert merged["displayTimeUnit"] == "ms"
        for label in ROWS:
            assert label in out
        assert str(tmp_path / "m.json.gz") in out

    def test_input_row_metadata_is_dropped_and_thread_names_kept(self, run_dir: Path, tmp_path: Path, merge) -> None:
        merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        merged = read_merged(tmp_path / "m.json.gz")
        metadata = Counter(e["name"] for e in merged["traceEvents"] if e.get("ph") == "M")
        assert metadata["process_name"] == metadata["process_sort_index"] == len(ROWS)
        assert metadata["process_labels"] == 0
        inputs = [load(p) for p in trace_files(run_dir)]
        threads = sum(1 for t in inputs for e in t["traceEvents"] if e.get("name") == "thread_name")
        assert threads > 0 and metadata["thread_name"] == threads

    def test_every_event_appears_once_on_its_row(self, run_dir: Path, tmp_path: Path, merge) -> None:
        merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        merged = read_merged(tmp_path / "m.json.gz")
        inputs = [load(p) for p in trace_files(run_dir)]
        assert len(inputs) == 5
        names = row_names(merged)
        want = Counter(
            (label_of(t), e["name"], e.get("tid")) for t in inputs for e in t["traceEvents"] if e.get("ph") == "X"
        )
        got = Counter((names[e["pid"]], e["name"], e.get("tid")) for e in merged["traceEvents"] if e.get("ph") == "X")
        assert got == want
        assert all(isinstance(e["pid"], int) and e["pid"] in names for e in merged["traceEvents"])

    def test_merged_file_is_gzip_only_when_asked(self, run_dir: Path, tmp_path: Path, merge) -> None:
        merge(str(run_dir), "-o", str(tmp_path / "m.json"))
        with open(tmp_path / "m.json") as f:
            assert len(row_names(json.load(f))) == len(ROWS)
        merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        assert (tmp_path / "m.json.gz").read_bytes()[:2] == b"\x1f\x8b"


class TestClock:
    """Every input is shifted onto the smallest baseTimeNanoseconds."""

    def test_shifted_bases_are_aligned_to_the_smallest(self, run_dir: Path, tmp_path: Path, merge) -> None:
        files = trace_files(run_dir)
        for path, delta in zip(files, (0, -3_000_000, 7_500_001, 12_345, 0)):
            trace = load(path)
            trace["baseTimeNanoseconds"] += delta
            dump(path, trace)
        inputs = [load(p) for p in files]
        code, _, _ = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        merged = read_merged(tmp_path / "m.json.gz")
        assert code == 0
        assert merged["baseTimeNanoseconds"] == min(t["baseTimeNanoseconds"] for t in inputs)
        assert_aligned(merged, inputs)

    def test_equal_bases_leave_timestamps_unchanged(self, run_dir: Path, tmp_path: Path, merge) -> None:
        inputs = [load(p) for p in trace_files(run_dir)]
        assert len({t["baseTimeNanoseconds"] for t in inputs}) == 1
        merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        merged = read_merged(tmp_path / "m.json.gz")
        assert merged["baseTimeNanoseconds"] == inputs[0]["baseTimeNanoseconds"]
        assert_aligned(merged, inputs, tol=0.0)

    def test_trace_without_base_counts_as_base_zero(self, run_dir: Path, tmp_path: Path, merge) -> None:
        files = trace_files(run_dir)
        trace = load(files[0])
        del trace["baseTimeNanoseconds"]
        dump(files[0], trace)
        inputs = [load(p) for p in files]
        assert merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))[0] == 0
        merged = read_merged(tmp_path / "m.json.gz")
        assert merged["baseTimeNanoseconds"] == 0
        # Shifting by ~1.8e15 us leaves doubles a quarter-microsecond resolution.
        assert_aligned(merged, inputs, tol=1.0)

    def test_flow_ids_of_different_inputs_stay_apart(self, run_dir: Path, tmp_path: Path, merge) -> None:
        for path in trace_files(run_dir):
            trace = load(path)
            x = next(e for e in trace["traceEvents"] if e.get("ph") == "X")
            flow = {"cat": "ac2g", "name": "ac2g", "id": 5, "pid": x["pid"], "tid": x["tid"], "ts": x["ts"]}
            trace["traceEvents"] += [{**flow, "ph": "s"}, {**flow, "ph": "f", "bp": "e"}]
            dump(path, trace)
        merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        flows = [e for e in read_merged(tmp_path / "m.json.gz")["traceEvents"] if e.get("ph") in ("s", "f")]
        starts = Counter(e["id"] for e in flows if e["ph"] == "s")
        finishes = Counter(e["id"] for e in flows if e["ph"] == "f")
        assert len(starts) == 5 and starts == finishes and set(starts.values()) == {1}


class TestSelection:
    """Only ok JSON traces are merged, rollout replicas get their own rows, and --steps filters."""

    def test_steps_keep_only_those_steps(self, run_dir: Path, tmp_path: Path, merge) -> None:
        code, out, _ = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"), "--steps", "2")
        merged = read_merged(tmp_path / "m.json.gz")
        assert code == 0
        assert row_names(merged) == {1: "actor rank0"}
        step2 = [load(p) for p in trace_files(run_dir) if "_step000002_" in p.name]
        assert_aligned(merged, step2, tol=0.0)
        assert "skipped 4 artifacts" in out

    def test_steps_matching_nothing_fail_without_writing(self, run_dir: Path, tmp_path: Path, merge) -> None:
        code, _, err = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"), "--steps", "9")
        assert code == 1 and "no readable JSON trace of steps 9" in err
        assert not (tmp_path / "m.json.gz").exists()

    def test_replica_rows_and_skipped_artifacts(self, run_dir: Path, tmp_path: Path, merge) -> None:
        source = trace_files(run_dir)[0]
        (run_dir / "rollout_replica_1").mkdir()
        shutil.copy(source, run_dir / "rollout_replica_1" / "engine.pt.trace.json.gz")
        append_record(
            run_dir,
            make_record(
                "rollout", "rollout_replica_1/engine.pt.trace.json.gz", role="rollout", replica=1, rank=0, step=1
            ),
        )
        (run_dir / "bad.nsys-rep").write_bytes(b"nsys")
        (run_dir / "failed.pt.trace.json.gz").write_bytes(b"half")
        append_record(run_dir, make_record("nsys", "bad.nsys-rep", role="actor", rank=0, step=1))
        append_record(
            run_dir, make_record("trace", "failed.pt.trace.json.gz", role="actor", rank=0, step=1, status="failed")
        )
        append_record(run_dir, make_record("hook", None, status="ok"))
        code, out, err = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        assert (code, err) == (0, "")
        merged = read_merged(tmp_path / "m.json.gz")
        assert sorted(row_names(merged).values()) == sorted(ROWS + ["rollout replica1 rank0"])
        replica_x = merged_x(merged)["rollout replica1 rank0"]
        source_x = [(e["ts"], e["name"]) for e in load(source)["traceEvents"] if e.get("ph") == "X"]
        assert replica_x == sorted(source_x)
        assert "skipped 3 artifacts" in out


class TestHosts:
    """Traces of several hosts and processes in one timeline: how they were aligned is said in
    the merged file's ``profdsl.alignment``, and rows follow their own host's clock."""

    def _rehost(self, folder: Path, host_of: dict[str, str], shift_ns: dict[str, int]) -> list[dict[str, Any]]:
        """Give each trace's manifest record (by row) a host and move its clock origin."""
        records = [json.loads(line) for line in (folder / "profdsl-manifest.jsonl").read_text().splitlines()]
        inputs = []
        for record in records:
            if record["kind"] != "trace":
                continue
            row = f"{record['role']} rank{record['rank']}"
            record["host"] = host_of[row]
            trace = load(folder / record["path"])
            trace["baseTimeNanoseconds"] += shift_ns[host_of[row]]
            dump(folder / record["path"], trace)
            inputs.append(trace)
        (folder / "profdsl-manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return inputs

    def test_two_hosts_are_listed_with_their_rows_and_the_unmeasured_offset(
        self, run_dir: Path, tmp_path: Path, merge
    ) -> None:
        host_of = {"actor rank0": "node-a", "ref rank0": "node-a", "actor rank1": "node-b", "ref rank1": "node-b"}
        inputs = self._rehost(run_dir, host_of, {"node-a": 0, "node-b": 2_500_000})
        code, _, err = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        assert (code, err) == (0, "")
        merged = read_merged(tmp_path / "m.json.gz")
        assert_aligned(merged, inputs)  # each row on its own host's wall clock
        alignment = merged["profdsl"]["alignment"]
        names = {name: pid for pid, name in row_names(merged).items()}
        hosts = {h["host"]: h for h in alignment["hosts"]}
        assert sorted(hosts) == ["node-a", "node-b"]
        assert sorted(hosts["node-a"]["rows"]) == sorted([names["actor rank0"], names["ref rank0"]])
        assert sorted(hosts["node-b"]["rows"]) == sorted([names["actor rank1"], names["ref rank1"]])
        assert hosts["node-a"]["shift_us"] == [0.0, 0.0] and hosts["node-b"]["shift_us"] == [2500.0, 2500.0]
        assert (hosts["node-a"]["traces"], hosts["node-b"]["traces"]) == (3, 2)
        assert alignment["clock"] == "wall" and "not measured" in alignment["across_hosts"]
        assert alignment["within_host"].startswith("exact")

    def test_trainer_and_engine_of_one_host_share_its_clock(self, tmp_path: Path) -> None:
        """A real run: the trainer's traces and the rollout engine's (a torch sampler, moved in by
        the rollout relocation) are one host: no offset between their rows, and the engine's
        generation sits on the timeline between the stages it ran between."""
        import torch

        from profdsl import Profiler, rollout_window
        from profdsl.rollout.torch_sampler import TorchSamplerEngine

        from .profiling import config

        folder = tmp_path / "run"
        cfg = config(folder, discrete=True)
        with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            from profdsl import profile_stage

            with profile_stage("before"):
                torch.ones(8).sum()
            with rollout_window([TorchSamplerEngine(cfg, replica=0)], profiler=profiler):
                torch.nn.Linear(8, 8)(torch.randn(4, 8))
            with profile_stage("after"):
                torch.ones(8).sum()
        out = tmp_path / "m.json.gz"
        done = subprocess.run(
            [sys.executable, "-m", "profdsl", "merge", str(folder), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        merged = read_merged(out)
        alignment = merged["profdsl"]["alignment"]
        assert len(alignment["hosts"]) == 1 and alignment["across_hosts"] == "one host: no offset between rows"
        rows = merged_x(merged)
        assert sorted(rows) == ["actor rank0", "rollout replica0 rank0"]
        start = {name: ts for ts, name in rows["actor rank0"] if name in ("before", "after")}
        engine = [ts for ts, _ in rows["rollout replica0 rank0"]]
        assert start["before"] < min(engine) and max(engine) < start["after"]

    def test_region_names_are_their_labels(self, tmp_path: Path) -> None:
        import torch

        from profdsl import Profiler, mini_batch_window, profile_stage

        from .profiling import config

        folder = tmp_path / "run"
        with Profiler(config(folder, discrete=True), role="actor", rank=0, world_size=1) as p, p.step(1):
            with profile_stage('génér"er'):
                for _ in mini_batch_window(range(2), name="mb é"):
                    torch.ones(4).sum()
        out = tmp_path / "m.json"
        assert profdsl._cli.main(["merge", str(folder), "-o", str(out)]) == 0
        names = {e["name"] for e in read_merged(out)["traceEvents"] if e.get("ph") == "X"}
        assert {'génér"er', "mb é0", "mb é1"} <= names and not any("%" in n for n in names)


class TestFaults:
    """Bad inputs are named and the rest still merged; folder problems are usage errors."""

    @pytest.mark.parametrize("damage", ["truncate", "garbage"])
    def test_bad_trace_is_named_and_others_merged(self, run_dir: Path, tmp_path: Path, merge, damage: str) -> None:
        files = trace_files(run_dir)
        bad = next(p for p in files if p.name.startswith("ref.") and "_rank1-" in p.name)
        good = [load(p) for p in files if p != bad]
        data = bad.read_bytes()
        bad.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x00garbage{" * 40)
        code, out, err = merge(str(run_dir), "-o", str(tmp_path / "m.json.gz"))
        assert code == 1
        assert bad.name in err
        assert sum(1 for f in files if f.name in err) == 1
        merged = read_merged(tmp_path / "m.json.gz")
        got = merged_x(merged)
        want = expected_x(good)
        for row in ("actor rank0", "actor rank1", "ref rank0"):
            assert got[row] == want[row]
        assert str(tmp_path / "m.json.gz") in out

    def test_missing_folder_is_a_usage_error(self, tmp_path: Path, merge) -> None:
        code, out, err = merge(str(tmp_path / "nope"), "-o", str(tmp_path / "m.json"))
        assert code == 2 and out == ""
        assert "nope: no such folder" in err
        assert not (tmp_path / "m.json").exists()

    def test_empty_folder_is_a_usage_error(self, tmp_path: Path, merge) -> None:
        (tmp_path / "empty").mkdir()
        code, _, err = merge(str(tmp_path / "empty"), "-o", str(tmp_path / "m.json"))
        assert code == 2 and "no profdsl manifest and no profdsl trace files" in err

    def test_unwritable_output_is_a_usage_error(self, run_dir: Path, tmp_path: Path, merge) -> None:
        code, _, err = merge(str(run_dir), "-o", str(tmp_path / "no" / "such" / "m.json"))
        assert code == 2 and "cannot write" in err

    def test_help_shows_an_example(self, merge, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            merge("--help")
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert "example" in out and "profdsl merge" in out and "-o FILE" in out


class TestStreaming:
    """Merging holds a bounded number of events, however large the trace."""

    @staticmethod
    def peak_of_merge(tmp_path: Path, merge, n: int) -> int:
        """Peak traced memory of merging one synthetic trace of ``n`` events (checked complete)."""
        folder = tmp_path / f"big{n}"
        folder.mkdir()
        name = TraceName(
            role="actor", stage="update_actor", step=1, rank=0, world_size=1, host="h", pid=1, time_ms=1_795_947_835_123
        ).format()
        with gzip.open(folder / name, "wt") as f:
            f.write('{"baseTimeNanoseconds": 5000, "traceEvents": [')
            f.write(
                ",".join(
                    json.dumps(
                        {
                            "ph": "X",
                            "name": f"op{i}",
                            "pid": 7,
                            "tid": 7,
                            "ts": i * 1.5,
                            "dur": 1.0,
                            "args": {"External id": i},
                        }
                    )
                    for i in range(n)
                )
            )
            f.write("]}")
        out = tmp_path / f"m{n}.json.gz"
        tracemalloc.start()
        try:
            code, _, _ = merge(str(folder), "-o", str(out))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert code == 0
        assert sum(1 for e in read_merged(out)["traceEvents"] if e.get("ph") == "X") == n
        return peak

    @pytest.mark.slow
    def test_peak_memory_does_not_grow_with_the_trace(self, tmp_path: Path, merge) -> None:
        small = self.peak_of_merge(tmp_path, merge, 15_000)
        large = self.peak_of_merge(tmp_path, merge, 60_000)
        # Loading whole traces would make the larger peak about four times the smaller.
        assert large < 1.5 * small, (small, large)


class TestSubprocess:
    """The command runs end to end in a fresh interpreter."""

    @pytest.mark.slow
    def test_real_process(self, run_dir: Path, tmp_path: Path) -> None:
        out_file = tmp_path / "merged.json"
        code = (
            f"import profdsl._cli as c; raise SystemExit(c.main(['merge', {str(run_dir)!r}, '-o', {str(out_file)!r}]))"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
        )
        assert done.returncode == 0, done.stderr
        for label in ROWS:
            assert label in done.stdout
        assert f"wrote {out_file}" in done.stdout
        merged = read_merged(out_file)
        assert_aligned(merged, [load(p) for p in trace_files(run_dir)], tol=0.0)
