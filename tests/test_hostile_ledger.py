"""A hostile round against the newest readers: the step ledger (``summary --ledger``), the culprit
analysis (``summary --stragglers``) and the cost table (``summary --cost``), fed files an attacker
who can write into ``save_path`` would write. Each command must end (0 or 1, no traceback), print
no control character from its input, write JSON without NaN or Infinity, and print a number only
when it is right (absent otherwise)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profdsl.collect._manifest import append_record, make_record
from profdsl.collect.metrics_log import log_name

ROOT = Path(__file__).resolve().parent.parent
BASE_NS = 1_790_000_000_000_000_000
HUGE = 1e300  # finite, and a valid number to the schema; its nanoseconds overflow a float
ESC = "\x1b[2J"


def _summary(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON: NaN, Infinity and -Infinity refused."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def _ends_well(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "\x1b" not in done.stdout + done.stderr, done.stdout


def _log(folder: Path, *lines: dict[str, Any]) -> None:
    with open(folder / log_name(0, "h", 1), "w") as file:
        for line in lines:
            file.write(json.dumps(line) + "\n")


def _line(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "role": "actor",
        "step": 1,
        "rank": 0,
        "stages": {},
        "wall_s": 1.0,
        "began_s": 1.79e9,
        "ledger": {"update": 0.5, "outside": 0.5},
        "ledger_spans": {"update": [[0.0, 0.5]]},
    }
    return {**base, **fields}


def _trace(folder: Path, name: str, rank: int, events: list[tuple[str, int, float, float]], **meta: Any) -> None:
    """A trace of ``(name, tid, ts, dur)`` complete events and its record (``meta``: the
    metadata's and the record's role and stage, and the record's fields)."""
    role, stage, stages = meta.pop("role", "actor"), meta.pop("stage", None), meta.pop("stages", ["update_actor"])
    trace = {
        "profdsl": {
            "role": role,
            "stage": stage,
            "step": 1,
            "rank": rank,
            "world_size": 3,
            "regions": {"stages": stages},
        },
        "distributedInfo": {"rank": rank, "world_size": 3},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
            for n, tid, ts, dur in events
        ],
    }
    with gzip.open(folder / name, "wt") as file:
        json.dump(trace, file)
    record = make_record(
        "trace",
        name,
        role=role,
        stage=stage,
        step=1,
        rank=rank,
        world_size=3,
        bytes=(folder / name).stat().st_size,
        **meta,
    )
    assert append_record(folder, record)


# --- the ledger from the metrics log: numbers whose nanoseconds do not fit -------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"wall_s": HUGE, "ledger": {"update": HUGE}},
        {"ledger": {"update": HUGE}},
        {"ledger_beside": {"update": HUGE}},
        {"ledger_spans": {"update": [[0.0, HUGE]]}},
        {"ledger_device": {"update": HUGE}},
    ],
    ids=["wall", "bucket", "beside", "spans", "device"],
)
def test_a_metrics_line_with_times_beyond_any_clock_gets_no_ledger(tmp_path: Path, fields: dict[str, Any]) -> None:
    _log(tmp_path, _line(**fields), _line(rank=1))
    for extra in ([], ["--json"]):
        _ends_well(done := _summary(tmp_path, "--ledger", *extra))
    data = _strict_json(done.stdout)
    by_rank = {r["rank"]: r for r in data["metrics"]["ranks"]}
    assert by_rank[1]["buckets_ms"]["update"] == 500.0  # the sound line is kept
    if "ledger_device" in fields:
        assert by_rank[0]["device_ms"] is None and by_rank[0]["buckets_ms"]["update"] == 500.0
    else:
        assert by_rank[0]["buckets_ms"] is None and "beyond" in by_rank[0]["why"]


@pytest.mark.parametrize("buckets", [{"update": 5.0}, {"update": 0.25}, {"update": 0.5, "outside": 0.5, "other": 0.5}])
def test_a_metrics_ledger_whose_buckets_do_not_add_up_to_its_wall_time_is_not_shown(
    tmp_path: Path, buckets: dict[str, float]
) -> None:
    """The view says its columns add up to the wall time: a line whose buckets do not is not shown as a ledger."""
    _log(tmp_path, _line(ledger=buckets), _line(rank=1, wall_s=0.3, ledger={"update": 0.1, "outside": 0.2}))
    for extra in ([], ["--json"]):
        _ends_well(done := _summary(tmp_path, "--ledger", *extra))
    by_rank = {r["rank"]: r for r in _strict_json(done.stdout)["metrics"]["ranks"]}
    assert by_rank[1]["buckets_ms"] == {**by_rank[1]["buckets_ms"], "update": 100.0, "outside": 200.0}
    assert by_rank[0]["buckets_ms"] is None and "add up" in by_rank[0]["why"]


def test_a_step_that_began_beyond_any_clock_is_not_placed(tmp_path: Path) -> None:
    _log(tmp_path, _line(began_s=HUGE), _line(rank=1))
    for extra in ([], ["--json"]):
        _ends_well(done := _summary(tmp_path, "--ledger", *extra))
    by_rank = {r["rank"]: r for r in _strict_json(done.stdout)["metrics"]["ranks"]}
    assert by_rank[1]["buckets_ms"]["update"] == 500.0 and by_rank[0]["buckets_ms"] is None


# --- the ledger from the traces: a wall time or a recorded wait beyond any clock ---------------------


def _traced(folder: Path, wall_s: float, blocked_ms: float) -> None:
    for copy in range(2):  # two records of one rank: their waits add up
        _trace(
            folder, f"a{copy}.pt.trace.json.gz", 0, [("update_actor", 1, 200, 400)],
            stage="update_actor", blocked_ms=blocked_ms,
        )  # fmt: skip
    _log(folder, {"role": "actor", "step": 1, "rank": 0, "stages": {}, "wall_s": wall_s})


@pytest.mark.parametrize(("wall_s", "blocked_ms"), [(HUGE, 0.1), (0.001, 1e308)], ids=["wall", "blocked"])
def test_a_traced_step_with_times_beyond_any_clock_gets_no_ledger(
    tmp_path: Path, wall_s: float, blocked_ms: float
) -> None:
    _traced(tmp_path, wall_s, blocked_ms)
    for extra in ([], ["--json"]):
        _ends_well(done := _summary(tmp_path, "--ledger", *extra))
    (rank,) = _strict_json(done.stdout)["ranks"]
    assert rank["buckets_ms"] is None and "beyond" in rank["why"]


@pytest.mark.parametrize("wall_s", [1e308, HUGE], ids=["inf in us", "beyond any clock"])
def test_the_stage_view_shows_no_step_time_beyond_any_clock(tmp_path: Path, wall_s: float) -> None:
    """A metrics log's wall_s beyond any clock (finite, and valid to the schema) is no step time:
    the plain view, ``--by`` and its CSV and JSON leave it out (the stages' time stands for the
    step, as where no log has one) and name the line on stderr; never inf, Infinity or a 300-digit number."""
    _traced(tmp_path, wall_s, 0.1)
    for extra in ([], ["--by", "step,rank"], ["--by", "step,rank", "--csv"]):
        done = _summary(tmp_path, *extra)
        _ends_well(done)
        assert "inf" not in done.stdout and "(step)" not in done.stdout, done.stdout
        assert not re.search(r"\d{20}", done.stdout), done.stdout
        assert done.returncode == 1 and "beyond any clock" in done.stderr and "line 1" in done.stderr
    done = _summary(tmp_path, "--by", "step,rank", "--json")
    (row,) = _strict_json(done.stdout)
    assert row["step_ms"] == row["total_ms"] == 0.8 and row["share"] == 1.0


def test_cost_sums_that_overflow_are_absent_not_infinity(tmp_path: Path) -> None:
    _traced(tmp_path, 0.001, 1e308)  # each finite, as the schema asks; their sum is not
    _ends_well(done := _summary(tmp_path, "--cost", "--json"))
    (step,) = _strict_json(done.stdout)
    assert step["blocked_ms"] is None and step["max_blocked_ms"] is None and step["ranks"][0]["blocked_ms"] is None
    _ends_well(text := _summary(tmp_path, "--cost"))
    assert "inf" not in text.stdout


# --- text from the files is escaped ---------------------------------------------------------------


def test_ledger_text_escapes_roles_reasons_and_bucket_names(tmp_path: Path) -> None:
    _log(
        tmp_path,
        _line(role=f"ac{ESC}tor\nfake line"),
        _line(rank=1, ledger={f"up{ESC}date\nx": 0.5, "outside": 0.5}),
        _line(rank=2, ledger=None, ledger_why=f"why{ESC}\nstep 9"),
    )
    done = _summary(tmp_path, "--ledger")
    _ends_well(done)
    assert "\\x1b[2J" in done.stdout and "\nfake line" not in done.stdout and "\nstep 9" not in done.stdout


def test_stragglers_text_escapes_roles_stages_and_op_names(tmp_path: Path) -> None:
    stage = f"upd{ESC}ate\nfake"
    for rank, wait in enumerate((5, 500, 500)):
        events = [(stage, 1, 0, 1000), ("gloo:all_reduce", 9, 10, wait)]
        events += [(f"gloo:{ESC}x\nline" if rank == 2 else "gloo:barrier", 9, 600, 5)]
        _trace(tmp_path, f"r{rank}.pt.trace.json.gz", rank, events, role=f"ac{ESC}tor", stages=[stage])
    done = _summary(tmp_path, "--stragglers", "--late-ms", "0.1")
    _ends_well(done)
    assert "arrived last" in done.stdout and "differ at the 2nd" in done.stdout
    assert "\nfake" not in done.stdout and "\nline" not in done.stdout


@pytest.mark.parametrize("late", ["inf", "nan", "-1"])
def test_late_ms_must_be_a_finite_number(tmp_path: Path, late: str) -> None:
    for rank, wait in enumerate((5, 500, 500)):
        _trace(
            tmp_path,
            f"r{rank}.pt.trace.json.gz",
            rank,
            [("update_actor", 1, 0, 1000), ("gloo:all_reduce", 9, 10, wait)],
        )
    done = _summary(tmp_path, "--stragglers", "--late-ms", late, "--json")
    assert done.returncode == 2 and "--late-ms must be" in done.stderr and done.stdout == ""


def test_the_follow_up_lines_a_driver_logs_are_escaped(tmp_path: Path) -> None:
    """The Ray driver logs ``follow_up``'s lines (a capture's culprit): role and stage come from the files."""
    from profdsl.analysis.culprits import follow_up

    stage = f"upd{ESC}ate\nfake"
    for rank, wait in enumerate((5, 500, 500)):
        _trace(
            tmp_path, f"r{rank}.pt.trace.json.gz", rank, [(stage, 1, 0, 1000), ("gloo:all_reduce", 9, 10, wait)],
            role=f"ac{ESC}tor", stages=[stage],
        )  # fmt: skip
    (line,) = follow_up(tmp_path, 1, threshold_ms=0.1)
    assert "names the culprit" in line and "rank 0" in line
    assert "\x1b" not in line and "\n" not in line


def test_diff_late_ms_must_be_a_finite_number(tmp_path: Path) -> None:
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        for rank, wait in enumerate((5, 500, 500)):
            events = [("update_actor", 1, 0, 1000), ("gloo:all_reduce", 9, 10, wait)]
            _trace(tmp_path / run, f"r{rank}.pt.trace.json.gz", rank, events, stage="update_actor")
    argv = [sys.executable, "-m", "profdsl", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]
    done = subprocess.run([*argv, "--late-ms", "0.1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and _strict_json(done.stdout)["culprits"]["a"]["blamed"], done.stderr
    done = subprocess.run([*argv, "--late-ms", "inf"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2 and "--late-ms must be" in done.stderr and done.stdout == ""


# --- kind=: only the kinds themselves ----------------------------------------------------------------


class _EqualsAnything:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class _StrEqualsAnything(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


@pytest.mark.parametrize("kind", [_EqualsAnything(), _StrEqualsAnything("made up")], ids=["object", "str"])
def test_a_kind_that_claims_to_equal_every_kind_is_refused(kind: object) -> None:
    """A value equal to everything is no kind: it would become a bucket and a label of its own."""
    from profdsl import profile_stage
    from profdsl.errors import ConfigError

    with pytest.raises(ConfigError, match="profile_stage kind must be one of"):
        profile_stage("x", kind=kind)  # type: ignore[arg-type]


def test_a_kind_given_as_a_str_enum_is_its_plain_name() -> None:
    import enum

    from profdsl import profile_stage

    class Kind(enum.StrEnum):
        UPDATE = "update"

    stage = profile_stage("x", kind=Kind.UPDATE)  # type: ignore[arg-type]
    assert stage.kind == "update" and type(stage.kind) is str


# --- plot --ledger ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        _line(wall_s=0.0, ledger={"update": 0.0}, ledger_spans={"update": [[0.0, 0.0]]}),
        _line(role="$\\frac{$"),
        _line(role=f"ac{ESC}tor"),
    ],
    ids=["zero wall", "math", "escape"],
)
def test_plot_ledger_draws_a_zero_step_and_any_role(tmp_path: Path, line: dict[str, Any]) -> None:
    (tmp_path / "in").mkdir()
    _log(tmp_path / "in", line)
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(tmp_path / "in"), "--ledger", "-o", str(tmp_path / "l.png")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0 and (tmp_path / "l.png").stat().st_size > 0, done.stderr[-2000:]
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr


def test_plot_ledger_draws_buckets_it_does_not_know_and_says_so(tmp_path: Path) -> None:
    """A bucket the files name that this profdsl does not know still adds up to the wall time:
    its bar part is drawn (as ``unknown``) and the command names it, escaped."""
    from profdsl._cli.ledger_plot import UNKNOWN, ledger_bars
    from profdsl.analysis._ledger import load_ledger

    (tmp_path / "in").mkdir()
    odd = f"made{ESC}up"
    _log(tmp_path / "in", _line(ledger={"update": 0.25, odd: 0.25, "outside": 0.5}), _line(rank=1))
    ((role, step, _, means),) = ledger_bars(load_ledger(str(tmp_path / "in"), [], []))
    assert (role, step) == ("actor", 1) and means[UNKNOWN] == 125.0  # the mean of 250 ms and 0 ms
    assert sum(means.values()) == 1000.0  # the bar adds up to the step's wall time, as its title says
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "plot", str(tmp_path / "in"), "--ledger", "-o", str(tmp_path / "l.png")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0 and (tmp_path / "l.png").stat().st_size > 0, done.stderr[-2000:]
    assert "made\\x1b[2Jup" in done.stderr and UNKNOWN in done.stderr and "\x1b" not in done.stderr
