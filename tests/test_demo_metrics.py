"""The demo's always-on table (``profdsl._demo.metrics_table``)."""

from __future__ import annotations

from profdsl._demo.metrics_table import HEADERS, MetricsLog
from profdsl.metrics import StageTiming, StepTimings


def timings(role: str, rank: int, step: int, **stages: float) -> StepTimings:
    return StepTimings(
        role=role,
        rank=rank,
        step=step,
        wall_s=1.0,
        stages={path.replace("__", "/"): StageTiming(total_s=s, self_s=s, count=1) for path, s in stages.items()},
    )


def test_rows_add_up_over_steps_and_ranks() -> None:
    log = MetricsLog()
    for step in range(3):
        log.add(
            [
                timings("actor", 0, step, update_actor=0.010, update_actor__mini_batch=0.004),
                timings("actor", 1, step, update_actor=0.030),
                None,
            ]
        )
    log.add([timings("ref", 0, 1, compute_ref_log_prob=0.002)])
    rows = log.rows([("actor", "update_actor", 2, 12.5)])
    assert rows == [
        ["actor", "update_actor", "3", "2", "120.00", "20.00", "rank 1", "|", "2", "12.50"],
        ["actor", "update_actor/mini_batch", "3", "1", "12.00", "4.00", "rank 0", "|", "-", "-"],
        ["ref", "compute_ref_log_prob", "1", "1", "2.00", "2.00", "rank 0", "|", "-", "-"],
    ]
    lines = log.lines([])
    assert lines[0].split() == " ".join(HEADERS).split() and len(lines) == 5


def test_nothing_timed_prints_nothing() -> None:
    assert MetricsLog().lines([("actor", "update_actor", 1, 1.0)]) == []
