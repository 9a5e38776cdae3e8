"""The one stage-time model: summary, plot, the demo's report and merge agree to the
microsecond on the same folder, and the model's numbers equal an independent recount from the raw
events (whole-file ``json.load``, nesting found by brute force): total and self time, entries
(a scheduled stage written as several windows is one entry, its mini-batches under it), and the
spread across ranks with the slowest rank."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profdsl import Profiler, Schedule, TorchOptions, mini_batch_window, profile_stage
from profdsl.analysis._catalog import catalog
from profdsl.analysis._load import load_model
from profdsl.analysis._model import StageModel
from profdsl.core._labels import decode, encode
from profdsl.manifest import read_manifest

from .profiling import config

torch = pytest.importorskip("torch")

Key = tuple[str, int, int, tuple[str, ...]]  # role, step, rank, path


def _work(n: int) -> None:
    for _ in range(n):
        torch.ones(16, 16).mm(torch.ones(16, 16))


def _multi_rank(folder: Path) -> None:
    """Three actor ranks, two steps, discrete: a plain stage with a nested one, and a scheduled
    update whose 6 mini-batches are recorded in two windows (two traces per rank and step),
    each mini-batch holding a nested stage. Rank 2 does three times the work."""
    schedule = Schedule(wait=1, active=2)
    cfg = config(
        folder, steps=[1, 2], all_ranks=True, discrete=True, torch=TorchOptions(contents=["cpu"], schedule=schedule)
    )
    for rank in (0, 1, 2):
        scale = 3 if rank == 2 else 1
        with Profiler(cfg, role="actor", rank=rank, world_size=3) as profiler:
            for step in (1, 2):
                with profiler.step(step):
                    with profile_stage("compute_log_prob"):
                        with profile_stage("forward"):
                            _work(2 * scale)
                    with profile_stage("update_actor", scheduled=True):
                        for _ in mini_batch_window(range(6)):
                            with profile_stage("forward_backward"):
                                _work(scale)


def _continuous(folder: Path) -> None:
    """One continuous rank: a generator stage (its region closes at each yield), an async
    stage (closes at each await), and mini-batches directly in the step."""

    @profile_stage("rollout_gen")
    def produce() -> Iterator[int]:
        for i in range(3):
            _work(1)
            yield i

    @profile_stage("reward")
    async def reward() -> None:
        for _ in range(2):
            _work(1)
            await asyncio.sleep(0)

    cfg = config(folder, steps=[1])
    with Profiler(cfg, role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
        list(produce())
        asyncio.run(reward())
        for _ in mini_batch_window(range(2)):
            _work(1)


def _build(factory: Any, tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    from profdsl.testing import reset as reset_for_tests

    folder = tmp_path_factory.mktemp(name)
    reset_for_tests()
    try:
        factory(folder)
    finally:
        reset_for_tests()
    return folder


@pytest.fixture(scope="module")
def multi_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(_multi_rank, tmp_path_factory, "multi")


@pytest.fixture(scope="module")
def continuous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(_continuous, tmp_path_factory, "continuous")


@pytest.fixture
def demo(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> Path:
    """The folder of the session's ``profdsl demo`` run (tests/conftest.py), read only."""
    done, out = demo_run
    assert done.returncode == 0, done.stderr[-3000:]
    return out


# -- an independent recount ---------------------------------------------------------------------


def _label(name: str, stages: set[str], bases: set[str]) -> str | None:
    if decode(name) in stages and encode(decode(name)) == name:
        return decode(name)
    for base in bases:
        match = re.fullmatch(re.escape(encode(base)) + r"(0|[1-9][0-9]*)", name)
        if match:
            return base
    return None


def _path_of(
    event: dict[str, Any], label: str, found: list[tuple[dict[str, Any], str]], root: tuple[str, ...]
) -> tuple[str, ...]:
    """Brute force: the parent is the shortest other region of the thread that contains it."""
    holders = [
        (o, lab)
        for o, lab in found
        if o is not event
        and o["tid"] == event["tid"]
        and o["ts"] <= event["ts"]
        and o["ts"] + o["dur"] >= event["ts"] + event["dur"]
        and (o["dur"], -o["ts"]) > (event["dur"], -event["ts"])
    ]
    if not holders:
        return (*root, label)
    parent, parent_label = min(holders, key=lambda h: (h[0]["dur"], -h[0]["ts"]))
    return (*_path_of(parent, parent_label, found, root), label)


def recount(folder: Path) -> dict[Key, tuple[int, float, float]]:
    """(entries, total ms, self ms) per (role, step, rank, path), from each trace loaded whole:
    a region's parent is the shortest other region of its thread that contains it; an engine's
    trace is one region over its span with the rest under it."""
    pieces: dict[Key, int] = defaultdict(int)
    continued: dict[Key, int] = defaultdict(int)
    total: dict[Key, float] = defaultdict(float)
    own: dict[Key, float] = defaultdict(float)
    for record in read_manifest(folder):
        if record["kind"] not in ("trace", "rollout") or record["status"] != "ok":
            continue
        with gzip.open(folder / record["path"], "rt") as f:
            trace = json.load(f)
        meta = trace.get("profdsl") or {}
        regions = meta.get("regions") or {}
        stages = set(regions.get("stages") or ()) | ({meta["stage"]} if meta.get("stage") else set())
        bases = set(regions.get("mini_batches") or ())
        xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        found = [
            (e, label)
            for e in xs
            if e.get("cat") != "gpu_user_annotation"
            for label in [_label(e["name"], stages, bases)]
            if label is not None
        ]
        root: tuple[str, ...] = ()
        key = (record["role"], record["step"], record["rank"])
        if record["kind"] == "rollout":
            span = max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)
            root = ("generate (engine)",)
            for into in (total, own):
                into[(*key, root)] += span / 1000
            pieces[(*key, root)] += 1

        paths = [(event, label, _path_of(event, label, found, root)) for event, label in found]
        for event, _label_of, path in paths:
            pieces[(*key, path)] += 1
            total[(*key, path)] += event["dur"] / 1000
            own[(*key, path)] += event["dur"] / 1000
            if len(path) > 1:
                own[(*key, path[:-1])] -= event["dur"] / 1000
        for name, count in (regions.get("continued") or {}).items():
            label = name if name in stages else next(b for b in bases if re.fullmatch(re.escape(b) + r"\d+", name))
            (path,) = {p for _e, lab, p in paths if lab == label}
            continued[(*key, path)] += count
    return {k: (max(pieces[k] - continued[k], 1), total[k], own[k]) for k in total}


def summary_rows(folder: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), "--json"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 2e-6  # milliseconds: both to the nanosecond


@pytest.mark.parametrize("which", ["multi_rank", "continuous", pytest.param("demo", marks=pytest.mark.slow)])
def test_the_model_equals_an_independent_recount(which: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(which)
    rows = summary_rows(folder)
    got = {(r["role"], r["step"], r["rank"], tuple(r["path"])): (r["count"], r["total_ms"], r["self_ms"]) for r in rows}
    expected = recount(folder)
    assert set(got) == set(expected)
    for key, (count, total_ms, self_ms) in expected.items():
        assert got[key][0] == count, key
        assert _close(got[key][1], total_ms) and _close(got[key][2], self_ms), (key, got[key], expected[key])


@pytest.mark.parametrize("which", ["multi_rank", pytest.param("demo", marks=pytest.mark.slow)])
def test_summary_plot_demo_and_merge_agree(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The same folder gives the same numbers in all four: summary's rows, the demo report's
    model, merge's ``profdsl.stages`` (read by its own streaming pass), and plot's bars (each
    role's outermost stages per rank and step)."""
    from profdsl._cli import plot

    folder: Path = request.getfixturevalue(which)
    rows = summary_rows(folder)
    assert load_model(str(folder), catalog(folder).artifacts, []).rows() == rows
    merged = tmp_path / "merged.json.gz"
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "merge", str(folder), "-o", str(merged)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with gzip.open(merged, "rt") as f:
        assert json.load(f)["profdsl"]["stages"] == rows
    bars = plot.bar_totals(load_model(folder, catalog(folder).artifacts, []))
    outer = {((r["role"], r["rank"], r["step"]), r["stage"]): r["total_ms"] for r in rows if r["depth"] == 0}
    assert {(key, stage) for key, stages in bars.items() for stage in stages} == set(outer)
    for (key, stage), total_ms in outer.items():
        assert _close(bars[key][stage], total_ms)


def test_a_scheduled_stage_over_several_windows_is_one_entry_with_its_mini_batches_under_it(multi_rank: Path) -> None:
    rows = summary_rows(multi_rank)
    by_path: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_path[tuple(row["path"])].append(row)
    assert set(by_path) == {
        ("compute_log_prob",),
        ("compute_log_prob", "forward"),
        ("update_actor",),
        ("update_actor", "mini_batch"),
        ("update_actor", "mini_batch", "forward_backward"),
    }
    assert {r["count"] for r in by_path[("update_actor",)]} == {1}  # 2 windows, several pieces each
    assert {r["count"] for r in by_path[("update_actor", "mini_batch")]} == {4}  # recorded: 1, 2, 4, 5
    traces = [r for r in read_manifest(multi_rank) if r["kind"] == "trace" and r["stage"] == "update_actor"]
    assert sorted({tuple(r["window"]) for r in traces}) == [(1, 2), (4, 5)]
    for row in by_path[("update_actor",)]:
        assert row["share"] is not None and 0 < row["share"] < 1  # never 100% beside its mini-batches
        assert row["self_ms"] < row["total_ms"]


def test_pieces_of_generator_and_async_stages_are_one_entry(continuous: Path) -> None:
    rows = {tuple(r["path"]): r for r in summary_rows(continuous)}
    assert rows[("rollout_gen",)]["count"] == 1 and rows[("reward",)]["count"] == 1
    assert rows[("mini_batch",)]["count"] == 2
    [trace] = [r for r in read_manifest(continuous) if r["kind"] == "trace"]
    with gzip.open(continuous / trace["path"], "rt") as f:
        data = json.load(f)
    pieces = [e for e in data["traceEvents"] if e.get("name") == "rollout_gen"]
    assert len(pieces) > 1  # the region really is written in pieces
    assert data["profdsl"]["regions"]["continued"]["rollout_gen"] == len(pieces) - 1


def test_spread_across_ranks_is_min_median_max_and_the_slowest(multi_rank: Path) -> None:
    model = load_model(multi_rank, catalog(multi_rank).artifacts, [])
    spreads = {(s.step, s.path): s for s in model.spread()}
    for (step, path), spread in spreads.items():
        nodes = [n for n in model.nodes if n.step == step and n.path == path]
        totals = sorted(n.total_us for n in nodes)
        assert (spread.ranks, spread.min_us, spread.median_us, spread.max_us) == (3, *totals)
        assert spread.slowest_rank == max(nodes, key=lambda n: n.total_us).rank
        assert spread.count == sum(n.count for n in nodes)


def _hand_trace(folder: Path, rank: int, spans: dict[str, float]) -> None:
    """A discrete trace of ``update_actor`` with a ``mini_batch0`` inside, lasting as given (µs)."""
    from profdsl.collect._manifest import append_record, make_record
    from profdsl.naming import TraceName

    name = TraceName(
        role="actor",
        stage="update_actor",
        step=1,
        rank=rank,
        world_size=3,
        host="h",
        pid=10 + rank,
        time_ms=1_800_000_000_000,
    ).format()
    meta = {
        "role": "actor",
        "stage": "update_actor",
        "step": 1,
        "rank": rank,
        "world_size": 3,
        "regions": {"stages": ["update_actor"], "mini_batches": ["mini_batch"]},
    }
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "update_actor",
            "pid": 1,
            "tid": 1,
            "ts": 100.0,
            "dur": spans["update_actor"],
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "mini_batch0",
            "pid": 1,
            "tid": 1,
            "ts": 101.0,
            "dur": spans["mini_batch"],
        },
    ]
    with gzip.open(folder / name, "wt") as f:
        json.dump(
            {
                "profdsl": meta,
                "distributedInfo": {"rank": rank, "world_size": 3},
                "baseTimeNanoseconds": 1_790_000_000_000_000_000,
                "traceEvents": events,
            },
            f,
        )
    append_record(
        str(folder),
        make_record(
            "trace",
            name,
            role="actor",
            stage="update_actor",
            step=1,
            rank=rank,
            world_size=3,
            bytes=(folder / name).stat().st_size,
        ),
    )


def test_a_straggler_rank_stands_out_in_the_step_view(tmp_path: Path) -> None:
    for rank, (outer, inner) in enumerate([(1000.0, 900.0), (1200.0, 1100.0), (9000.0, 8800.0)]):
        _hand_trace(tmp_path, rank, {"update_actor": outer, "mini_batch": inner})
    text = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(tmp_path)], capture_output=True, text=True, timeout=300
    ).stdout
    lines = {line.split()[1]: line.split() for line in text.splitlines()[3:] if line.strip()}
    assert lines["update_actor"] == [
        "actor",
        "update_actor",
        "3",
        "3",
        "1.200",
        "1.000",
        "9.000",
        "rank",
        "2",
        "0.100",
    ]  # median self: 100, 100, 200 µs
    assert lines["mini_batch"] == ["actor", "mini_batch", "3", "3", "1.100", "0.900", "8.800", "rank", "2", "1.100"]
    assert re.search(r"^actor  update_actor .*\n^actor    mini_batch ", text, re.M)  # indented under it


@pytest.mark.slow
def test_engine_time_is_in_the_step_view(demo: Path) -> None:
    text = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(demo)], capture_output=True, text=True, timeout=300
    ).stdout
    for step in ("step 2", "step 3"):
        block = text.split(step, 1)[1].split("\n\n", 1)[0]
        assert "generate (engine)" in block and "update_actor" in block and "  mini_batch" in block


def test_a_model_of_nothing_is_empty() -> None:
    model = StageModel([])
    assert (model.nodes, model.spread(), model.rows(), model.keys()) == ([], [], [], [])


def _model(
    pieces: list[tuple[str, str, float, float]],
    continued: dict[str, int] | None = None,
    continued_at: dict[tuple[str, ...], int] | None = None,
) -> StageModel:
    """A model of one trace whose region events are ``(label, tid, ts, dur)``."""
    from profdsl.analysis._catalog import Artifact
    from profdsl.analysis._regions import RegionNames
    from profdsl.analysis._scan import Piece, TraceScan

    scan = TraceScan(
        tuple(Piece(label, None, tid, ts, dur) for label, tid, ts, dur in pieces),
        None,
        0,
        RegionNames({}, {}, continued or {}, continued_at or {}),
    )
    return StageModel([(Artifact("trace", "t.pt.trace.json.gz", role="actor", step=1, rank=0), scan)])


class TestInterleaved:
    """Regions that cross on a thread (concurrent tasks in one awaiting `with` block) are placed
    beside each other and marked, not nested into a deep path."""

    def test_crossing_regions_sit_side_by_side(self) -> None:
        # three tasks' regions, each beginning inside the one before and ending after it; an
        # inner region inside the last; another thread's region is not affected
        model = _model(
            [
                ("shared", "1", 0, 10),
                ("shared", "1", 5, 10),
                ("shared", "1", 8, 10),
                ("inner", "1", 16, 1),
                ("other", "2", 0, 30),
            ]
        )
        found = {n.path: (n.count, n.total_us, n.self_us, n.interleaved) for n in model.nodes}
        assert found == {
            ("shared",): (3, 30.0, 29.0, True),
            ("shared", "inner"): (1, 1.0, 1.0, False),
            ("other",): (1, 30.0, 30.0, False),
        }
        assert model.interleaved() == {"shared"}
        assert [r["interleaved"] for r in model.rows()] == [False, True, False]

    def test_nested_regions_are_not_interleaved(self) -> None:
        model = _model([("a", "1", 0, 10), ("a", "1", 2, 3), ("b", "1", 6, 4)])
        assert {n.path: n.interleaved for n in model.nodes} == {("a",): False, ("a", "a"): False, ("a", "b"): False}

    def test_the_plot_legend_says_so(self) -> None:
        from profdsl._cli.plot import _legend

        assert _legend("shared", {"shared"}) == "shared (interleaved: overlapping entries)"
        assert _legend("update", {"shared"}) == "update"


class TestContinuedByPath:
    """Continued pieces are taken off the path the trace names; without paths, off the busiest
    path of their label."""

    # a stage `a` whose entry was cut in two (suspended once), holding three entries of a stage
    # also named `a`: one label at two paths
    PIECES = [("a", "1", 0, 10), ("a", "1", 1, 1), ("a", "1", 3, 1), ("a", "1", 5, 1), ("a", "1", 20, 5)]

    def test_by_path(self) -> None:
        model = _model(self.PIECES, {"a": 1}, {("a",): 1})
        assert {n.path: n.count for n in model.nodes} == {("a",): 1, ("a", "a"): 3}

    def test_by_label_only(self) -> None:
        model = _model(self.PIECES, {"a": 1})
        assert {n.path: n.count for n in model.nodes} == {("a",): 2, ("a", "a"): 2}  # what older traces get

    def test_the_metadata_is_read_strictly(self) -> None:
        """`regions.continued_at` keeps `[[label, ...], count > 0]` items and leaves the rest out."""
        from profdsl.analysis._regions import RegionNames

        meta = {
            "profdsl": {
                "regions": {
                    "stages": ["a"],
                    "continued_at": [
                        [["a"], 2],
                        [["a", "b"], 1],
                        [["a", 3], 1],
                        [["b"], 0],
                        [["b"], True],
                        "x",
                        [[], 1],
                    ],
                }
            }
        }
        assert RegionNames.from_header(meta).continued_at == {("a",): 2, ("a", "b"): 1}
