"""The device split where users look: ``plot --ledger`` draws it beside each step's wall-time
bar, and the demo's closing report names it (``docs/ledger.md``, "Device time on CUDA").

The metrics log lines carry ``ledger_device`` as the recorder writes it
(``profdsl._runtime.metrics_log``: ``StepTimings.ledger_device``, seconds per kind and
``outside``), the form ``tests/test_ledger_device.py`` makes with a fake CUDA device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl.analysis._ledger import load_ledger
from profdsl.collect.metrics_log import log_name
from profdsl.records import MetricsLine, to_json

#: Per rank and step of the actor: its wall ledger and its device split (s); the critic has none.
ACTOR = {
    (0, 1): ({"update": 0.004, "outside": 0.006}, {"update": 0.006, "outside": 0.002}),
    (1, 1): ({"update": 0.005, "outside": 0.005}, {"update": 0.008, "outside": 0.0}),
    (0, 2): ({"update": 0.004, "outside": 0.006}, {"update": 0.003, "outside": 0.001}),
    (1, 2): ({"update": 0.004, "outside": 0.006}, None),
}


@pytest.fixture
def logged(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    for rank in (0, 1):
        with open(folder / log_name(rank, "h", 10 + rank), "w") as file:
            for step in (1, 2):
                ledger, device = ACTOR[(rank, step)]
                lines = [
                    MetricsLine(role="actor", rank=rank, world_size=2, step=step, wall_s=0.01, stages={},
                                ledger=ledger, ledger_device=device, began_s=100.0 + step),
                    MetricsLine(role="critic", rank=rank, world_size=2, step=step, wall_s=0.01, stages={},
                                ledger={"update": 0.002, "outside": 0.008}, began_s=100.0 + step),
                ]  # fmt: skip
                for line in lines:
                    file.write(json.dumps(to_json(line)) + "\n")
    return folder


def test_device_bars_are_the_mean_of_the_ranks_with_a_device_split(logged: Path) -> None:
    from profdsl._cli.ledger_plot import device_bars

    bars = device_bars(load_ledger(str(logged), [], []))
    assert set(bars) == {("actor", 1), ("actor", 2)}  # the critic has none
    assert bars[("actor", 1)]["update"] == pytest.approx(7.0) and bars[("actor", 1)]["outside"] == pytest.approx(1.0)
    assert bars[("actor", 2)]["update"] == pytest.approx(3.0) and bars[("actor", 2)]["outside"] == pytest.approx(1.0)


def test_plot_ledger_draws_a_thin_device_bar_beside_each_step_that_has_one(logged: Path, tmp_path: Path) -> None:
    """The actor's panel has a hatched bar per step stacking its device time per kind and
    outside; the critic's has none; the legend names the device bar; the PNG is written."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from profdsl._cli.ledger_plot import DEVICE_WIDTH, ledger_figure

    figure = ledger_figure(load_ledger(str(logged), [], []), "run")
    assert figure is not None
    actor, critic = figure.axes
    thin = [p for p in actor.patches if abs(p.get_width() - DEVICE_WIDTH) < 1e-9 and p.get_hatch()]
    heights = sorted((round(p.get_x(), 3), round(p.get_y(), 3), round(p.get_height(), 3)) for p in thin)
    # step 1 at x 0 (update 7 ms, outside 1 ms on it), step 2 at x 1 (update 3, outside 1)
    assert heights == [(0.15, 0.0, 7.0), (0.15, 7.0, 1.0), (1.15, 0.0, 3.0), (1.15, 3.0, 1.0)]
    assert not [p for p in critic.patches if p.get_hatch()]
    assert "device time (thin bar)" in [t.get_text() for t in figure.legends[0].get_texts()]
    assert "hatched" in actor.get_title(loc="left") and "hatched" not in critic.get_title(loc="left")
    out = tmp_path / "ledger.png"
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(logged), "-o", str(out), "--ledger"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _timings(rank: int, step: int, device: dict[str, float] | None) -> Any:
    from profdsl.metrics import StepTimings

    ledger = {"generation": 0.02, "update": 0.01, "overhead": 0.0, "outside": 0.01}
    return StepTimings(role="actor", rank=rank, step=step, wall_s=0.04, ledger=ledger, ledger_device=device)


def test_the_demos_report_names_the_device_split_when_the_steps_have_one() -> None:
    """The closing report's ledger, from step timings as the demo's metrics log reads them: with a
    device split, a table under the wall-time one of each step's device span, per kind, outside
    and its share (the mean over the ranks with one); on CPU (none), no such lines."""
    from profdsl._demo.ledger_table import DEVICE_TITLE, ledger_lines

    cpu = [_timings(0, 1, None), _timings(1, 1, None)]
    plain = ledger_lines(cpu)
    assert plain and not [line for line in plain if "device" in line]
    cuda = [
        _timings(0, 1, {"generation": 0.018, "update": 0.03, "outside": 0.012}),
        _timings(1, 1, {"generation": 0.022, "update": 0.03, "outside": 0.008}),
        _timings(0, 2, {"generation": 0.02, "update": 0.02, "outside": 0.0}),
        _timings(1, 2, None),
    ]
    lines = ledger_lines(cuda)
    assert lines[: len(plain[:2])] == plain[:2]  # the wall-time table comes first, as on CPU
    at = lines.index(f"{DEVICE_TITLE}:")
    header, _, one, two = lines[at + 1 : at + 5]
    assert header.split() == ["step", "role", "ranks", "span", "ms", "generation", "ms", "update", "ms", "outside",
                              "ms", "outside", "%"]  # fmt: skip
    assert one.split() == ["1", "actor", "2", "60.00", "20.00", "30.00", "10.00", "16.7"]
    assert two.split() == ["2", "actor", "1", "40.00", "20.00", "20.00", "0.00", "0.0"]
