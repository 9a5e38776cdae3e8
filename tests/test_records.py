"""The one schema of what profdsl writes (``profdsl.records``): every record kind and the
trace metadata survive a write and a read unchanged, fields of a newer version are kept and
shown, ``failed`` records name no file that does not exist, the docs page is the schema's, and
no other module spells a record or metadata key."""

from __future__ import annotations

import ast
import gzip
import json
import string
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import profdsl._cli
from profdsl import records
from profdsl.analysis import _reader as reader
from profdsl.analysis._catalog import catalog
from profdsl.collect._manifest import MANIFEST_NAME, append_record, read_manifest, read_records
from profdsl.config._parallel import DIMS
from profdsl.errors import ConfigError
from profdsl.records._tables import field_tables
from profdsl.records.fields import DURATION, RecordError, seconds_map, spans_map, to_json
from profdsl.records.manifest import RECORD_CLASSES, RECORD_KEYS, STATUSES, Record, TraceRecord, parse_record
from profdsl.records.meta import ExportMeta, Regions, TraceMeta, WindowNote, parse_meta, trace_header
from profdsl.records.metrics_log import MetricsLine, StageLine
from profdsl.records.requests import SOURCES, CaptureNote, CaptureRequest

ROOT = Path(__file__).resolve().parents[1]

# -- strategies, one per field, written apart from the schema's own checks -----------------------

texts = st.none() | st.text(max_size=10)
counts = st.none() | st.integers(0, 2**40)
file_names = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=12).map(
    lambda s: f"{s}.pt.trace.json.gz"
)
durations = st.none() | st.floats(0, 1e300, allow_nan=False)
windows = st.none() | st.tuples(st.integers(0, 99), st.integers(0, 99))
coords = st.none() | st.dictionaries(st.sampled_from(DIMS), st.integers(0, 999))
sizes = st.none() | st.dictionaries(st.sampled_from(DIMS), st.integers(1, 999))
window_notes = st.builds(WindowNote, role=texts, step=counts, window=windows)
capture_notes = st.none() | st.builds(
    CaptureNote,
    source=st.none() | st.sampled_from(SOURCES),
    request=st.none() | st.from_regex(r"[a-z0-9][a-z0-9._:-]{0,20}", fullmatch=True),
    steps=windows,
    reason=st.none() | st.text(max_size=20),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)

FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "path": st.none() | file_names,
    "intended": st.none() | file_names,
    "events": st.none() | file_names,
    "role": texts,
    "stage": texts,
    "host": texts,
    "error": texts,
    "reason": texts,
    "config_hash": texts,
    "note": texts,
    "source": texts,
    "node": texts,
    "call": texts,
    "step": counts,
    "rank": counts,
    "replica": counts,
    "pid": counts,
    "bytes": counts,
    "part": counts,
    "time_ms": counts,
    "source_bytes": counts,
    "world_size": st.none() | st.integers(1, 2**40),
    "tp": counts,
    "pp": counts,
    "dp": counts,
    "cp": counts,
    "ep": counts,
    "window": windows,
    "status": st.sampled_from(STATUSES),
    "schema": st.integers(0, 3),
    "roles": st.none() | st.lists(st.text(max_size=5), max_size=3).map(tuple),
    "parallel_sizes": sizes,
    "windows": st.none() | st.lists(window_notes, max_size=2).map(tuple),
    "blocked_ms": durations,
    "export_ms": durations,
    "export_cpu_ms": durations,
    "init_ms": durations,
    "start_ms": durations,
    "stop_ms": durations,
    "wait_ms": durations,
    "json_bytes": counts,
    "duration_s": durations,
    "source_mtime_ns": st.none() | st.integers(-(2**62), 2**62),
    "exit_code": st.none() | st.integers(-255, 255),
    "steps": st.none() | st.lists(st.integers(0, 99), max_size=3).map(tuple),
    "output": st.none() | st.lists(st.text(max_size=20), max_size=3).map(tuple),
    "capture": capture_notes,
}
META_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    **{
        k: FIELDS[k]
        for k in (
            "role",
            "roles",
            "stage",
            "step",
            "rank",
            "world_size",
            "window",
            "windows",
            "config_hash",
            "host",
            "pid",
            "schema",
            "capture",
        )
    },
    "regions": st.none()
    | st.builds(
        Regions,
        stages=st.none() | st.lists(st.text(max_size=5), max_size=3).map(tuple),
        mini_batches=st.none() | st.lists(st.text(max_size=5), max_size=2).map(tuple),
        continued=st.none() | st.dictionaries(st.text(max_size=5), st.integers(0, 9), max_size=2),
        # a kind is a name, never blank (text_map refuses blank values, as a reader must)
        kinds=st.none()
        | st.dictionaries(st.text(max_size=5), st.text(min_size=1, max_size=8).filter(str.strip), max_size=2),
    ),
    "parallel": coords,
    "parallel_sizes": sizes,
    "export": st.none()
    | st.builds(
        ExportMeta,
        format=texts,
        role=texts,
        stage=texts,
        step=counts,
        rank=counts,
        iterations=texts,
        traces=st.none() | st.lists(texts.filter(bool), max_size=2).map(lambda v: tuple(x for x in v if x is not None)),
    ),
    "merged_traces": counts,
    "alignment": st.none() | st.dictionaries(st.text(max_size=4), json_values, max_size=2),
    "stages": st.none()
    | st.lists(st.dictionaries(st.text(max_size=4), json_values, max_size=2), max_size=2).map(tuple),
}


def _names(cls: type[Any]) -> set[str]:
    return {f.name for f in attrs.fields(cls) if not f.metadata.get("unknown")}


def unknown_fields(cls: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Fields a newer schema might add: any key the class does not have."""
    return st.dictionaries(
        st.text(max_size=8).filter(lambda k: k not in _names(cls) | {"kind"}), json_values, max_size=3
    )


def record_strategy(cls: type[Record]) -> st.SearchStrategy[Record]:
    return st.builds(cls, **{name: FIELDS[name] for name in _names(cls)}, unknown=unknown_fields(cls))


def test_every_field_has_a_strategy() -> None:
    """A field added to the schema must be added here, so that the round trip covers it."""
    for cls in RECORD_CLASSES.values():
        assert _names(cls) <= set(FIELDS), cls
    assert _names(TraceMeta) <= set(META_FIELDS)


@settings(deadline=None, max_examples=60)
@given(st.sampled_from(sorted(RECORD_CLASSES)).flatmap(lambda kind: record_strategy(RECORD_CLASSES[kind])))
def test_every_record_kind_round_trips_through_the_manifest(
    tmp_path_factory: pytest.TempPathFactory, record: Record
) -> None:
    folder = tmp_path_factory.mktemp("manifest")
    assert append_record(folder, record)
    (back,) = read_records(folder)
    assert back == record and type(back) is type(record)
    assert back.unknown == record.unknown  # fields of a newer version kept, whole
    (raw,) = read_manifest(folder)
    assert set(RECORD_KEYS) <= set(raw) and raw["kind"] == record.kind  # the contract's keys, always


@settings(deadline=None, max_examples=60)
@given(st.builds(TraceMeta, **META_FIELDS, unknown=unknown_fields(TraceMeta)))
def test_trace_metadata_round_trips_through_a_trace_file(
    tmp_path_factory: pytest.TempPathFactory, meta: TraceMeta
) -> None:
    path = tmp_path_factory.mktemp("trace") / "t.pt.trace.json.gz"
    header = trace_header(to_json(meta), distributed=True)
    path.write_bytes(
        gzip.compress(
            json.dumps(
                {**header, "traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}
            ).encode()
        )
    )
    read = reader.header(path)
    back = parse_meta(read[records.META_KEY])
    assert back == meta and back.unknown == meta.unknown
    assert read[records.DISTRIBUTED_KEY]["rank"] == meta.rank


def test_a_wrong_field_is_named() -> None:
    good = to_json(TraceRecord(path="a.json.gz", step=1))
    for key, value, words in (
        ("step", "3", "step must be an integer"),
        ("windows", [{"window": 5}], "windows[0].window"),
        ("parallel_sizes", {"xp": 1}, "parallel_sizes names a parallel dimension"),
        ("blocked_ms", float("inf"), "blocked_ms must be a finite number"),
        ("kind", "blob", "kind must be one of"),
    ):
        with pytest.raises(RecordError, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_record({**good, key: value})
    with pytest.raises(RecordError, match="written by schema 9"):
        parse_record({**good, "kind": "upload", "schema": 9})
    with pytest.raises(RecordError, match=r"profdsl.regions.stages must be a list of strings"):
        parse_meta({"regions": {"stages": [["x"]]}})


def _verdict(check: Any, key: str, value: Any) -> str:
    try:
        check(key, value)
    except ConfigError as refused:
        return str(refused)
    return "taken"


@settings(deadline=None)
@given(
    st.floats()
    | st.integers(-(2**1100), 2**1100)
    | st.booleans()
    | st.text(max_size=3)
    | st.sampled_from([-0.0, 0, 1e308, float("inf"), float("nan")])
)
def test_a_duration_a_seconds_map_and_a_span_take_and_refuse_the_same_numbers(value: Any) -> None:
    """``DURATION``, ``seconds_map``'s values and a span's start are one check (a finite number
    >= 0): each takes what the others take, and refuses the rest in the same words."""
    alone = _verdict(DURATION, "k.n", value).replace(" or None, got ", ", got ")  # it takes null too
    assert _verdict(seconds_map, "k", {"n": value}) == alone
    assert _verdict(spans_map, "k", {"n": [[value, sys.float_info.max]]}) == alone
    assert alone == "taken" or alone.startswith("k.n must be a finite number >= 0, got ")


def test_writers_cannot_add_a_key_the_schema_lacks() -> None:
    with pytest.raises(TypeError):
        TraceRecord(colour="red")  # type: ignore[call-arg]


def test_fields_of_a_newer_version_are_kept_and_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.pt.trace.json.gz").write_bytes(b"x")
    newer = {
        **to_json(TraceRecord(path="a.pt.trace.json.gz", role="actor", step=1, rank=0, bytes=1)),
        "schema": 2,
        "gpu_model": "H200",
    }
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(newer) + "\n")
    (artifact,) = catalog(tmp_path).artifacts
    assert artifact.record is not None and artifact.record.unknown == {"gpu_model": "H200"}
    assert profdsl._cli.main(["ls", str(tmp_path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["gpu_model"] == "H200" and row["schema"] == 2
    assert profdsl._cli.main(["ls", str(tmp_path)]) == 0
    assert "gpu_model (schema 2)" in capsys.readouterr().err
    # and a writer that read it writes it back whole
    again = tmp_path / "again"
    append_record(again, artifact.record)
    assert read_manifest(again)[0]["gpu_model"] == "H200"


def test_failed_records_name_no_file_and_old_ones_are_read_alike(tmp_path: Path) -> None:
    """Schema 1 writes a failed trace's name as ``intended`` (``path`` null); a schema-0 record,
    which put it in ``path``, reads the same, and ``check`` does not look for that file."""
    new = parse_record(to_json(TraceRecord(status="failed", intended="x.pt.trace.json.gz", error="disk full")))
    old = parse_record(
        {
            "kind": "trace",
            "path": "x.pt.trace.json.gz",
            "status": "failed",
            "error": "disk full",
            "role": None,
            "stage": None,
            "step": None,
            "rank": None,
            "world_size": None,
            "replica": None,
            "window": None,
            "host": None,
            "pid": None,
            "bytes": None,
        }
    )
    assert (new.path, new.intended) == (old.path, old.intended) == (None, "x.pt.trace.json.gz")
    assert old.schema == 0 and new.schema == records.SCHEMA_VERSION


#: Every schema class but the record kinds.
PARTS = (TraceMeta, Regions, WindowNote, ExportMeta, CaptureNote, CaptureRequest, MetricsLine, StageLine)


def test_the_docs_page_is_the_schema() -> None:
    page = (ROOT / "docs" / "records.md").read_text()
    assert field_tables() in page
    for cls in (*RECORD_CLASSES.values(), *PARTS):
        for name in _names(cls):
            assert f"| `{name}` |" in page, (cls, name)


# -- one place for the keys ----------------------------------------------------------------------

#: The schema's modules: the one place the keys are spelled.
SCHEMA_MODULES = {f"records/{name}.py" for name in ("fields", "manifest", "meta", "requests", "metrics_log")}
#: Modules whose string keys are another format that happens to share a word with the schema.
OTHER_FORMATS = {
    "analysis/_cost.py": "summary --cost rows",
    "analysis/_model.py": "summary --json rows",
    "analysis/_ledger.py": "summary --ledger --json rows",
    "analysis/_collectives.py": "summary --stragglers --json rows",
    "_cli/stragglers_view.py": "summary --stragglers --json",
    "_cli/summary.py": "summary rows",
    "_cli/__init__.py": "the command table",
    "_cli/plan.py": "plan --json",
    "core/": "trace-name grammar, engine names, layouts",
    "integrations/verl/": "verl's own keys",
    "metrics/_otel.py": "OpenTelemetry attributes",
}
#: (module, key) pairs that are not record or metadata keys.
NOT_RECORD_KEYS = {
    ("analysis/merge.py", "pid"): "a Chrome event's pid",
    ("analysis/_hta.py", "pid"): "a Chrome event's pid",
    ("analysis/_nccl.py", "pid"): "a Chrome event's pid",
    ("analysis/merge.py", "host"): "merge's alignment object",
    ("analysis/merge.py", "traces"): "merge's alignment object",
    ("collect/_relocate.py", "pid"): "a regular expression's group",
    ("analysis/_rewrite.py", "id"): "a Chrome flow event's id",
    ("config/_profiler_config.py", "ranks"): "a ProfilerConfig field",
    ("integrations/transformers/__init__.py", "role"): "profile_trainer's keyword option",
}


def schema_keys() -> set[str]:
    keys = {"kind", records.META_KEY, records.DISTRIBUTED_KEY, records.BASE_TIME_KEY}
    for cls in (*RECORD_CLASSES.values(), *PARTS):
        keys |= _names(cls)
    return keys


def spelled_keys(source: str, keys: set[str]) -> list[tuple[int, str]]:
    """String constants in ``source`` used as a key: a dict display's, a subscript, the first
    argument of ``.get``/``.pop``/``.setdefault``/``getattr``, the left side of ``in``."""
    found = []

    def key(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys:
            found.append((node.lineno, node.value))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            for k in node.keys:
                if k is not None:
                    key(k)
        elif isinstance(node, ast.Subscript):
            key(node.slice)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and (isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault"))
        ):
            key(node.args[0])
        elif (
            isinstance(node, ast.Call)
            and len(node.args) > 1
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
        ):
            key(node.args[1])
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            key(node.left)
    return found


def test_the_scan_finds_a_spelled_key() -> None:
    assert spelled_keys('r.get("events"); r["stage"]; {"profdsl": 1}; "regions" in m', schema_keys()) == [
        (1, "events"),
        (1, "stage"),
        (1, "profdsl"),
        (1, "regions"),
    ]


def test_only_the_schema_spells_record_and_metadata_keys() -> None:
    keys = schema_keys()
    package = ROOT / "profdsl"
    found = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module in SCHEMA_MODULES or any(module.startswith(m) for m in OTHER_FORMATS):
            continue
        for line, key in spelled_keys(path.read_text(), keys):
            if (module, key) not in NOT_RECORD_KEYS:
                found.append(f"profdsl/{module}:{line}: {key!r}")
    assert not found, "record or metadata keys spelled outside the schema's modules:\n" + "\n".join(found)
