"""``profdsl plot``: pictures of a folder written by the real runtime, checked pixel-wise, and the
per-stage aggregation checked against an independent recount (plain gzip + json)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
matplotlib = pytest.importorskip("matplotlib")
np = pytest.importorskip("numpy")

import profdsl._cli  # noqa: E402
from profdsl._cli import plot  # noqa: E402
from profdsl.analysis._catalog import catalog  # noqa: E402
from profdsl.analysis._load import load_model  # noqa: E402
from profdsl.analysis._model import Span, StageModel  # noqa: E402
from profdsl.analysis._regions import ENGINE_STAGE  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STAGES = ("update_actor", "compute_log_prob")


def _profile(folder: Path) -> None:
    from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage

    cfg = ProfilerConfig(
        enable=True,
        steps=[1, 2],
        all_ranks=True,
        discrete=True,
        save_path=str(folder),
        torch=TorchOptions(contents=["cpu"]),
    )
    for rank in (0, 1):
        with Profiler(cfg, role="actor", rank=rank, world_size=2) as p:
            for step in (1, 2):
                with p.step(step):
                    with profile_stage("update_actor"):
                        torch.ones(64, 64).mm(torch.ones(64, 64))
                    with profile_stage("compute_log_prob"):
                        torch.ones(8).sum()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of discrete traces: actor ranks 0 and 1, steps 1 and 2, two stages each."""
    from profdsl.testing import reset as reset_for_tests

    folder = tmp_path_factory.mktemp("profiles")
    reset_for_tests()
    try:
        _profile(folder)
    finally:
        reset_for_tests()
    assert len(list(folder.glob("*.json.gz"))) == 8
    return folder


@pytest.fixture
def folder(profiled: Path, tmp_path: Path) -> Path:
    """A private copy of the profiled folder, free to damage."""
    return Path(shutil.copytree(profiled, tmp_path / "run"))


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as file:
        return json.load(file)  # type: ignore[no-any-return]


def _image(path: Path) -> Any:
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return matplotlib.image.imread(str(path))


def _assert_picture(path: Path) -> Any:
    image = _image(path)
    height, width = image.shape[:2]
    assert height > 200 and width > 400
    colours = np.unique(image[..., :3].reshape(-1, 3), axis=0)
    assert len(colours) > 2, "a blank image"
    return image


# --- the two views ----------------------------------------------------------------------------


def test_default_view_draws_stacked_bars(profiled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The PNG is written; the figure behind it has one stacked segment per (bar, stage), each
    as tall as the model's total, in the stage's colour (colours go by stage name)."""
    out = tmp_path / "stages.png"
    assert profdsl._cli.main(["plot", str(profiled), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    _assert_picture(out)
    model = _model(profiled)
    bars = plot.bar_totals(model)
    axes = plot._bars_figure(model, "t", (), 1).axes[0]
    tab10 = matplotlib.colormaps["tab10"]
    colour = {"compute_log_prob": tab10(0), "update_actor": tab10(1)}
    drawn: dict[str, list[float]] = {}
    for container, label in zip(axes.containers, [t.get_text() for t in axes.get_legend().get_texts()][::-1]):
        drawn[label] = [patch.get_height() for patch in container]
        assert all(patch.get_facecolor() == pytest.approx(colour[label]) for patch in container)
    keys = sorted(bars, key=lambda k: (k[0], k[2], k[1]))
    assert sorted(drawn) == sorted(STAGES)
    for stage in STAGES:
        assert drawn[stage] == pytest.approx([bars[key][stage] for key in keys], rel=1e-9)


def test_timeline_draws_one_row_per_rank(profiled: Path, tmp_path: Path) -> None:
    """The PNG is written; the figure has one row per rank and, in it, one bar per outermost
    region of that rank, where the model puts it (ms since the first region)."""
    out = tmp_path / "timeline.png"
    assert profdsl._cli.main(["plot", str(profiled), "-o", str(out), "--timeline"]) == 0
    _assert_picture(out)
    model = _model(profiled)
    rows = plot.timeline_rows(model)
    axes = plot._timeline_figure(model, "t", 1).axes[0]
    assert [t.get_text() for t in axes.get_yticklabels()] == ["actor rank0", "actor rank1"]
    origin = min(span.start_us for spans in rows.values() for span in spans)
    drawn = sorted(
        (round(x, 9), round(w, 9))
        for collection in axes.collections
        for path in collection.get_paths()
        for x, w in [_bar_extent(path)]
    )
    want = sorted(
        (round((s.start_us - origin) / 1000, 9), round((s.end_us - s.start_us) / 1000, 9))
        for spans in rows.values()
        for s in spans
    )
    assert len(drawn) == len(want) == 8
    for (x, width), (want_x, want_width) in zip(drawn, want):
        assert x == pytest.approx(want_x, abs=1e-6) and width == pytest.approx(want_width, abs=1e-6)


def _bar_extent(path: Any) -> tuple[float, float]:
    xs = path.vertices[:, 0]
    return float(xs.min()), float(xs.max() - xs.min())


def test_dpi_sets_the_resolution(profiled: Path, tmp_path: Path) -> None:
    small, large = tmp_path / "small.png", tmp_path / "large.png"
    assert profdsl._cli.main(["plot", str(profiled), "-o", str(small), "--dpi", "50"]) == 0
    assert profdsl._cli.main(["plot", str(profiled), "-o", str(large), "--dpi", "100"]) == 0
    assert _image(large).shape[1] > 1.5 * _image(small).shape[1]


@pytest.mark.slow
def test_runs_headless_in_a_fresh_process(profiled: Path, tmp_path: Path) -> None:
    out = tmp_path / "sub.png"
    code = (
        "import profdsl._cli as c; "
        f"raise SystemExit(c.main(['plot', {str(profiled)!r}, '-o', {str(out)!r}, '--timeline']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "MPLBACKEND": "TkAgg", "DISPLAY": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    _assert_picture(out)


# --- the numbers behind the pictures ----------------------------------------------------------


def _model(folder: Path) -> StageModel:
    return load_model(folder, catalog(folder).artifacts, [])


def test_bars_are_each_ranks_step_with_its_stages_recounted(profiled: Path) -> None:
    """One bar per (role, rank, step); each segment is the stage's own region, recounted from
    the raw events of that rank's and step's trace of the stage."""
    bars = plot.bar_totals(_model(profiled))
    assert sorted(bars) == [("actor", rank, step) for rank in (0, 1) for step in (1, 2)]
    for (_role, rank, step), stages in bars.items():
        assert set(stages) == set(STAGES)
        for stage in STAGES:
            slug = stage.replace("_", "-")
            (trace,) = [_load(p) for p in profiled.glob(f"actor.{slug}_step{step:06d}_rank{rank}-of-2_*.json.gz")]
            (own,) = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == stage]
            assert stages[stage] == pytest.approx(own["dur"] / 1000, rel=1e-12)
            assert stages[stage] > 0


def test_timeline_regions_are_in_wall_clock_microseconds(profiled: Path) -> None:
    rows = plot.timeline_rows(_model(profiled))
    assert sorted(rows) == ["actor rank0", "actor rank1"]
    path = sorted(profiled.glob("actor.update-actor_step000001_rank0-*.json.gz"))[0]
    trace = _load(path)
    base = trace["baseTimeNanoseconds"] / 1000
    (own,) = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "update_actor"]
    assert (
        Span("update_actor", pytest.approx(base + own["ts"]), pytest.approx(base + own["ts"] + own["dur"]))
        in rows["actor rank0"]
    )
    assert len(rows["actor rank0"]) == 4  # two stages in each of two steps, nothing nested


def _write_trace(path: Path, spans: list[tuple[str, float, float]], header: dict[str, Any] | None = None) -> None:
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0, "args": {"name": "engine"}}]
    events += [{"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur} for name, ts, dur in spans]
    with gzip.open(path, "wt") as file:
        json.dump({**(header or {}), "schemaVersion": 1, "traceEvents": events}, file)


def test_an_engine_trace_counts_as_its_span(tmp_path: Path) -> None:
    _write_trace(
        tmp_path / "rollout_step000001_rank0-of-1_replica0_h_pid1_20260101T000000000.pt.trace.json.gz",
        [("op0", 100.0, 50.0), ("op1", 120.0, 400.0), ("op2", 90.0, 5.0)],
    )
    model = _model(tmp_path)
    assert plot.bar_totals(model) == {("rollout", 0, 1): {ENGINE_STAGE: pytest.approx((520.0 - 90.0) / 1000)}}
    assert plot.timeline_rows(model) == {"rollout replica0 rank0": [Span(ENGINE_STAGE, 90.0, 520.0)]}


def test_only_outermost_regions_are_drawn(tmp_path: Path) -> None:
    meta = {
        "profdsl": {
            "role": "actor",
            "stage": None,
            "regions": {"stages": ["inner", "outer", "next"], "mini_batches": []},
        }
    }
    _write_trace(
        tmp_path / "actor_step000001_rank0-of-1_h_pid1_20260101T000000000.pt.trace.json.gz",
        [("inner", 20.0, 10.0), ("outer", 10.0, 40.0), ("next", 60.0, 10.0)],
        meta,
    )
    model = _model(tmp_path)
    assert plot.timeline_rows(model) == {"actor rank0": [Span("outer", 10.0, 50.0), Span("next", 60.0, 70.0)]}
    assert plot.bar_totals(model) == {("actor", 0, 1): {"outer": 40e-3, "next": 10e-3}}


# --- failures ---------------------------------------------------------------------------------


def test_a_missing_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert profdsl._cli.main(["plot", str(missing), "-o", str(tmp_path / "x.png")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_an_empty_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert profdsl._cli.main(["plot", str(tmp_path / "empty"), "-o", str(tmp_path / "x.png")]) == 2
    assert "no profdsl manifest" in capsys.readouterr().err


def test_an_unreadable_trace_is_named_and_the_rest_drawn(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = sorted(folder.glob("actor.update-actor_step000002_rank1-*.json.gz"))[0]
    broken.write_bytes(b"not a gzip file")
    out = tmp_path / "partial.png"
    assert profdsl._cli.main(["plot", str(folder), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert broken.name in err
    assert err.count(".json.gz") == 1
    _assert_picture(out)


def test_an_unwritable_output_is_a_usage_error(
    profiled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no" / "such" / "dir.png"
    assert profdsl._cli.main(["plot", str(profiled), "-o", str(out)]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_without_matplotlib_it_says_what_to_install(
    profiled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert profdsl._cli.main(["plot", str(profiled), "-o", str(tmp_path / "x.png")]) == 2
    assert "pip install profdsl[plot]" in capsys.readouterr().err


def test_output_is_required(profiled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        profdsl._cli.main(["plot", str(profiled)])
    assert exit_info.value.code == 2
    assert "--output" in capsys.readouterr().err


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        profdsl._cli.main(["plot", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "profdsl plot profiles -o stages.png" in out
    assert "--timeline" in out


def test_importing_profdsl_does_not_import_matplotlib() -> None:
    code = (
        "import sys, profdsl, profdsl._cli, profdsl._cli.plot; "
        "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# --- nesting and steps ------------------------------------------------------------------------


def _profile_nested(folder: Path) -> None:
    """A trainer-like role: one continuous trace per step holding one outermost stage, with two
    stages nested in it (generation and the update of a TRL step)."""
    from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage

    cfg = ProfilerConfig(
        enable=True, steps=[1, 2, 3], ranks=[0], save_path=str(folder), torch=TorchOptions(contents=["cpu"])
    )
    with Profiler(cfg, role="trainer", rank=0, world_size=1) as p:
        for step in (1, 2, 3):
            with p.step(step):
                with profile_stage("train_step"):
                    with profile_stage("generate"):
                        torch.ones(96, 96).mm(torch.ones(96, 96))
                    with profile_stage("update"):
                        torch.ones(64, 64).mm(torch.ones(64, 64))


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from profdsl.testing import reset as reset_for_tests

    folder = tmp_path_factory.mktemp("nested")
    reset_for_tests()
    try:
        _profile_nested(folder)
    finally:
        reset_for_tests()
    return folder


def _legend_texts(figure: Any) -> list[str]:
    return [t.get_text() for t in figure.axes[0].get_legend().get_texts()]


def _figure_of(argv: list[str]) -> Any:
    """The figure ``profdsl plot ARGV`` draws (the command's own parser and defaults)."""
    args = profdsl._cli.build_parser().parse_args(["plot", *argv])
    return plot.build_figure(_model(Path(args.folder)), args)


def test_one_stage_per_step_is_opened_a_level_by_default(nested: Path, tmp_path: Path) -> None:
    """Each step of the role has one outermost stage: by default the bars show what ran inside
    it (its nested stages and its own self time), and the segments still add up to the stage."""
    out = tmp_path / "stages.png"
    assert profdsl._cli.main(["plot", str(nested), "-o", str(out)]) == 0
    _assert_picture(out)
    figure = _figure_of([str(nested), "-o", str(out)])
    assert set(_legend_texts(figure)) == {"train_step/generate", "train_step/update", "train_step (self)"}
    rows = {(r.step, r.path): r for r in _model(nested).nodes}
    bars = plot.bar_totals(_model(nested), None)
    for (_role, _rank, step), segments in bars.items():
        assert sum(segments.values()) == pytest.approx(rows[(step, ("train_step",))].total_us / 1000, rel=1e-9)
        assert segments["train_step/generate"] == pytest.approx(
            rows[(step, ("train_step", "generate"))].total_us / 1000
        )
    one = _figure_of([str(nested), "-o", str(out), "--depth", "1"])
    assert _legend_texts(one) == ["train_step"]


def test_depth_on_the_timeline_draws_nested_regions(nested: Path, tmp_path: Path) -> None:
    """--depth 2 --timeline draws the nested regions inside their parent (one bar per region up
    to that depth); --depth 1 only the outermost."""
    out = tmp_path / "timeline.png"
    assert profdsl._cli.main(["plot", str(nested), "-o", str(out), "--timeline", "--depth", "2"]) == 0
    _assert_picture(out)
    deep = _figure_of([str(nested), "-o", str(out), "--timeline", "--depth", "2"])
    shallow = _figure_of([str(nested), "-o", str(out), "--timeline", "--depth", "1"])

    def bars(figure: Any) -> int:
        return sum(len(c.get_paths()) for c in figure.axes[0].collections)

    assert bars(shallow) == 3 and bars(deep) == 9
    assert set(_legend_texts(deep)) == {"train_step", "train_step/generate", "train_step/update"}


def test_the_timeline_labels_each_step(nested: Path, tmp_path: Path) -> None:
    """The timeline names each profiled step above the region it spans."""
    out = tmp_path / "timeline.png"
    figure = _figure_of([str(nested), "-o", str(out), "--timeline"])
    texts = {t.get_text() for axes in figure.axes for t in axes.texts}
    ticks = {t.get_text() for axes in figure.axes for t in axes.get_xticklabels()}
    assert {"step 1", "step 2", "step 3"} <= texts | ticks


def test_the_timeline_marks_each_steps_whole_span(nested: Path, tmp_path: Path) -> None:
    """Every profiled step's span is shaded, from its first region's start to its last one's end,
    and a line marks both ends: a step is never drawn as lasting until the next profiled one (on
    the demo's timeline step 3 seemed to run through the unprofiled steps 4 and 5)."""
    model = _model(nested)
    figure = _figure_of([str(nested), "-o", str(tmp_path / "t.png"), "--timeline"])
    axes = figure.axes[0]
    origin = min(span.start_us for _, spans in model.spans() for span in spans)
    want = sorted(((a - origin) / 1000, (b - origin) / 1000) for a, b in plot.step_extents(model).values())
    shaded = sorted((p.get_x(), p.get_x() + p.get_width()) for p in axes.patches)  # axvspan's rectangles
    assert shaded == [pytest.approx(span) for span in want]
    lines = sorted(line.get_xdata()[0] for line in axes.get_lines())
    assert lines == pytest.approx(sorted(x for span in want for x in span))


def test_depth_must_be_positive(nested: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        profdsl._cli.main(["plot", str(nested), "-o", str(tmp_path / "x.png"), "--depth", "0"])
    assert exit_info.value.code == 2
