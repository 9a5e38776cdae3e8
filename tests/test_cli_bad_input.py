"""The command line on bad input: damaged manifests and traces, and what ``ls`` prints.

A folder the real runtime wrote is damaged one way at a time: a manifest record with a wrong-typed
field, an unreadable manifest line, a trace that parses but is malformed. Every command that reads
the damaged input skips it with a one-line reason on stderr, still processes the good artifacts
exactly as it would without the damage, and exits 1; ``check`` fails on exactly those inputs.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import profdsl._cli
from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.manifest import read_manifest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

COMMANDS = ("ls", "check", "summary", "merge", "plot")
TRACE_READERS = ("check", "summary", "merge", "plot")


class Result(NamedTuple):
    code: int
    out: str
    err: str


def run(command: str, folder: Path, scratch: Path) -> Result:
    """``profdsl COMMAND folder`` in-process, through the real entry point."""
    extra = {
        "summary": ["--json"],
        "merge": ["-o", str(scratch / "merged.json")],
        "plot": ["-o", str(scratch / "plot.png")],
    }.get(command, [])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = profdsl._cli.main([command, str(folder), *extra])
    return Result(code, out.getvalue(), err.getvalue())


def write_run(folder: Path) -> None:
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


class Baseline(NamedTuple):
    folder: Path
    results: dict[str, Result]
    png: bytes
    merged: bytes
    records: list[dict[str, Any]]

    def __repr__(self) -> str:
        return f"Baseline({self.folder})"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    """The pristine folder (always copied to a folder named ``profiles``) and what each command
    prints for it."""
    root = tmp_path_factory.mktemp("pristine")
    folder = root / "profiles"
    write_run(folder)
    records = read_manifest(folder)
    assert [r["kind"] for r in records] == ["trace", "trace"]
    results = {command: run(command, folder, root) for command in COMMANDS}
    assert {c: r.code for c, r in results.items()} == dict.fromkeys(COMMANDS, 0), results
    assert "actor" in results["ls"].out and json.loads(results["summary"].out)
    return Baseline(folder, results, (root / "plot.png").read_bytes(), (root / "merged.json").read_bytes(), records)


def copy_of(baseline: Baseline, into: Path) -> Path:
    return Path(shutil.copytree(baseline.folder, into / "profiles"))


def pid_lines(out: str) -> set[str]:
    return {line for line in out.splitlines() if line.startswith("pid ")}


def load_trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def dump_trace(path: Path, trace: dict[str, Any]) -> None:
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)


# --- the damage -------------------------------------------------------------------------------

#: One manifest line each, appended after the good records; each record names a copy of a good
#: trace, so a record taken for good would change what the commands print.
BAD_RECORDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "path is a number": lambda r: json.dumps({**r, "path": 123}),
    "window is a number": lambda r: json.dumps({**r, "window": 5}),
    "step is a string": lambda r: json.dumps({**r, "step": "abc"}),
    "role is a number": lambda r: json.dumps({**r, "role": 5}),
    "bytes is a string": lambda r: json.dumps({**r, "bytes": "big"}),
    "status is a number": lambda r: json.dumps({**r, "status": 5}),
    "rank is negative": lambda r: json.dumps({**r, "rank": -1}),
    "step is a bool": lambda r: json.dumps({**r, "step": True}),
    "step overflows": lambda r: json.dumps({**r, "path": "copy.json.gz"}).replace('"step": 1', '"step": 1e400'),
    "path leaves the folder": lambda r: json.dumps({**r, "path": "../profiles/copy.json.gz"}),
    "path is absolute": lambda r: json.dumps({**r, "path": "/etc/hostname.json.gz"}),
    "path holds a NUL": lambda r: json.dumps({**r, "path": "copy\x00.json.gz"}),
    "unknown kind": lambda r: json.dumps({**r, "kind": 7}),
    "not JSON": lambda r: '{"kind": "trace", "pa',
    "not an object": lambda r: "[1, 2, 3]",
}


def damage_record(folder: Path, case: str, records: list[dict[str, Any]]) -> str:
    """Append the bad line; returns how the reason names it."""
    shutil.copy(folder / records[0]["path"], folder / "copy.json.gz")
    good = {**records[0], "path": "copy.json.gz"}
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write(BAD_RECORDS[case](good) + "\n")
    return f"{MANIFEST_NAME} line {len(records) + 1}"


def _first_x(trace: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X")


def _set(where: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(trace: dict[str, Any]) -> None:
        target = {"top": trace, "event": _first_x(trace), "profdsl": trace.get("profdsl")}[where]
        target[key] = value

    return change


#: Changes to a good trace that still parses as JSON (or, for the last ones, does not).
BAD_TRACES: dict[str, Callable[[dict[str, Any]], None]] = {
    "an event is a number": lambda t: t["traceEvents"].insert(1, 5),
    "an event is a string": lambda t: t["traceEvents"].append("x"),
    "ts is a string": _set("event", "ts", "abc"),
    "dur is null": _set("event", "dur", None),
    "dur is negative": _set("event", "dur", -5.0),
    "name is a list": _set("event", "name", ["update_actor"]),
    "tid is an object": _set("event", "tid", {"a": 1}),
    "profdsl metadata is a string": _set("top", "profdsl", "actor"),
    "profdsl metadata is a list": _set("top", "profdsl", ["actor"]),
    "regions is a number": _set("profdsl", "regions", 5),
    "region names are not strings": _set("profdsl", "regions", {"stages": [["x"]], "mini_batches": []}),
    "stage is a list": _set("profdsl", "stage", ["update_actor"]),
    "base time is a string": _set("top", "baseTimeNanoseconds", "abc"),
    "base time is huge": _set("top", "baseTimeNanoseconds", 10**400),
    "no events": _set("top", "traceEvents", []),
    "no profdsl metadata": lambda t: t.pop("profdsl"),
    "ts overflows": _set("event", "ts", "OVERFLOW"),
}
RAW_TRACES = ("missing", "empty", "not gzip", "cut short")


def damage_trace(folder: Path, case: str, records: list[dict[str, Any]]) -> str:
    """Add a record (role ``broken``) for a damaged copy of a good trace; returns its file name."""
    target = folder / "broken.json.gz"
    if case in BAD_TRACES:
        trace = load_trace(folder / records[0]["path"])
        BAD_TRACES[case](trace)
        text = json.dumps(trace).replace('"OVERFLOW"', "1e400")
        target.write_bytes(gzip.compress(text.encode()))
    elif case == "empty":
        target.write_bytes(b"")
    elif case == "not gzip":
        target.write_bytes(b"\x00garbage{" * 20)
    elif case == "cut short":
        data = (folder / records[0]["path"]).read_bytes()
        target.write_bytes(data[: len(data) // 2])
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write(json.dumps({**records[0], "path": target.name, "role": "broken"}) + "\n")
    return target.name


# --- the matrix -------------------------------------------------------------------------------


def assert_skipped_and_rest_kept(command: str, got: Result, baseline: Baseline, scratch: Path, names: str) -> list[str]:
    """Exit 1, the reason on one line naming ``names``, no traceback, the good artifacts
    processed as without the damage. Returns the reason lines."""
    assert got.code == 1, got
    assert "Traceback" not in got.err + got.out
    if command == "check":
        reasons = [line for line in got.out.splitlines() if line.startswith("FAIL ") and names in line]
        assert reasons, got.out
        for record in baseline.records:  # the good traces pass
            assert not any(record["path"] in line for line in got.out.splitlines() if line.startswith("FAIL "))
        return [line.removeprefix("FAIL ") for line in reasons]
    assert got.err and all(line.startswith(f"profdsl {command}: ") for line in got.err.splitlines()), got.err
    reasons = [
        line.removeprefix(f"profdsl {command}: skipped ")
        for line in got.err.splitlines()
        if names in line and line.startswith(f"profdsl {command}: skipped ")
    ]
    assert reasons, got.err
    want = baseline.results[command]
    if command == "ls":
        assert got.out == want.out
    elif command == "summary":
        assert json.loads(got.out) == json.loads(want.out)
    elif command == "merge":  # the bad input left out whole: nothing of it in the merged trace
        assert pid_lines(got.out) == pid_lines(want.out)
        assert (scratch / "merged.json").read_bytes() == baseline.merged
    elif command == "plot":
        assert (scratch / "plot.png").read_bytes() == baseline.png
    return reasons


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_bad_record_is_skipped_by_every_command(baseline: Baseline, tmp_path: Path, case: str, command: str) -> None:
    folder = copy_of(baseline, tmp_path)
    where = damage_record(folder, case, baseline.records)
    got = run(command, folder, tmp_path)
    assert_skipped_and_rest_kept(command, got, baseline, tmp_path, where)


@pytest.mark.parametrize("command", TRACE_READERS)
@pytest.mark.parametrize("case", sorted(BAD_TRACES) + list(RAW_TRACES))
def test_a_bad_trace_is_skipped_by_every_reader(baseline: Baseline, tmp_path: Path, case: str, command: str) -> None:
    folder = copy_of(baseline, tmp_path)
    name = damage_trace(folder, case, baseline.records)
    got = run(command, folder, tmp_path)
    assert_skipped_and_rest_kept(command, got, baseline, tmp_path, name)


@pytest.mark.parametrize("case", ["ts is a string", "profdsl metadata is a list", "missing"])
def test_ls_lists_records_without_reading_traces(baseline: Baseline, tmp_path: Path, case: str) -> None:
    """``ls`` reads the manifest only: a bad trace behind a good record is listed, exit 0."""
    folder = copy_of(baseline, tmp_path)
    name = damage_trace(folder, case, baseline.records)
    got = run("ls", folder, tmp_path)
    assert got.code == 0 and got.err == "" and name in got.out


def test_every_command_gives_the_same_reason(baseline: Baseline, tmp_path: Path) -> None:
    """One bad record and one bad trace: each command names both with the same words, and
    ``check`` fails on exactly them (and on the copy the bad record no longer lists)."""
    folder = copy_of(baseline, tmp_path)
    where = damage_record(folder, "step is a string", baseline.records)
    name = damage_trace(folder, "ts is a string", baseline.records)
    reasons = {}
    for command in TRACE_READERS:
        got = run(command, folder, tmp_path)
        reasons[command] = sorted(
            assert_skipped_and_rest_kept(command, got, baseline, tmp_path, where)
            + assert_skipped_and_rest_kept(command, got, baseline, tmp_path, name)
        )
    assert len(reasons["check"]) == 2 and all(r == reasons["check"] for r in reasons.values()), reasons
    assert "step must be an integer" in reasons["check"][0] + reasons["check"][1]
    fails = [line for line in run("check", folder, tmp_path).out.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 3 and any("copy.json.gz: not in the manifest" in f for f in fails)


def test_a_manifest_line_left_unfinished_is_named(baseline: Baseline, tmp_path: Path) -> None:
    """A record cut short at the end (no newline: the write never finished) is a lost record."""
    folder = copy_of(baseline, tmp_path)
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write('{"kind": "trace", "pa')
    for command in COMMANDS:
        got = run(command, folder, tmp_path)
        assert_skipped_and_rest_kept(command, got, baseline, tmp_path, f"{MANIFEST_NAME} line 3")


@pytest.mark.parametrize("view", [[], ["--timeline"]])
def test_plot_draws_labels_as_text(baseline: Baseline, tmp_path: Path, view: list[str]) -> None:
    """A role or stage name matplotlib would read as math (``$...$``) or that holds control
    characters is drawn as it is, not refused as an unwritable output."""
    folder = copy_of(baseline, tmp_path)
    trace = load_trace(folder / baseline.records[0]["path"])
    trace["profdsl"]["regions"]["stages"].append("a$^$b")
    _first_x(trace)["name"] = "a$^$b"
    dump_trace(folder / "copy.json.gz", trace)
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write(json.dumps({**baseline.records[0], "path": "copy.json.gz", "role": "$\\frac$\n"}) + "\n")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = profdsl._cli.main(["plot", str(folder), "-o", str(tmp_path / "p.png"), *view])
    assert (code, err.getvalue()) == (0, "")
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


# --- arbitrary JSON ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
RECORD_FIELDS = (
    "kind",
    "path",
    "role",
    "stage",
    "step",
    "rank",
    "world_size",
    "replica",
    "window",
    "bytes",
    "status",
    "error",
    "host",
    "pid",
)
EVENT_KEYS = ("ts", "dur", "name", "cat", "ph", "tid", "pid", "args", "id")
HEADER_KEYS = ("profdsl", "distributedInfo", "baseTimeNanoseconds", "traceEvents")
PROFDSL_KEYS = ("regions", "stage", "role")


def _no_recorded_loss(field: str, value: Any) -> bool:
    """Keep out values that are valid and mean something ``check`` reports for its own reasons:
    a loss the manifest records, or an existing path to a file that is not a JSON trace."""
    if field == "status":
        return not isinstance(value, str) or value in ("", "ok", "skipped")
    if field == "path":
        return not isinstance(value, str) or value.endswith(".json.gz")
    return True


damage = st.one_of(
    st.tuples(
        st.just("record"),
        st.sampled_from(RECORD_FIELDS),
        json_values | st.text(max_size=8).map(lambda s: s + ".json.gz"),
    ),
    st.tuples(
        st.just("line"),
        st.none(),
        json_values.filter(lambda v: not isinstance(v, dict)).map(json.dumps) | st.text(max_size=20),
    ),
    st.tuples(st.just("event"), st.sampled_from(EVENT_KEYS), json_values),
    st.tuples(st.just("new event"), st.none(), json_values),
    st.tuples(st.just("header"), st.sampled_from(HEADER_KEYS), json_values),
    st.tuples(st.just("profdsl"), st.sampled_from(PROFDSL_KEYS), json_values),
)


def apply(folder: Path, records: list[dict[str, Any]], what: str, key: str | None, value: Any) -> None:
    """Append a record for a copy of a good trace, one of them damaged; or append a bad line."""
    if what == "line":
        line = str(value).replace("\n", " ").replace("\r", " ")
    else:
        if key != "path":  # a copy no record lists would be a problem of its own ("not in the manifest")
            shutil.copy(folder / records[0]["path"], folder / "copy.json.gz")
        line = json.dumps({**records[0], "path": "copy.json.gz", **({key: value} if what == "record" else {})})
    if what not in ("line", "record"):
        trace = load_trace(folder / "copy.json.gz")
        if what == "event":
            _first_x(trace)[key] = value
        elif what == "new event":
            trace["traceEvents"].append(value)
        elif what == "header":
            trace[key] = value
        else:
            trace["profdsl"][key] = value
        dump_trace(folder / "copy.json.gz", trace)
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write(line + "\n")


@settings(
    deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@pytest.mark.slow
@given(change=damage)
def test_arbitrary_json_never_crashes_and_check_agrees(baseline: Baseline, change: tuple[str, Any, Any]) -> None:
    """Any JSON value in a record field, a manifest line, an event or the trace metadata: no
    command raises, and ``check`` fails exactly when the reading commands skipped something."""
    what, key, value = change
    if what == "record":
        assume(_no_recorded_loss(key, value))
    with tempfile.TemporaryDirectory() as scratch:
        folder = copy_of(baseline, Path(scratch))
        apply(folder, baseline.records, what, key, value)
        results = {command: run(command, folder, Path(scratch)) for command in COMMANDS}
    for command, got in results.items():
        assert got.code in (0, 1), (command, got)
        assert "Traceback" not in got.err
    reasons = {
        command: {line.split(": skipped ", 1)[1] for line in got.err.splitlines() if ": skipped " in line}
        for command, got in results.items()
    }
    failed = results["check"].code == 1
    readers = ("summary", "merge", "plot")
    assert {c: bool(reasons[c]) for c in readers} == dict.fromkeys(readers, failed), results
    assert reasons["summary"] == reasons["merge"] == reasons["plot"], results
    for command in readers:
        assert (results[command].code == 1) == failed, (command, results[command])
    # ls reads the manifest only: it skips the bad records the others skip, and no trace
    assert reasons["ls"] <= reasons["summary"] and (results["ls"].code == 1) == bool(reasons["ls"]), results


# --- usage errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "{folder}", "--world-size", "-3"],
        ["check", "{folder}", "--world-size", "0"],
        ["plan", "{config}", "--world-size", "4", "--replica-world-size", "-2"],
    ],
)
@pytest.mark.slow
def test_negative_sizes_are_usage_errors(baseline: Baseline, tmp_path: Path, argv: list[str]) -> None:
    config = tmp_path / "p.yaml"
    config.write_text("enable: true\nsteps: [1]\n")
    argv = [a.format(folder=baseline.folder, config=config) for a in argv]
    got = subprocess.run([sys.executable, "-m", "profdsl", *argv], capture_output=True, text=True, timeout=300)
    assert got.returncode == 2, got
    assert len(got.stderr.splitlines()) == 1 and "world" in got.stderr and "Traceback" not in got.stderr
    assert got.stdout == ""


# --- ls output --------------------------------------------------------------------------------

LONG = "sub/" + "x" * 200 + ".json.gz"


def _odd_folder(baseline: Baseline, into: Path) -> Path:
    folder = copy_of(baseline, into)
    with open(folder / MANIFEST_NAME, "a") as f:
        f.write(json.dumps({**baseline.records[0], "path": LONG, "role": "act\nor\t\x1bx", "stage": "générer"}) + "\n")
    return folder


@pytest.mark.slow
def test_ls_piped_prints_whole_values_and_escapes_control_characters(baseline: Baseline, tmp_path: Path) -> None:
    folder = _odd_folder(baseline, tmp_path)
    got = subprocess.run(
        [sys.executable, "-m", "profdsl", "ls", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert len(lines) == 2 + 3  # header, rule, three records: nothing split over lines
    (row,) = [line for line in lines if LONG in line]
    assert "act\\nor\\t\\x1bx" in row and "générer" in row
    for record in baseline.records:
        assert any(record["path"] in line for line in lines)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal")
def test_ls_on_a_terminal_fits_its_width_and_escapes(baseline: Baseline, tmp_path: Path) -> None:
    import pty

    folder = _odd_folder(baseline, tmp_path)
    parent, child = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "profdsl", "ls", str(folder)],
            stdout=child,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": "120"},
        )
        os.close(child)
        data = b""
        while True:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        assert proc.wait(timeout=300) == 0
    finally:
        os.close(parent)
    lines = data.decode().splitlines()
    assert len(lines) == 5 and all(len(line) <= 120 for line in lines), lines
    assert LONG not in data.decode() and "act\\nor" in data.decode()
