"""Profiling's own cost: each trace record's ``blocked_ms`` (the training thread blocked by
the profiler session) and ``export_ms`` (the background export), summed per role and step by
``profdsl.analysis._cost`` and shown by ``profdsl summary`` and the demo's closing report.

Folders are written by hand: real trace files the real runtime wrote, copied under the records a
test needs, each record made with ``make_record`` / ``append_record`` and carrying the fields.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import profdsl._cli
from profdsl._cli.summary import ROW_FIELDS
from profdsl.analysis._catalog import RecordError, catalog, from_record
from profdsl.analysis._cost import step_costs
from profdsl.collect._manifest import MANIFEST_NAME, append_record, make_record, read_manifest
from profdsl.config._parallel import DIMS

pytest.importorskip("torch")


class Result(NamedTuple):
    code: int
    out: str
    err: str


def cli(*argv: str) -> Result:
    """``profdsl ARGV`` in-process, through the real entry point."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = profdsl._cli.main(list(argv))
    return Result(code, out.getvalue(), err.getvalue())


# --- the aggregation, against a hand-computed oracle -------------------------------------------

durations = st.none() | st.floats(min_value=0, max_value=1e6) | st.integers(min_value=0, max_value=10**6)
records = st.lists(
    st.tuples(
        st.sampled_from(["actor", "critic"]),
        st.sampled_from([0, 1, None]),
        st.sampled_from([0, 1, 2, None]),
        durations,
        durations,
        st.booleans(),
    ),
    max_size=12,
)


def _order(value: int | None) -> int:
    return -1 if value is None else value


@settings(deadline=None)
@given(records)
def test_aggregation_matches_a_hand_count(items: list[tuple[str, int | None, int | None, Any, Any, bool]]) -> None:
    """Per role and step: the traces that carry either field, the sums of each field over them
    (None when none carries it), per-rank sums, and the rank that was blocked longest."""
    rows = []
    for i, (role, step, rank, blocked, export, null_not_absent) in enumerate(items):
        fields = {k: v for k, v in (("blocked_ms", blocked), ("export_ms", export)) if v is not None or null_not_absent}
        rows.append(from_record(make_record("trace", f"t{i}.json.gz", role=role, step=step, rank=rank, **fields)))
    # the oracle: plain loops over the inputs
    traces: dict[Any, int] = defaultdict(int)
    blocked_sum: dict[Any, float] = {}
    export_sum: dict[Any, float] = {}
    per_rank: dict[Any, dict[int | None, float]] = defaultdict(dict)
    for role, step, rank, blocked, export, _ in items:
        if blocked is None and export is None:
            continue
        key = (role, step)
        traces[key] += 1
        if blocked is not None:
            blocked_sum[key] = blocked_sum.get(key, 0.0) + blocked
            per_rank[key][rank] = per_rank[key].get(rank, 0.0) + blocked
        if export is not None:
            export_sum[key] = export_sum.get(key, 0.0) + export
    got = step_costs(rows)
    assert [(c.role, c.step) for c in got] == sorted(traces, key=lambda k: (k[0], _order(k[1])))
    for cost in got:
        key = (cost.role, cost.step)
        assert cost.traces == traces[key]
        assert cost.blocked_ms == (None if key not in blocked_sum else pytest.approx(blocked_sum[key]))
        assert cost.export_ms == (None if key not in export_sum else pytest.approx(export_sum[key]))
        assert sum(r.traces for r in cost.ranks) == cost.traces
        if per_rank[key]:
            most = max(per_rank[key].values())
            assert cost.max_blocked_ms == pytest.approx(most)
            assert per_rank[key][cost.max_rank] == pytest.approx(most)
            assert {r.rank: r.blocked_ms for r in cost.ranks if r.blocked_ms is not None} == pytest.approx(
                per_rank[key]
            )
        else:
            assert cost.max_rank is None and cost.max_blocked_ms is None


def test_a_path_listed_twice_counts_once() -> None:
    """Like the trace readers, a path two records name is one trace (its first record)."""
    first = from_record(make_record("trace", "a.json.gz", role="actor", step=1, rank=0, blocked_ms=2.0))
    again = from_record(make_record("trace", "a.json.gz", role="actor", step=1, rank=0, blocked_ms=7.0))
    (cost,) = step_costs([first, again])
    assert (cost.traces, cost.blocked_ms) == (1, 2.0)


@pytest.mark.parametrize("field", ["blocked_ms", "export_ms"])
@pytest.mark.parametrize("value", ["abc", -1, -0.5, math.inf, math.nan, True, False, [1], {"a": 1}, 10**400])
def test_a_bad_duration_is_a_bad_record(field: str, value: Any) -> None:
    with pytest.raises(RecordError, match=field):
        from_record(make_record("trace", "a.json.gz", **{field: value}))


@pytest.mark.parametrize("value", [None, 0, 0.0, 3, 2.5, 1e300])
def test_a_good_duration_is_read(value: Any) -> None:
    artifact = from_record(make_record("trace", "a.json.gz", blocked_ms=value, export_ms=value))
    assert artifact.blocked_ms == artifact.export_ms == value
    assert value is None or type(artifact.blocked_ms) is float


# --- a folder: real traces, hand-written records ---------------------------------------------


def write_traces(folder: Path) -> list[Path]:
    """Two discrete traces of one rank and step, written by the real runtime."""
    import torch

    from profdsl import Profiler, ProfilerConfig, TorchOptions, profile_stage
    from profdsl.testing import reset as reset_for_tests

    cfg = ProfilerConfig(
        enable=True, steps=[1], discrete=True, save_path=str(folder), torch=TorchOptions(contents=["cpu"])
    )
    try:
        with Profiler(cfg, role="actor", rank=0, world_size=1) as p, p.step(1):
            with profile_stage("update_actor"):
                torch.ones(32, 32).mm(torch.ones(32, 32))
            with profile_stage("compute_log_prob"):
                torch.ones(8).sum()
    finally:
        reset_for_tests()
    return [folder / r["path"] for r in read_manifest(folder) if r["kind"] == "trace"]


#: (role, step, rank, blocked_ms, export_ms) of each record; a trace file copied for each.
PLAN = [
    ("actor", 1, 0, 1.5, 10.0),
    ("actor", 1, 0, 3.0, 20.0),
    ("actor", 1, 1, 4.0, 5.5),
    ("actor", 2, 0, 0.5, None),
    ("actor", 2, 1, None, None),  # an older record: no cost recorded
    ("critic", 1, 0, None, None),
]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_traces(tmp_path_factory.mktemp("run") / "profiles")


def hand_folder(sources: list[Path], into: Path, *, with_cost: bool = True) -> Path:
    folder = into / "profiles"
    folder.mkdir(parents=True)
    for i, (role, step, rank, blocked, export) in enumerate(PLAN):
        name = f"t{i}.json.gz"
        shutil.copy(sources[i % len(sources)], folder / name)
        fields = {"blocked_ms": blocked, "export_ms": export} if with_cost else {}
        record = make_record(
            "trace",
            name,
            role=role,
            stage="update_actor",
            step=step,
            rank=rank,
            world_size=2,
            bytes=(folder / name).stat().st_size,
            **{k: v for k, v in fields.items() if v is not None},
        )
        assert append_record(folder, record)
    return folder


EXPECTED_JSON = [
    {
        "role": "actor",
        "step": 1,
        "traces": 3,
        "blocked_ms": 8.5,
        "export_ms": 35.5,
        "max_rank": 0,
        "max_blocked_ms": 4.5,
        "ranks": [
            {"rank": 0, "traces": 2, "blocked_ms": 4.5, "export_ms": 30.0},
            {"rank": 1, "traces": 1, "blocked_ms": 4.0, "export_ms": 5.5},
        ],
    },
    {
        "role": "actor",
        "step": 2,
        "traces": 1,
        "blocked_ms": 0.5,
        "export_ms": None,
        "max_rank": 0,
        "max_blocked_ms": 0.5,
        "ranks": [{"rank": 0, "traces": 1, "blocked_ms": 0.5, "export_ms": None}],
    },
]
#: The cost table's rows, as the text output shows them (columns split on two spaces or more).
EXPECTED_ROWS = [
    ["role", "step", "traces", "blocked ms", "max rank", "export ms"],
    ["actor", "1", "3", "8.500", "rank 0 (4.500 ms)", "35.500"],
    ["actor", "2", "1", "0.500", "rank 0 (0.500 ms)", "-"],
]


def cost_rows(text: str) -> list[list[str]]:
    """The rows of the table under the ``profiling's own cost`` line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("profiling's own cost"))
    table = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        table.append([cell.strip() for cell in line.strip().split("  ") if cell.strip()])
    return [table[0], *table[2:]]  # without the rule under the header


class TestSummary:
    def test_text_shows_the_cost_after_the_stage_table(self, sources: list[Path], tmp_path: Path) -> None:
        folder = hand_folder(sources, tmp_path)
        got = cli("summary", str(folder))
        assert (got.code, got.err) == (0, "")
        assert got.out.index("self ms") < got.out.index("profiling's own cost")
        assert cost_rows(got.out) == EXPECTED_ROWS

    def test_cost_json_and_csv(self, sources: list[Path], tmp_path: Path) -> None:
        folder = hand_folder(sources, tmp_path)
        got = cli("summary", str(folder), "--cost", "--json")
        assert (got.code, got.err) == (0, "")
        assert json.loads(got.out) == EXPECTED_JSON
        csv_lines = cli("summary", str(folder), "--cost", "--csv").out.splitlines()
        assert csv_lines == [
            "role,step,traces,blocked_ms,export_ms,max_rank,max_blocked_ms",
            "actor,1,3,8.5,35.5,0,4.5",
            "actor,2,1,0.5,,0,0.5",
        ]
        alone = cli("summary", str(folder), "--cost")
        assert "self ms" not in alone.out and cost_rows(alone.out) == EXPECTED_ROWS

    def test_stage_json_is_unchanged_by_the_fields(self, sources: list[Path], tmp_path: Path) -> None:
        """``--json`` stays the list of stage rows consumers parse: the same with or without the cost."""
        with_cost = hand_folder(sources, tmp_path / "a")
        without = hand_folder(sources, tmp_path / "b", with_cost=False)
        a, b = cli("summary", str(with_cost), "--json"), cli("summary", str(without), "--json")
        assert a.code == b.code == 0
        rows = json.loads(a.out)
        assert isinstance(rows, list) and rows and rows == json.loads(b.out)
        keys = (set(ROW_FIELDS) - set(DIMS)) | {"parallel"}  # the coordinates in one object
        assert {tuple(sorted(r)) for r in rows} == {tuple(sorted(keys))}

    @pytest.mark.parametrize("by", [None, "role,stage", "step,rank", "role,stage,step,rank,tp"])
    def test_csv_columns_are_the_json_keys_in_order(self, sources: list[Path], tmp_path: Path, by: str | None) -> None:
        """``--csv`` prints ``--json``'s keys as its columns, in the same order (``parallel`` as one
        column per coordinate), the stage rows' and ``--by``'s alike; each line is its row."""
        folder = hand_folder(sources, tmp_path)
        extra = [] if by is None else ["--by", by]
        rows = json.loads(cli("summary", str(folder), *extra, "--json").out)
        lines = list(csv.reader(io.StringIO(cli("summary", str(folder), *extra, "--csv").out)))
        assert rows and all(list(row) == list(rows[0]) for row in rows)
        assert lines[0] == [column for key in rows[0] for column in (DIMS if key == "parallel" else (key,))]
        assert [line[lines[0].index("total_ms")] for line in lines[1:]] == [str(row["total_ms"]) for row in rows]

    def test_without_the_fields_no_cost_table(self, sources: list[Path], tmp_path: Path) -> None:
        folder = hand_folder(sources, tmp_path, with_cost=False)
        got = cli("summary", str(folder))
        assert got.code == 0 and "self ms" in got.out and "profiling's own cost" not in got.out
        assert json.loads(cli("summary", str(folder), "--cost", "--json").out) == []
        alone = cli("summary", str(folder), "--cost")
        assert alone.code == 0 and "no record carries blocked_ms or export_ms" in alone.out


# --- a bad field: skipped with a reason, failed by check -------------------------------------

BAD = {"a string": '"abc"', "negative": "-1", "overflows": "1e400", "a bool": "true"}


@pytest.mark.parametrize("field", ["blocked_ms", "export_ms"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_field_is_skipped_and_check_fails(sources: list[Path], tmp_path: Path, case: str, field: str) -> None:
    """A record with a bad duration (written as raw JSON) is skipped whole by every reader, one line
    naming the manifest line and the field; ``check`` fails on it; the good records are kept."""
    folder = hand_folder(sources, tmp_path)
    runs = (("summary", ["--json"]), ("summary", ["--cost", "--json"]), ("ls", ["--json"]))
    want = [json.loads(cli(command, str(folder), *extra).out) for command, extra in runs]
    assert want[1] == EXPECTED_JSON and cli("check", str(folder)).code == 0
    shutil.copy(folder / "t0.json.gz", folder / "copy.json.gz")
    line = json.dumps({**read_manifest(folder)[0], "path": "copy.json.gz", field: "BAD"})
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write(line.replace('"BAD"', BAD[case]) + "\n")
    where = f"{MANIFEST_NAME} line {len(PLAN) + 1}: {field} must be"
    for (command, extra), before in zip(runs, want):
        got = cli(command, str(folder), *extra)
        assert got.code == 1 and "Traceback" not in got.err, got
        (reason,) = got.err.splitlines()
        assert reason.startswith(f"profdsl {command}: skipped ") and where in reason, reason
        assert json.loads(got.out) == before
    text = cli("summary", str(folder))
    assert text.code == 1 and cost_rows(text.out) == EXPECTED_ROWS
    check = cli("check", str(folder))
    fails = [line for line in check.out.splitlines() if line.startswith("FAIL ")]
    assert check.code == 1 and any(where in f for f in fails), check.out
    assert all(where in f or "copy.json.gz: not in the manifest" in f for f in fails), fails


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(
    deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(field=st.sampled_from(["blocked_ms", "export_ms"]), value=json_values)
def test_any_json_in_a_cost_field_and_check_agrees(sources: list[Path], field: str, value: Any) -> None:
    """Any JSON value: nothing raises, and ``summary`` skips the record exactly when ``check`` fails."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = hand_folder(sources, Path(scratch))
        shutil.copy(folder / "t0.json.gz", folder / "copy.json.gz")
        record = {**read_manifest(folder)[0], "path": "copy.json.gz", field: value}
        with open(folder / MANIFEST_NAME, "a") as f:
            f.write(json.dumps(record) + "\n")
        results = [
            cli("summary", str(folder)),
            cli("summary", str(folder), "--cost", "--json"),
            cli("check", str(folder)),
        ]
    assert all(r.code in (0, 1) and "Traceback" not in r.err for r in results), results
    good = value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= sys.float_info.max
    )  # finite, fits a float
    assert {r.code for r in results} == {0 if good else 1}, results


# --- the demo's closing report ----------------------------------------------------------------


def test_demo_report_shows_the_same_table(sources: list[Path], tmp_path: Path) -> None:
    from profdsl._demo.report import cost_table

    folder = hand_folder(sources, tmp_path)
    lines = cost_table(catalog(folder).artifacts)
    table = [[cell.strip() for cell in line.strip().split("  ") if cell.strip()] for line in lines]
    assert [table[0], *table[2:]] == EXPECTED_ROWS
    assert cost_table(catalog(hand_folder(sources, tmp_path / "old", with_cost=False)).artifacts) == []
