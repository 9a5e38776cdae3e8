"""``summary --by`` and ``plot --by`` group by the parallel coordinates the traces carry:
a rank's coordinates come from its traces' manifest records."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from profdsl import Profiler, profile_stage
from profdsl.analysis._catalog import catalog
from profdsl.analysis._load import load_model

from .profiling import config, work

#: Left out of the quick pass (python -m pytest -m "not slow"): each test runs the command line in
#: subprocesses; see setup.cfg.
pytestmark = pytest.mark.slow
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four ranks as tp x pp = 2 x 2 (tp fastest), two steps, one stage each."""
    from profdsl.testing import reset as reset_for_tests

    out = tmp_path_factory.mktemp("tp-pp")
    reset_for_tests()
    try:
        cfg = config(out, steps=[1, 2], all_ranks=True, discrete=True)
        for rank in range(4):
            with Profiler(
                cfg, role="actor", rank=rank, world_size=4, parallel={"tp": rank % 2, "pp": rank // 2, "dp": 0}
            ) as profiler:
                for step in (1, 2):
                    with profiler.step(step), profile_stage("update_actor"):
                        work()
    finally:
        reset_for_tests()
    return out


def test_summary_groups_by_tp(folder: Path) -> None:
    def summary(*args: str) -> list[dict[str, object]]:
        done = subprocess.run(
            [sys.executable, "-m", "profdsl", "summary", str(folder), *args, "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        rows: list[dict[str, object]] = json.loads(done.stdout)
        return rows

    per_rank = summary()
    assert {r["rank"]: r["parallel"] for r in per_rank} == {
        rank: {"tp": rank % 2, "pp": rank // 2, "dp": 0} for rank in range(4)
    }
    expected: dict[tuple[object, object], float] = defaultdict(float)
    for row in per_rank:
        expected[(row["stage"], row["parallel"]["tp"])] += row["total_ms"]  # type: ignore[index, operator]
    grouped = summary("--by", "stage,tp")
    assert {(r["stage"], r["tp"]): r["total_ms"] for r in grouped} == pytest.approx(dict(expected))
    assert {r["count"] for r in grouped} == {4}  # 2 ranks x 2 steps each
    text = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), "--by", "pp"],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert text.splitlines()[0].split()[:2] == ["pp", "count"]
    csv = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), "--csv"], capture_output=True, text=True, timeout=300
    ).stdout.splitlines()
    header = csv[0].split(",")
    first = dict(zip(header, csv[1].split(",")))
    at = header.index("tp")
    assert header[at : at + 5] == ["tp", "pp", "dp", "cp", "ep"] and (first["cp"], first["ep"]) == ("", "")


def test_plot_groups_and_labels_bars_by_coordinates(folder: Path, tmp_path: Path) -> None:
    from profdsl._cli import plot

    model = load_model(folder, catalog(folder).artifacts, [])
    groups = plot.bar_groups(model, ("pp", "tp"))
    assert groups[("actor", 3, 1)] == (("pp", 1), ("tp", 1))
    axes = plot._bars_figure(model, "t", ("pp", "tp"), 1).axes[0]
    labels = [t.get_text() for t in axes.get_xticklabels()]
    assert labels[:2] == ["pp0 tp0 r0 s1", "pp0 tp0 r0 s2"] and labels[-1] == "pp1 tp1 r3 s2"
    out = tmp_path / "by.png"
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(folder), "-o", str(out), "--by", "pp,tp"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and out.stat().st_size > 0, done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(folder), "-o", str(out), "--by", "zz"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "takes parallel coordinates from tp,pp,dp,cp,ep" in bad.stderr


def test_unknown_summary_key_names_the_coordinates(folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), "--by", "stage,zz"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "role,stage,step,rank,tp,pp,dp,cp,ep" in done.stderr
