"""`profdsl ls`, `check`, `summary` and `plan`, run as real commands on folders the real runtime
wrote (the demo's), their numbers checked against an independent recount of the trace events."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from profdsl._cli import COMMANDS
from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.manifest import read_manifest

#: Left out of the quick pass (python -m pytest -m "not slow"); see setup.cfg.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")


def profdsl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "profdsl", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "profiles"
    result = profdsl("demo", "--out", str(out), "--ranks", "0", "--steps", "1", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    return out


@pytest.fixture
def folder(demo_dir: Path, tmp_path: Path) -> Path:
    """A private copy to damage."""
    return Path(shutil.copytree(demo_dir, tmp_path / "copy"))


def recount(folder: Path) -> dict[tuple[str, str, int, int], float]:
    """Independent: load each trace whole and add up the durations of the regions named like the
    record's stage, or like mini_batch<i>; an engine trace counts its whole span."""
    totals: dict[tuple[str, str, int, int], float] = defaultdict(float)
    for record in read_manifest(folder):
        if record["kind"] not in ("trace", "rollout") or record["status"] != "ok":
            continue
        with gzip.open(folder / record["path"], "rt") as f:
            trace = json.load(f)
        xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        if record["kind"] == "rollout":
            span = max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)
            totals[("rollout", "generate (engine)", record["step"], record["rank"])] += span / 1000
            continue
        for e in xs:
            if e["name"] == record["stage"]:
                totals[(record["role"], record["stage"], record["step"], record["rank"])] += e["dur"] / 1000
            elif re.fullmatch(r"mini_batch\d+", e["name"]):
                totals[(record["role"], "mini_batch", record["step"], record["rank"])] += e["dur"] / 1000
    return totals


class TestLs:
    """`profdsl ls`."""

    def test_rows_from_manifest(self, demo_dir: Path) -> None:
        """One row per manifest record, in the table and in --json."""
        result = profdsl("ls", str(demo_dir), "--json")
        assert result.returncode == 0
        rows = json.loads(result.stdout)
        assert [r["path"] for r in rows] == [r["path"] for r in read_manifest(demo_dir)]
        table = profdsl("ls", str(demo_dir)).stdout.splitlines()
        assert table[0].split()[:4] == ["kind", "role", "stage", "step"] and len(table) == len(rows) + 2

    def test_without_manifest_reads_names(self, folder: Path) -> None:
        """A folder without a manifest is listed from its file names."""
        (folder / MANIFEST_NAME).unlink()
        rows = json.loads(profdsl("ls", str(folder), "--json").stdout)
        files = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json.gz"))
        assert sorted(r["path"] for r in rows) == files
        assert {(r["role"], r["step"]) for r in rows} >= {("actor", 1), ("rollout", 2)}

    @pytest.mark.parametrize("case", ["missing", "empty", "not traces"])
    def test_usage_errors(self, tmp_path: Path, case: str) -> None:
        """A missing folder, an empty one or one without traces: exit 2 with a clear message."""
        target = tmp_path / "x"
        if case != "missing":
            target.mkdir()
        if case == "not traces":
            (target / "notes.txt").write_text("hi")
        for command in ("ls", "check", "summary"):
            result = profdsl(command, str(target))
            assert result.returncode == 2
            assert ("no such folder" if case == "missing" else "no profdsl manifest") in result.stderr


class TestCheck:
    """`profdsl check`."""

    def test_demo_output_is_well(self, demo_dir: Path) -> None:
        """The demo's folder passes."""
        result = profdsl("check", str(demo_dir))
        assert result.returncode == 0, result.stdout
        assert "all well" in result.stdout

    def test_damage_is_named(self, folder: Path) -> None:
        """A truncated, an emptied and a deleted trace, and a leftover temporary file: exit 1,
        each named."""
        traces = [r["path"] for r in read_manifest(folder) if r["kind"] == "trace"]
        data = (folder / traces[0]).read_bytes()
        (folder / traces[0]).write_bytes(data[: len(data) // 2])
        (folder / traces[1]).write_bytes(b"")
        (folder / traces[2]).unlink()
        (folder / ".profdsl-tmp-1-abc.json.gz").write_bytes(b"x")
        result = profdsl("check", str(folder))
        assert result.returncode == 1
        lines = result.stdout.splitlines()
        assert any(traces[0] in line and "unreadable" in line for line in lines)
        assert any(traces[1] in line and "empty" in line for line in lines)
        assert any(traces[2] in line and "missing" in line for line in lines)
        assert any(".profdsl-tmp-" in line for line in lines)

    def test_failed_records_and_missing_ranks(self, folder: Path, tmp_path: Path) -> None:
        """A failed hook record is a problem; with --config, a profiled rank that wrote nothing."""
        with open(folder / MANIFEST_NAME, "a") as f:
            f.write(
                json.dumps(
                    {
                        "kind": "hook",
                        "path": None,
                        "status": "timeout",
                        "rank": 0,
                        "role": "actor",
                        "error": "timed out after 5s",
                    }
                )
                + "\n"
            )
        config = tmp_path / "p.yaml"
        config.write_text("enable: true\nsteps: [1, 2]\nranks: [0, 1]\n")
        result = profdsl("check", str(folder), "--config", str(config), "--world-size", "2")
        assert result.returncode == 1
        assert "hook timeout timed out after 5s" in result.stdout
        assert "step 1: profiled rank 1 wrote no trace" in result.stdout


class TestSummary:
    """`profdsl summary`."""

    def test_json_matches_an_independent_recount(self, demo_dir: Path) -> None:
        """total_ms per (role, stage, step, rank) equals a recount from the raw events."""
        result = profdsl("summary", str(demo_dir), "--json")
        assert result.returncode == 0
        rows = json.loads(result.stdout)
        got = {(r["role"], r["stage"], r["step"], r["rank"]): r["total_ms"] for r in rows}
        expected = recount(demo_dir)
        assert set(got) == set(expected)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key
        for row in rows:
            assert set(row) >= {"role", "stage", "step", "rank", "total_ms", "count", "mean_ms", "share"}

    def test_group_by_and_csv(self, demo_dir: Path) -> None:
        """--by role,stage sums over steps and ranks; --csv prints a header and rows."""
        rows = json.loads(profdsl("summary", str(demo_dir), "--by", "role,stage", "--json").stdout)
        expected: dict[tuple[str, str], float] = defaultdict(float)
        for (role, stage, _step, _rank), value in recount(demo_dir).items():
            expected[(role, stage)] += value
        assert {(r["role"], r["stage"]): pytest.approx(r["total_ms"]) for r in rows} == expected
        csv_out = profdsl("summary", str(demo_dir), "--csv").stdout.splitlines()
        assert (
            csv_out[0]
            == (
                "role,stage,path,depth,step,rank,count,total_ms,self_ms,mean_ms,share,ranks,"
                "min_ms,median_ms,max_ms,slowest_rank,tp,pp,dp,cp,ep,interleaved"
            )
            and len(csv_out) > 1
        )
        flat = profdsl("summary", str(demo_dir), "--by", "role,stage,step,rank", "--csv").stdout.splitlines()
        assert flat[0] == "role,stage,step,rank,path,count,total_ms,mean_ms,share" and len(flat) == len(csv_out)

    def test_by_step_and_rank_sums_outermost_stages_against_the_step_wall(self, demo_dir: Path) -> None:
        """Without stage in --by only outermost stages are summed (a mini-batch is inside its
        stage already); each row has its roles' step wall time (the metrics log's wall_s), the
        time outside any stage, and a share of at most 100%. The step time of several roles is the
        longest of theirs: the demo's roles share one step loop."""
        walls: dict[tuple[str, int, int], float] = {}
        for path in demo_dir.glob("profdsl-metrics-*.jsonl"):
            for line in path.read_text().splitlines():
                item = json.loads(line)
                walls[(item["role"], item["step"], item["rank"])] = item["wall_s"] * 1000
        expected: dict[tuple[int, int], float] = defaultdict(float)
        wall: dict[tuple[int, int], float] = defaultdict(float)
        for (_role, stage, step, rank), value in recount(demo_dir).items():
            if stage != "mini_batch":
                expected[(step, rank)] += value
        for role, step, rank in {(k[0], k[2], k[3]) for k in recount(demo_dir)}:
            role_total = sum(v for k, v in recount(demo_dir).items() if k[0] == role and k[2:] == (step, rank))
            wall[(step, rank)] = max(wall[(step, rank)], walls.get((role, step, rank), role_total))
        result = profdsl("summary", str(demo_dir), "--by", "step,rank", "--json")
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)
        assert {(r["step"], r["rank"]) for r in rows} == set(expected)
        for row in rows:
            key = (row["step"], row["rank"])
            assert row["total_ms"] == pytest.approx(expected[key], rel=1e-6), key
            assert row["step_ms"] == pytest.approx(wall[key], rel=1e-3), key
            assert row["outside_ms"] == pytest.approx(row["step_ms"] - row["total_ms"], abs=1e-3)
            assert 0 < row["share"] <= 1 and row["share"] == pytest.approx(row["total_ms"] / row["step_ms"], rel=1e-3)
        text = profdsl("summary", str(demo_dir), "--by", "step,rank").stdout
        assert "outermost stages" in text and "step ms" in text.splitlines()[0]

    def test_step_view_has_a_step_row_per_role(self, demo_dir: Path) -> None:
        """The step view gives each role a (step) row: its wall time, and the time outside any
        of its stages as self time."""
        lines = profdsl("summary", str(demo_dir)).stdout.splitlines()
        rows = [line.split() for line in lines if line.split()[1:2] == ["(step)"]]
        assert {r[0] for r in rows} >= {"actor", "critic", "ref"}
        assert all(float(r[3]) >= float(r[4]) >= 0 for r in rows)

    def test_bad_group_key(self, demo_dir: Path) -> None:
        """An unknown --by key is a usage error."""
        result = profdsl("summary", str(demo_dir), "--by", "role,colour")
        assert result.returncode == 2 and "--by takes keys from" in result.stderr


class TestPlan:
    """`profdsl plan`."""

    def test_plan(self, tmp_path: Path) -> None:
        """Steps, ranks, replicas, windows, an example name and size warnings."""
        config = tmp_path / "p.yaml"
        config.write_text(
            "enable: true\nsteps: [2, 3, 5]\ncontinuous_steps: false\nranks: [0, 8]\n"
            "discrete: true\ntorch: {contents: [cpu, stack], schedule: {wait: 1, active: 2}}\n"
            "finish_hook: {cmd: 'true', ranks: [0]}\n"
        )
        result = profdsl("plan", str(config), "--world-size", "16", "--replica-world-size", "8", "--mini-batches", "6")
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "profiled steps: 2-3, 5" in out and "profiled ranks (2 of 16): 0, 8" in out
        assert "finish hook: 'true' on ranks 0, after step 5" in out
        assert "rollout replicas of 8 GPUs: 0-1 of 2" in out
        assert "windows: [(1, 2), (4, 5)]" in out
        assert "_mb1-2_" in out and "warning: stack" in out

    def test_bad_config(self, tmp_path: Path) -> None:
        """A bad config exits non-zero with the ConfigError message."""
        config = tmp_path / "bad.yaml"
        config.write_text("enable: true\nsteps: [-1]\n")
        result = profdsl("plan", str(config), "--world-size", "4")
        assert result.returncode == 2
        assert "ProfilerConfig.steps must contain integers >= 0, got -1" in result.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_an_example(command: str) -> None:
    """`profdsl COMMAND --help` exits 0 and shows an example."""
    result = profdsl(command, "--help")
    assert result.returncode == 0 and "example" in result.stdout
