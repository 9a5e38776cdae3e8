"""``profdsl export --hta``: folders written by the real runtime on CPU, exported by the real
command in a subprocess, then read by the real Holistic Trace Analysis package (0.5, in a
subprocess of its own: it parses ranks on forked workers, kept away from this process's torch).

HTA's answers are checked against what was recorded: the mini-batch indices each rank's schedule
recorded (``core.schedule.recorded_windows``, an independent rule), the ops each mini-batch ran,
and the clocks in the files (read with plain gzip + json).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import profdsl._cli  # noqa: E402
from profdsl import Profiler, ProfilerConfig, Schedule, TorchOptions, mini_batch_window, profile_stage  # noqa: E402
from profdsl.analysis import _hta as hta_export  # noqa: E402
from profdsl.analysis import _rewrite as rewrite  # noqa: E402
from profdsl.core._naming import TraceName  # noqa: E402
from profdsl.core._schedule import recorded_windows  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STAGE = "update_actor"
MINI_BATCHES = 4
SCHEDULE = Schedule(active=2)

#: Runs HTA on each folder of argv[1] (a JSON list of {"dir", "last", "diff"}) and prints what its
#: iteration analyses say, and every message HTA logged while loading.
HTA_PROBE = r"""
import json, logging, sys
from hta.trace_analysis import TraceAnalysis
from hta.trace_diff import TraceDiff
from hta.common.call_stack import DeviceType

messages = []
class Keep(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
logging.getLogger("hta").addHandler(Keep())
result = {}
for spec in json.loads(sys.argv[1]):
    messages.clear()
    analyzer = TraceAnalysis(trace_dir=spec["dir"], include_last_profiler_step=spec["last"])
    t = analyzer.t
    table = t.symbol_table.get_sym_table()
    ranks = [int(r) for r in t.get_ranks()]
    names = {}
    for rank in ranks:
        per = {}
        for it, group in t.get_trace(rank).groupby("iteration"):
            if it >= 0:
                per[str(int(it))] = sorted(table[i] for i in group["name"])
        names[str(rank)] = per
    found = {
        "ranks": ranks,
        "iterations": {str(r): [int(i) for i in t.get_iterations(r)] for r in ranks},
        "profiler_steps": [int(s) for s in analyzer.get_profiler_steps()],
        "start_ns": {str(r): int(t.get_trace_start_unixtime_ns(r)) for r in ranks},
        "names": names,
        "warnings": list(messages),
    }
    if spec.get("gpu_only"):  # the analyses docs/cli.md says need GPU kernels
        gpu = {}
        for name, call in (("temporal", lambda: analyzer.get_temporal_breakdown(visualize=False)),
                           ("idle", lambda: analyzer.get_idle_time_breakdown(visualize=False)),
                           ("kernels", lambda: analyzer.get_gpu_kernel_breakdown(visualize=False)[0])):
            try:
                gpu[name] = "empty" if len(call()) == 0 else "rows"
            except Exception as exc:
                gpu[name] = "raises " + type(exc).__name__
        found["gpu_only"] = gpu
    if spec.get("diff"):
        comp = TraceDiff.compare_traces(spec["dir"], spec["dir"], control_rank=0, test_rank=1,
                                        control_iteration=0, test_iteration=1,
                                        device_type=DeviceType.CPU)
        found["diff"] = {str(k): [float(v["Control_counts"]), float(v["Test_counts"])]
                         for k, v in comp.iterrows()}
    result[spec["dir"]] = found
print(json.dumps(result))
"""


def _mm() -> None:
    torch.ones(16, 16).mm(torch.ones(16, 16))


def _discrete(
    folder: Path,
    schedule: Schedule = SCHEDULE,
    mini_batches: int = MINI_BATCHES,
    stage: str = STAGE,
    batch_name: str = "mini_batch",
) -> None:
    """Actor ranks 0 and 1 of 2, step 1: a scheduled stage of one ``aten::mm`` per mini-batch
    (one trace per recorded window), then a plain stage without mini-batches."""
    from profdsl.testing import reset

    cfg = ProfilerConfig(
        enable=True,
        steps=[1],
        all_ranks=True,
        discrete=True,
        save_path=str(folder),
        torch=TorchOptions(contents=["cpu"], schedule=schedule),
    )
    reset()
    try:
        for rank in (0, 1):
            with Profiler(cfg, role="actor", rank=rank, world_size=2) as profiler, profiler.step(1):
                with profile_stage(stage, scheduled=True):
                    for _ in mini_batch_window(range(mini_batches), name=batch_name):
                        _mm()
                with profile_stage("compute_log_prob"):
                    torch.ones(8).sum()
    finally:
        reset()


def _continuous(folder: Path) -> None:
    """Actor ranks 0 and 1 of 2, step 1 in one trace each: ``compute_log_prob`` entered twice,
    then ``update_actor`` over three mini-batches."""
    from profdsl.testing import reset

    cfg = ProfilerConfig(
        enable=True, steps=[1], all_ranks=True, save_path=str(folder), torch=TorchOptions(contents=["cpu"])
    )
    reset()
    try:
        for rank in (0, 1):
            with Profiler(cfg, role="actor", rank=rank, world_size=2) as profiler, profiler.step(1):
                for _ in range(2):
                    with profile_stage("compute_log_prob"):
                        torch.ones(8).sum()
                with profile_stage(STAGE):
                    for _ in mini_batch_window(range(3)):
                        _mm()
    finally:
        reset()


@pytest.fixture(scope="module")
def discrete(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("discrete")
    _discrete(folder)
    windows = recorded_windows(SCHEDULE, MINI_BATCHES)
    assert len(list(folder.glob("actor.update-actor_*.json.gz"))) == 2 * len(windows) > 2
    return folder


@pytest.fixture(scope="module")
def continuous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("continuous")
    _continuous(folder)
    assert len(list(folder.glob("actor_step*.json.gz"))) == 2
    return folder


def export(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m profdsl export ...`` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "export", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )


def exported(folder: Path, out: Path, stage: str = STAGE, *more: str) -> Path:
    done = export("--hta", str(folder), "--step", "1", "--stage", stage, "-o", str(out), *more)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    return out


def hta(*specs: dict[str, Any]) -> dict[str, Any]:
    """What HTA says about each folder (see HTA_PROBE)."""
    done = subprocess.run(
        [sys.executable, "-c", HTA_PROBE, json.dumps(list(specs))], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as file:
        return json.load(file)  # type: ignore[no-any-return]


def sources(folder: Path, pattern: str, rank: int) -> list[dict[str, Any]]:
    return [load(p) for p in sorted(folder.glob(pattern)) if f"_rank{rank}-of-" in p.name]


# --- HTA reads the folder, its iteration analyses working -------------------------------------


@pytest.fixture(scope="module")
def analysed(discrete: Path, continuous: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One HTA run over: the discrete export (with and without the last iteration), the
    continuous export, a stage without mini-batches, and the raw folder (no markers)."""
    out = tmp_path_factory.mktemp("exports")
    raw = out / "raw"
    raw.mkdir()
    for path in continuous.glob("actor_step*.json.gz"):  # one trace per rank, as profdsl wrote them
        shutil.copy(path, raw / path.name)
    dirs = {
        "discrete": exported(discrete, out / "discrete"),
        "continuous": exported(continuous, out / "continuous"),
        "entries": exported(continuous, out / "entries", "compute_log_prob"),
        "raw": raw,
    }
    # the default leaves the last iteration out, as HTA does with torch's own ProfilerStep
    dirs["default"] = Path(shutil.copytree(dirs["discrete"], out / "discrete_default"))
    found = hta(
        {"dir": str(dirs["discrete"]), "last": True, "diff": True, "gpu_only": True},
        *({"dir": str(dirs[name]), "last": True} for name in ("continuous", "entries", "raw")),
        {"dir": str(dirs["default"]), "last": False},
    )
    return {name: found[str(path)] for name, path in dirs.items()} | {"dirs": dirs}


@pytest.mark.slow
def test_ranks_and_iterations_are_the_recorded_mini_batches(analysed: dict[str, Any]) -> None:
    recorded = [i for first, last in recorded_windows(SCHEDULE, MINI_BATCHES) for i in range(first, last + 1)]
    found = analysed["discrete"]
    assert found["ranks"] == [0, 1]
    assert found["iterations"] == {"0": recorded, "1": recorded}
    assert found["profiler_steps"] == recorded
    assert analysed["continuous"]["iterations"] == {"0": [0, 1, 2], "1": [0, 1, 2]}
    assert analysed["default"]["iterations"] == {"0": recorded[:-1], "1": recorded[:-1]}


@pytest.mark.slow
def test_each_iteration_holds_its_mini_batch_and_its_ops(analysed: dict[str, Any]) -> None:
    """HTA puts each mini-batch's region and its one ``aten::mm`` in that iteration, and no
    other mini-batch."""
    for name in ("discrete", "continuous"):
        for rank, per in analysed[name]["names"].items():
            for iteration, names in per.items():
                batches = [n for n in names if n.startswith("mini_batch")]
                assert batches == [f"mini_batch{iteration}"], (name, rank, iteration, names)
                assert names.count("aten::mm") == 1, (name, rank, iteration, names)
                assert names.count(f"ProfilerStep#{iteration}") == 1


@pytest.mark.slow
def test_trace_diff_compares_two_mini_batches_on_cpu(analysed: dict[str, Any]) -> None:
    diff = analysed["discrete"]["diff"]
    assert diff["aten::mm"] == [1.0, 1.0]
    assert diff["mini_batch0"] == [1.0, 0.0] and diff["mini_batch1"] == [0.0, 1.0]


@pytest.mark.slow
def test_gpu_analyses_have_nothing_to_say_on_cpu_traces(analysed: dict[str, Any]) -> None:
    """What docs/cli.md says of HTA's kernel analyses on CPU-only traces."""
    gpu = analysed["discrete"]["gpu_only"]
    assert gpu["temporal"].startswith("raises") and gpu["idle"].startswith("raises")
    assert gpu["kernels"] == "empty"


def test_the_printed_call_gives_every_iteration(discrete: Path, tmp_path: Path) -> None:
    """The command prints the HTA call to use, and run as printed (issue 29 item 9) HTA finds
    every recorded mini-batch: HTA's default, ``include_last_profiler_step=False``, would leave
    the last one out (``test_ranks_and_iterations_are_the_recorded_mini_batches``)."""
    out = tmp_path / "hta"
    done = export("--hta", str(discrete), "--step", "1", "--stage", STAGE, "-o", str(out))
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    call = last[last.index("TraceAnalysis(") :]
    assert "include_last_profiler_step=True" in call, last
    probe = f"from hta.trace_analysis import TraceAnalysis\nt = {call}.t\n" + (
        "print([[int(i) for i in t.get_iterations(r)] for r in (0, 1)])"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-4000:]
    recorded = [i for first, last in recorded_windows(SCHEDULE, MINI_BATCHES) for i in range(first, last + 1)]
    assert ran.stdout.splitlines()[-1] == str([recorded, recorded])


def test_stage_without_mini_batches_marks_its_entries(analysed: dict[str, Any]) -> None:
    """``compute_log_prob`` ran twice in each step: two iterations, each one entry."""
    found = analysed["entries"]
    assert found["iterations"] == {"0": [0, 1], "1": [0, 1]}
    for per in found["names"].values():
        assert [n.count("compute_log_prob") for n in per.values()] == [1, 1]


def test_profiler_step_warning_only_without_markers(analysed: dict[str, Any]) -> None:
    warning = "ProfilerStep not found"
    assert any(warning in m for m in analysed["raw"]["warnings"])
    assert analysed["raw"]["iterations"] == {"0": [], "1": []}
    for name in ("discrete", "continuous", "entries", "default"):
        assert not any(warning in m for m in analysed[name]["warnings"]), analysed[name]["warnings"]


def test_clock_is_shared_and_start_time_is_the_wall_clock(analysed: dict[str, Any]) -> None:
    """Both ranks' files share one baseTimeNanoseconds (the smallest of the inputs), so HTA's
    start time is base + the earliest event it keeps (a complete event, not torch's ``Trace``
    span), for every rank."""
    out = analysed["dirs"]["discrete"]
    files = [load(out / hta_export.output_name(r)) for r in (0, 1)]
    assert files[0]["baseTimeNanoseconds"] == files[1]["baseTimeNanoseconds"]
    base = files[0]["baseTimeNanoseconds"]
    first = min(e["ts"] for f in files for e in f["traceEvents"] if "dur" in e and "cat" in e and e["cat"] != "Trace")
    for rank in ("0", "1"):
        assert abs(analysed["discrete"]["start_ns"][rank] - (base + int(first * 1000))) <= 1000


# --- what the files hold ----------------------------------------------------------------------


def test_one_file_per_rank_with_every_event_of_its_windows(discrete: Path, tmp_path: Path) -> None:
    out = exported(discrete, tmp_path / "hta")
    assert sorted(p.name for p in out.iterdir()) == [hta_export.output_name(r) for r in (0, 1)]
    for rank in (0, 1):
        trace = load(out / hta_export.output_name(rank))
        assert trace["distributedInfo"] == {"rank": rank, "world_size": 2}
        assert trace["profdsl"]["export"]["stage"] == STAGE and trace["profdsl"]["export"]["step"] == 1
        inputs = sources(discrete, "actor.update-actor_*.json.gz", rank)
        base = min(t["baseTimeNanoseconds"] for t in inputs)
        expected = sorted(
            (e["name"], e["ts"] + (t["baseTimeNanoseconds"] - base) / 1000)
            for t in inputs
            for e in t["traceEvents"]
            if e.get("ph") == "X"
        )
        got = [(e["name"], e["ts"]) for e in trace["traceEvents"] if e.get("ph") == "X"]
        markers = [e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]
        assert sorted(n for n in got if not n[0].startswith("ProfilerStep#")) == expected
        batches = {e["name"]: e for e in trace["traceEvents"] if e["name"].startswith("mini_batch")}
        assert [m["name"] for m in markers] == [f"ProfilerStep#{i}" for i in range(MINI_BATCHES)]
        for marker in markers:
            batch = batches[f"mini_batch{marker['name'].split('#')[1]}"]
            assert (marker["ts"], marker["dur"], marker["pid"], marker["tid"], marker["cat"]) == (
                batch["ts"],
                batch["dur"],
                batch["pid"],
                batch["tid"],
                "user_annotation",
            )
        # each window repeats the process's metadata events: written once
        meta = [(e["name"], e["pid"], e["tid"]) for e in trace["traceEvents"] if e.get("ph") == "M"]
        assert len(meta) == len(set(meta))


def test_region_names_are_decoded(tmp_path: Path) -> None:
    stage, batch = 'upd"até%', 'mb"é'
    folder = tmp_path / "odd"
    _discrete(folder, stage=stage, batch_name=batch)
    out = exported(folder, tmp_path / "hta", stage)
    names = {e["name"] for e in load(out / hta_export.output_name(1))["traceEvents"]}
    assert {stage, *(f"{batch}{i}" for i in range(MINI_BATCHES))} <= names
    assert {f"ProfilerStep#{i}" for i in range(MINI_BATCHES)} <= names
    assert not any("%C3%A9" in n for n in names)


@pytest.mark.parametrize("schedule", [Schedule(active=1), Schedule(wait=1, active=2), Schedule(active=3)])
def test_markers_follow_the_schedule(schedule: Schedule, tmp_path: Path) -> None:
    """Whatever windows a schedule records, the markers are exactly its recorded mini-batches."""
    folder = tmp_path / "run"
    _discrete(folder, schedule=schedule, mini_batches=5)
    report = hta_export.export_hta(folder, tmp_path / "hta", step=1, stage=STAGE)
    recorded = tuple(i for first, last in recorded_windows(schedule, 5) for i in range(first, last + 1))
    assert report.errors == ()
    assert [(r.rank, r.iterations, r.unit) for r in report.ranks] == [
        (0, recorded, "mini_batch"),
        (1, recorded, "mini_batch"),
    ]
    assert report.ranks[0].traces == len(recorded_windows(schedule, 5))


def test_clock_shift_and_flows_kept_apart(discrete: Path, tmp_path: Path) -> None:
    """A window with a later base moves by the difference; flow ids of two windows stay apart."""
    folder = Path(shutil.copytree(discrete, tmp_path / "run"))
    first, second = sorted(p for p in folder.glob("actor.update-actor_*rank0-of-2*.json.gz"))
    flows = []
    for path, shift_ns in ((first, 0), (second, 5_000_000)):
        trace = load(path)
        trace["baseTimeNanoseconds"] += shift_ns
        ts = trace["traceEvents"][-1]["ts"]
        trace["traceEvents"] += [
            {"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": ts, "name": "f", "cat": "fwdbwd"},
            {"ph": "f", "id": 3, "pid": 1, "tid": 1, "ts": ts, "name": "f", "cat": "fwdbwd", "bp": "e"},
        ]
        with gzip.open(path, "wt") as file:
            json.dump(trace, file)
        flows.append(trace)
    out = exported(folder, tmp_path / "hta")
    merged = load(out / hta_export.output_name(0))
    assert merged["baseTimeNanoseconds"] == flows[0]["baseTimeNanoseconds"]
    moved = {e["ts"] for e in merged["traceEvents"] if e.get("name") == "mini_batch2"}
    [original] = [e["ts"] for e in flows[1]["traceEvents"] if e.get("name") == "mini_batch2"]
    assert moved == {original + 5000.0}
    ids = sorted(e["id"] for e in merged["traceEvents"] if e.get("ph") == "s")
    assert ids == [3, (1 << 40) + 3]


def test_torch_profiler_steps_of_an_input_are_renamed(discrete: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(discrete, tmp_path / "run"))
    path = sorted(folder.glob("actor.update-actor_*rank0-of-2*.json.gz"))[0]
    trace = load(path)
    trace["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#7",
            "pid": 1,
            "tid": 1,
            "ts": trace["traceEvents"][-1]["ts"],
            "dur": 1.0,
        }
    )
    with gzip.open(path, "wt") as file:
        json.dump(trace, file)
    out = exported(folder, tmp_path / "hta")
    names = [e["name"] for e in load(out / hta_export.output_name(0))["traceEvents"]]
    assert "torch_step#7" in names and "ProfilerStep#7" not in names
    assert sorted(n for n in names if n.startswith("ProfilerStep")) == [f"ProfilerStep#{i}" for i in range(4)]


# --- bad input and the output folder ----------------------------------------------------------


def test_unknown_step_and_stage_name_what_exists(discrete: Path, tmp_path: Path) -> None:
    out = tmp_path / "hta"
    done = export("--hta", str(discrete), "--step", "9", "--stage", STAGE, "-o", str(out))
    assert done.returncode == 2 and "no training trace of step 9 (steps: 1)" in done.stderr
    done = export("--hta", str(discrete), "--step", "1", "--stage", "nope", "-o", str(out))
    assert done.returncode == 2
    assert "no stage 'nope' at step 1 (stages: 'compute_log_prob', 'update_actor')" in done.stderr
    assert not out.exists()


def test_a_stage_of_several_roles_needs_a_role(tmp_path: Path) -> None:
    from profdsl.testing import reset

    cfg = ProfilerConfig(
        enable=True, steps=[1], all_ranks=True, save_path=str(tmp_path / "run"), torch=TorchOptions(contents=["cpu"])
    )
    for role, rank in (("actor", 0), ("critic", 1)):
        reset()
        with Profiler(cfg, role=role, rank=rank, world_size=2) as profiler, profiler.step(1):
            with profile_stage("update"):
                for _ in mini_batch_window(range(2)):
                    _mm()
    out = tmp_path / "hta"
    done = export("--hta", str(tmp_path / "run"), "--step", "1", "--stage", "update", "-o", str(out))
    assert done.returncode == 2 and "ran in roles 'actor', 'critic': choose one with --role" in done.stderr
    done = export(
        "--hta", str(tmp_path / "run"), "--step", "1", "--stage", "update", "--role", "critic", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == [hta_export.output_name(1)]


def test_a_non_empty_output_is_refused_and_force_replaces_only_an_export(
    discrete: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "hta"
    out.mkdir()
    mine = out / "notes.txt"
    mine.write_text("keep me")

    def run(*more: str, stage: str = STAGE) -> tuple[int, str]:
        code = profdsl._cli.main(
            ["export", "--hta", str(discrete), "--step", "1", "--stage", stage, "-o", str(out), *more]
        )
        return code, capsys.readouterr().err

    code, err = run()
    assert code == 2 and "not empty" in err and "--force" in err
    code, err = run("--force")
    assert code == 2 and "notes.txt was not written by profdsl export --hta" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and mine.read_text() == "keep me"
    mine.unlink()
    # an earlier export of more ranks: replaced, and the rank not written again removed
    assert run() == (0, "")
    stale = out / hta_export.output_name(5)
    shutil.copy(out / hta_export.output_name(0), stale)
    before = (out / hta_export.output_name(0)).read_bytes()
    assert run()[0] == 2 and (out / hta_export.output_name(0)).read_bytes() == before
    assert run("--force", stage="compute_log_prob") == (0, "")
    assert sorted(p.name for p in out.iterdir()) == [hta_export.output_name(r) for r in (0, 1)]
    assert load(out / hta_export.output_name(0))["profdsl"]["export"]["stage"] == "compute_log_prob"
    # a half-written file a crash left behind is an export's too
    (out / f".{hta_export.output_name(0)}.partial").write_bytes(b"cut")
    assert run("--force")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == [hta_export.output_name(r) for r in (0, 1)]


def test_a_full_disk_leaves_the_earlier_export_whole(
    discrete: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills while rank 1's file is written: exit 2 naming it, no partial file left,
    and the earlier export in OUT untouched (files are replaced only once all are written)."""
    import errno

    out = tmp_path / "hta"
    args = ["export", "--hta", str(discrete), "--step", "1", "--stage", STAGE, "-o", str(out)]
    assert profdsl._cli.main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = rewrite.open_output

    class Full:
        def __init__(self, path: Path, level: int | None) -> None:
            self.inner, self.rank1 = real(path, level), "rank1" in path.name

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

        def write(self, data: bytes) -> int:
            if self.rank1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.inner.write(data)

    monkeypatch.setattr(rewrite, "open_output", Full)
    capsys.readouterr()
    assert profdsl._cli.main([*args, "--force"]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_output_that_is_a_file_is_a_usage_error(discrete: Path, tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("x")
    done = export("--hta", str(discrete), "--step", "1", "--stage", STAGE, "-o", str(out))
    assert done.returncode == 2 and "not a folder" in done.stderr and out.read_text() == "x"


def test_unreadable_trace_is_skipped_and_the_rest_exported(discrete: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(discrete, tmp_path / "run"))
    broken = sorted(folder.glob("actor.update-actor_*rank1-of-2*.json.gz"))[-1]
    broken.write_bytes(broken.read_bytes()[:200])
    out = tmp_path / "hta"
    done = export("--hta", str(folder), "--step", "1", "--stage", STAGE, "-o", str(out))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"profdsl export: skipped {broken}")
    kept = recorded_windows(SCHEDULE, MINI_BATCHES)[0]
    assert "rank 1: 1 trace(s)" in done.stdout
    marks = [
        e["name"] for e in load(out / hta_export.output_name(1))["traceEvents"] if e["name"].startswith("ProfilerStep#")
    ]
    assert marks == [f"ProfilerStep#{i}" for i in range(kept[0], kept[1] + 1)]


def test_a_trace_that_breaks_while_streaming_adds_nothing(
    discrete: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace cut short after it was scanned (rewritten meanwhile) is dropped whole: none of its
    events and none of its markers reach the rank's file."""
    folder = Path(shutil.copytree(discrete, tmp_path / "run"))
    victim = sorted(folder.glob("actor.update-actor_*rank0-of-2*.json.gz"))[0]
    scanned = hta_export.scan_artifacts

    def then_cut(*args: Any, **kwargs: Any) -> Any:
        result = scanned(*args, **kwargs)
        data = victim.read_bytes()
        victim.write_bytes(gzip.compress(gzip.decompress(data)[:-400]))
        return result

    monkeypatch.setattr(hta_export, "scan_artifacts", then_cut)
    code = profdsl._cli.main(
        ["export", "--hta", str(folder), "--step", "1", "--stage", STAGE, "-o", str(tmp_path / "hta")]
    )
    assert code == 1 and f"skipped {victim}" in capsys.readouterr().err
    events = load(tmp_path / "hta" / hta_export.output_name(0))["traceEvents"]
    names = [e["name"] for e in events]
    later = recorded_windows(SCHEDULE, MINI_BATCHES)[1]
    assert [n for n in names if n.startswith("ProfilerStep#")] == [
        f"ProfilerStep#{i}" for i in range(later[0], later[1] + 1)
    ]
    assert "mini_batch0" not in names and f"mini_batch{later[0]}" in names


def test_missing_folder_and_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = profdsl._cli.main(
        ["export", "--hta", str(tmp_path / "none"), "--step", "1", "--stage", STAGE, "-o", str(tmp_path / "o")]
    )
    assert code == 2 and "no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        profdsl._cli.main(["export", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "profdsl export --hta" in out and "TraceAnalysis" in out


# --- bounded memory ---------------------------------------------------------------------------


def _peak_of_export(tmp_path: Path, n: int) -> int:
    """Peak traced memory of exporting one synthetic trace of ``n`` events (checked complete).

    The readers' block bounds are set low here (the fast scan looks for kineto's layout through
    up to ``scan.HEAD_LIMIT``, 16 MiB; ijson parses ``reader.CHUNK``, 1 MiB, of events at a
    time), so that small traces already lie beyond them and the peaks measure the export's own
    streaming.
    """
    folder = tmp_path / f"big{n}"
    folder.mkdir()
    name = TraceName(
        role="actor", stage=STAGE, step=1, rank=0, world_size=1, host="h", pid=1, time_ms=1_795_947_835_123
    ).format()
    meta = {
        "profdsl": {"stage": STAGE, "regions": {"stages": [STAGE], "mini_batches": ["mini_batch"]}},
        "distributedInfo": {"rank": 0, "world_size": 1},
        "baseTimeNanoseconds": 5000,
    }
    with gzip.open(folder / name, "wt") as f:
        f.write(json.dumps(meta)[:-1] + ', "traceEvents": [')
        f.write(
            json.dumps(
                {"ph": "X", "cat": "user_annotation", "name": STAGE, "pid": 7, "tid": 7, "ts": 0, "dur": n * 2.0}
            )
        )
        for b in range(2):
            f.write(
                ","
                + json.dumps(
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": f"mini_batch{b}",
                        "pid": 7,
                        "tid": 7,
                        "ts": b * n + 0.5,
                        "dur": n - 1.0,
                    }
                )
            )
        f.write(
            "".join(
                ","
                + json.dumps(
                    {
                        "ph": "X",
                        "name": f"op{i}",
                        "pid": 7,
                        "tid": 7,
                        "ts": i * 1.5 + 1,
                        "dur": 1.0,
                        "args": {"External id": i},
                    }
                )
                for i in range(n)
            )
        )
        f.write("]}")
    out = tmp_path / f"out{n}"
    tracemalloc.start()
    try:
        report = hta_export.export_hta(folder, out, step=1, stage=STAGE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.errors == () and report.ranks[0].iterations == (0, 1)
    assert report.ranks[0].events == n + 5
    return peak


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from profdsl.analysis import _reader as reader
    from profdsl.analysis import _scan as scan

    monkeypatch.setattr(scan, "HEAD_LIMIT", 256 << 10)
    monkeypatch.setattr(scan, "CHUNK", 64 << 10)
    monkeypatch.setattr(reader, "CHUNK", 64 << 10)
    small = _peak_of_export(tmp_path, 5_000)
    large = _peak_of_export(tmp_path, 20_000)
    # Holding a whole trace would make the larger peak about four times the smaller.
    assert large < 1.5 * small, (small, large)


# --- the same bad input as every other command ------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """test_cli_bad_input's folder (one rank, two discrete stages) and its export."""
    from tests.test_cli_bad_input import write_run

    root = tmp_path_factory.mktemp("pristine")
    write_run(root / "profiles")
    report = hta_export.export_hta(root / "profiles", root / "hta", step=1, stage=STAGE)
    assert report.errors == () and [r.iterations for r in report.ranks] == [(0,)]
    return root / "profiles", load(root / "hta" / hta_export.output_name(0))


def _bad_cases() -> list[tuple[str, str]]:
    from tests.test_cli_bad_input import BAD_RECORDS, BAD_TRACES, RAW_TRACES

    return [("record", c) for c in sorted(BAD_RECORDS)] + [("trace", c) for c in [*sorted(BAD_TRACES), *RAW_TRACES]]


@pytest.mark.parametrize(("kind", "case"), _bad_cases())
def test_bad_input_is_skipped_as_summary_skips_it(
    pristine: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, case: str
) -> None:
    """Each damage of test_cli_bad_input: export names it with summary's words, exits 1, and
    writes exactly what it writes without the damage."""
    from profdsl.manifest import read_manifest
    from tests.test_cli_bad_input import damage_record, damage_trace

    folder = Path(shutil.copytree(pristine[0], tmp_path / "profiles"))
    records = read_manifest(folder)
    (damage_record if kind == "record" else damage_trace)(folder, case, records)
    assert profdsl._cli.main(["summary", str(folder), "--json"]) == 1
    summary = capsys.readouterr().err.replace("profdsl summary: ", "")
    assert (
        profdsl._cli.main(
            ["export", "--hta", str(folder), "--step", "1", "--stage", STAGE, "-o", str(tmp_path / "hta")]
        )
        == 1
    )
    got = capsys.readouterr()
    assert "Traceback" not in got.err and got.err.replace("profdsl export: ", "") == summary
    assert load(tmp_path / "hta" / hta_export.output_name(0)) == pristine[1]
