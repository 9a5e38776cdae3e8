"""Tests for profdsl.naming: trace file names."""

from __future__ import annotations

import os
import re
import unicodedata
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from profdsl.config._parallel import Parallel
from profdsl.core._naming import (
    EXT_MAX_LEN,
    HOST_MAX_LEN,
    MAX_INDEX,
    MAX_NAME_BYTES,
    MAX_PID,
    MAX_TIME_MS,
    MAX_WIDE_INDEX,
    PLACEHOLDER_LABEL,
    ROLE_MAX_LEN,
    STAGE_MAX_LEN,
    sanitize_label,
)
from profdsl.errors import ConfigError
from profdsl.naming import TraceName

TRICKY = [
    "step5",
    "rank3",
    "rank3-of-8",
    "world8",
    "mb0-1",
    "mb2",
    "part2",
    "pid7",
    "replica1",
    "tp1-pp0",
    "20261129T102355123",
    "x.pt.trace.json.gz",
    "actor_rollout_ref",
    "../..",
    "a/b\\c",
    "\x00\n\t ",
    "ÄÖÜ-ünïcode-名前",
    "",
    "_",
    "x" * 300,
]

labels = st.one_of(
    st.text(),
    st.sampled_from(TRICKY),
    st.text(alphabet="ab0_/.-\x00\n Ü", max_size=120),
    st.builds(lambda a, b: a + b, st.sampled_from(TRICKY), st.text(max_size=40)),
)
indices = st.one_of(st.integers(0, 12), st.integers(0, MAX_INDEX))
maybe_index = st.none() | indices
extensions = st.one_of(
    st.sampled_from([".pt.trace.json.gz", ".trace.json.gz", ".nsys-rep", ".json", ".x"]),
    st.from_regex(r"(\.[A-Za-z0-9][A-Za-z0-9-]{0,4}){1,3}", fullmatch=True),
)


@st.composite
def rank_and_world(draw: st.DrawFn) -> tuple[int | None, int | None]:
    """A valid (rank, world_size) pair, either side possibly unknown."""
    world = draw(st.none() | st.integers(1, 16) | st.integers(1, MAX_INDEX))
    if world is None:
        return draw(maybe_index), None
    return draw(st.none() | st.integers(0, world - 1)), world


@st.composite
def windows(draw: st.DrawFn) -> tuple[int, int] | None:
    """An optional valid mini-batch window."""
    if draw(st.booleans()):
        return None
    first, last = sorted((draw(indices), draw(indices)))
    return (first, first) if draw(st.booleans()) else (first, last)


@st.composite
def trace_names(draw: st.DrawFn) -> TraceName:
    """Any valid TraceName."""
    rank, world = draw(rank_and_world())
    return TraceName(
        role=draw(labels),
        stage=draw(st.none() | labels),
        step=draw(maybe_index),
        rank=rank,
        world_size=world,
        tp=draw(maybe_index),
        pp=draw(maybe_index),
        dp=draw(maybe_index),
        cp=draw(maybe_index),
        ep=draw(maybe_index),
        replica=draw(maybe_index),
        window=draw(windows()),
        part=draw(maybe_index),
        host=draw(labels),
        pid=draw(st.integers(0, 9) | st.integers(0, MAX_PID)),
        time_ms=draw(st.integers(0, 9) | st.integers(0, MAX_TIME_MS)),
        ext=draw(extensions),
    )


FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "role": labels,
    "stage": st.none() | labels,
    "step": maybe_index,
    "rank": maybe_index,
    "world_size": st.none() | st.integers(1, MAX_INDEX),
    "tp": maybe_index,
    "pp": maybe_index,
    "dp": maybe_index,
    "cp": maybe_index,
    "ep": maybe_index,
    "replica": maybe_index,
    "window": windows(),
    "part": maybe_index,
    "host": labels,
    "pid": st.integers(0, MAX_PID),
    "time_ms": st.integers(0, MAX_TIME_MS),
    "ext": extensions,
}

BASE: dict[str, Any] = {"role": "actor", "host": "node-1", "pid": 1234, "time_ms": 0}


def make(**overrides: Any) -> TraceName:
    """A TraceName with the required fields filled in."""
    return TraceName(**{**BASE, **overrides})


def is_unsafe_char(char: str) -> bool:
    """Whether a character must never appear in a name."""
    return char.isspace() or unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zl", "Zp"}


class TestSanitizeLabel:
    """sanitize_label maps any text to a short, safe, non-empty label."""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("actor_rollout_ref", "actor-rollout-ref"),
            ("actor/../x_y", "actor-x-y"),
            ("Node-7.Example.COM", "node-7-example-com"),
            ("  update actor\n", "update-actor"),
            ("a--b__c", "a-b-c"),
            ("ünïcode", "n-code"),
            ("", PLACEHOLDER_LABEL),
            ("_/._", PLACEHOLDER_LABEL),
            ("\x00", PLACEHOLDER_LABEL),
        ],
    )
    def test_examples(self, text: str, expected: str) -> None:
        """Known inputs map to known labels."""
        assert sanitize_label(text) == expected

    @given(text=labels, max_len=st.integers(1, 64))
    def test_output_is_safe_bounded_and_idempotent(self, text: str, max_len: int) -> None:
        """The label uses the safe alphabet, fits max_len, and is a fixed point of sanitizing."""
        label = sanitize_label(text, max_len=max_len)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", label)
        assert len(label) <= max_len
        assert sanitize_label(label, max_len=max_len) == label

    def test_long_labels_sharing_a_prefix_stay_distinct(self) -> None:
        """A cut label ends in a hash of the whole label, so shared prefixes do not collide."""
        a = sanitize_label("k8s-pod-" + "x" * 60 + "-worker-0", max_len=HOST_MAX_LEN)
        b = sanitize_label("k8s-pod-" + "x" * 60 + "-worker-1", max_len=HOST_MAX_LEN)
        assert len(a) == len(b) == HOST_MAX_LEN
        assert a != b
        assert a.startswith("k8s-pod-xxx")

    def test_documented_host(self) -> None:
        """The long host of docs/trace-names.md is cut to the documented label."""
        host = "ip-10-0-1-23.us-west-2.compute.internal"
        assert sanitize_label(host, max_len=HOST_MAX_LEN) == "ip-10-0-1-23-us-wes-c62d3445"

    @pytest.mark.parametrize(("text", "max_len"), [(3, 10), (None, 10), ("a", 0), ("a", True)])
    def test_rejects_bad_arguments(self, text: Any, max_len: Any) -> None:
        """A non-str text or a max_len below 1 raises ConfigError."""
        with pytest.raises(ConfigError, match="sanitize_label"):
            sanitize_label(text, max_len=max_len)


class TestTraceName:
    """TraceName formats to a safe, unique name and parses back exactly."""

    @given(name=trace_names())
    def test_parse_inverts_format(self, name: TraceName) -> None:
        """parse(format(x)) == x for every valid TraceName."""
        text = name.format()
        assert TraceName.parse(text) == name
        assert TraceName.try_parse(text) == name

    @given(name=trace_names())
    def test_formatted_name_is_safe(self, name: TraceName) -> None:
        """A name has no separators, no '..', no control or blank characters, and fits 255 bytes."""
        text = name.format()
        assert "/" not in text and "\\" not in text and ".." not in text
        assert not any(is_unsafe_char(c) for c in text)
        assert text.isascii()
        assert len(text.encode("utf-8")) <= MAX_NAME_BYTES
        assert os.path.basename(text) == text
        assert text not in {".", ".."}

    @given(a=trace_names(), b=trace_names())
    def test_different_names_format_differently(self, a: TraceName, b: TraceName) -> None:
        """Two unequal TraceNames never share a formatted name."""
        assert (a == b) == (a.format() == b.format())

    @given(base=trace_names(), field=st.sampled_from(sorted(FIELD_VALUES)), data=st.data())
    def test_changing_one_field_changes_the_name(self, base: TraceName, field: str, data: st.DataObject) -> None:
        """Changing any single field to another value changes the formatted name."""
        try:
            other = attrs.evolve(base, **{field: data.draw(FIELD_VALUES[field])})
        except ConfigError:
            assume(False)  # e.g. a new rank that is >= world_size
            raise
        assert (base == other) == (base.format() == other.format())

    @pytest.mark.parametrize("label", TRICKY)
    def test_writes_inside_the_folder(self, tmp_path: Path, label: str) -> None:
        """A file written under the name lands directly in the folder, with exactly that name."""
        name = make(role=label, stage=label, host=label, step=3, window=(0, 2)).format()
        path = tmp_path / name
        assert path.resolve().parent == tmp_path.resolve()
        path.write_bytes(b"")
        assert os.listdir(tmp_path) == [name]

    def test_longest_name_fits(self) -> None:
        """Every field at its maximum still formats to at most 255 bytes and parses back."""
        name = TraceName(
            role="r" * 100,
            stage="s" * 100,
            step=MAX_INDEX,
            rank=MAX_INDEX - 1,
            world_size=MAX_INDEX,
            tp=MAX_INDEX,
            pp=MAX_INDEX,
            dp=MAX_INDEX,
            cp=MAX_INDEX,
            ep=MAX_INDEX,
            replica=MAX_INDEX,
            window=(MAX_INDEX - 1, MAX_INDEX),
            part=MAX_INDEX,
            host="h" * 100,
            pid=MAX_PID,
            time_ms=MAX_TIME_MS,
            ext="." + "e" * (EXT_MAX_LEN - 1),
        )
        assert (len(name.role), len(name.stage or ""), len(name.host)) == (
            ROLE_MAX_LEN,
            STAGE_MAX_LEN,
            HOST_MAX_LEN,
        )
        assert len(name.format().encode()) == MAX_NAME_BYTES
        assert TraceName.parse(name.format()) == name

    def test_documented_example(self) -> None:
        """The example of docs/trace-names.md formats exactly as documented."""
        name = make(
            role="actor",
            stage="update_actor",
            step=5,
            rank=3,
            world_size=8,
            tp=1,
            pp=0,
            dp=1,
            window=[0, 3],
            host="node-1",
            pid=1234,
            time_ms=1_795_947_835_123,
        )
        assert name.window == (0, 3)
        assert name.format() == (
            "actor.update-actor_step000005_rank3-of-8_tp1-pp0-dp1_mb0-3_node-1_pid1234_"
            "20261129T102355123.pt.trace.json.gz"
        )

    @pytest.mark.parametrize(
        ("overrides", "expected"),
        [
            ({}, "actor_node-1_pid1234_19700101T000000000.pt.trace.json.gz"),
            ({"role": "actor_rollout_ref"}, "actor-rollout-ref_node-1_pid1234_"),
            ({"rank": 0}, "actor_rank0_node-1"),
            ({"world_size": 8}, "actor_world8_node-1"),
            ({"window": (2, 2)}, "actor_mb2_node-1"),
            ({"window": (2, 5)}, "actor_mb2-5_node-1"),
            ({"replica": 1, "part": 4}, "actor_replica1_part4_node-1"),
            ({"ep": 3, "cp": 2}, "actor_cp2-ep3_node-1"),
            ({"ext": ".nsys-rep"}, "actor_node-1_pid1234_19700101T000000000.nsys-rep"),
        ],
    )
    def test_segments(self, overrides: dict[str, Any], expected: str) -> None:
        """Each optional field adds its own segment, and absent fields add none."""
        assert make(**overrides).format().startswith(expected)

    @given(st.fixed_dictionaries({}, optional={d: st.integers(0, MAX_INDEX) for d in ("ep", "cp", "dp", "pp", "tp")}))
    def test_coordinates_in_one_order_as_the_layout_lists_them(self, coords: dict[str, int]) -> None:
        """A name writes the coordinates it knows as one segment, in tp pp dp cp ep order, none
        for none; a layout (`Parallel.coords`) lists the same in the same order."""
        in_order = [(d, coords[d]) for d in ("tp", "pp", "dp", "cp", "ep") if d in coords]
        assert list(Parallel(**coords).coords().items()) == in_order
        name = make(**coords).format()
        segment = "-".join(f"{d}{v}" for d, v in in_order)
        assert f"_{segment}_" in name if in_order else not re.search(r"_(tp|pp|dp|cp|ep)[0-9]", name)

    @pytest.mark.parametrize("tricky", ["step5", "rank3", "mb0-1", "part2", "pid7", "world8"])
    def test_labels_that_look_like_segments(self, tricky: str) -> None:
        """A role, stage or host spelled like a segment marker still parses back unchanged."""
        for name in [
            make(stage=tricky),
            make(stage=tricky, step=1, rank=2, part=3),
            make(role=tricky, host=tricky),
            make(host=tricky, window=(4, 4), part=0),
        ]:
            parsed = TraceName.parse(name.format())
            assert parsed == name
            assert (parsed.stage, parsed.host) == (name.stage, name.host)

    def test_host_named_pid7(self) -> None:
        """A host literally named 'pid7' stays the host, and the real pid stays the pid."""
        parsed = TraceName.parse(make(host="pid7", pid=9).format())
        assert (parsed.host, parsed.pid) == ("pid7", 9)


class TestTimestamp:
    """time_ms is written as a UTC time to the millisecond and read back exactly."""

    @given(time_ms=st.integers(0, MAX_TIME_MS) | st.integers(0, 3_000))
    def test_utc_and_round_trip(self, time_ms: int) -> None:
        """The time slot matches an independent UTC computation and parses back to the same int."""
        moment = datetime.fromtimestamp(time_ms // 1000, tz=timezone.utc)
        expected = (
            f"{moment.year:04d}{moment.month:02d}{moment.day:02d}T"
            f"{moment.hour:02d}{moment.minute:02d}{moment.second:02d}{time_ms % 1000:03d}"
        )
        text = make(time_ms=time_ms).format()
        assert text == f"actor_node-1_pid1234_{expected}.pt.trace.json.gz"
        assert TraceName.parse(text).time_ms == time_ms

    @pytest.mark.parametrize(
        ("time_ms", "stamp"),
        [
            (0, "19700101T000000000"),
            (1_795_947_835_123, "20261129T102355123"),
            (951_782_400_000, "20000229T000000000"),
            (MAX_TIME_MS, "99991231T235959999"),
        ],
    )
    def test_known_times(self, time_ms: int, stamp: str) -> None:
        """Known epoch milliseconds format to known UTC stamps."""
        assert make(time_ms=time_ms).format().endswith(f"_{stamp}.pt.trace.json.gz")


BAD_FIELDS: list[tuple[str, Any]] = [
    ("role", 3),
    ("role", None),
    ("role", b"actor"),
    ("stage", 5),
    ("host", None),
    ("host", ["node"]),
    ("step", -1),
    ("step", True),
    ("step", 1.0),
    ("step", "5"),
    ("step", MAX_WIDE_INDEX + 1),
    ("rank", -1),
    ("rank", False),
    ("world_size", 0),
    ("world_size", "8"),
    ("tp", -1),
    ("pp", True),
    ("dp", "1"),
    ("cp", -3),
    ("ep", 2.5),
    ("replica", -1),
    ("window", (3, 1)),
    ("window", (-1, 2)),
    ("window", (1,)),
    ("window", (1, 2, 3)),
    ("window", (True, 2)),
    ("window", (0, MAX_WIDE_INDEX + 1)),
    ("window", "0-3"),
    ("window", 3),
    ("part", -1),
    ("part", "1"),
    ("pid", -1),
    ("pid", MAX_PID + 1),
    ("pid", None),
    ("time_ms", -1),
    ("time_ms", MAX_TIME_MS + 1),
    ("time_ms", 1.5),
    ("ext", "json"),
    ("ext", ""),
    ("ext", "."),
    ("ext", ".."),
    ("ext", ".pt..json"),
    ("ext", ".json."),
    ("ext", "/x.json"),
    ("ext", ".a_b"),
    ("ext", ".a b"),
    ("ext", ".-x"),
    ("ext", ".jsön"),
    ("ext", "." + "a" * EXT_MAX_LEN),
    ("ext", None),
]


class TestValidation:
    """Invalid field values raise ConfigError naming the field and the value."""

    @pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
    def test_bad_field(self, field: str, value: Any) -> None:
        """Each invalid value is rejected with a message quoting the field and the value."""
        with pytest.raises(ConfigError) as info:
            make(**{field: value})
        assert f"TraceName.{field}" in str(info.value)
        assert repr(value) in str(info.value)

    @pytest.mark.parametrize(("rank", "world_size"), [(8, 8), (9, 8), (1, 1)])
    def test_rank_below_world_size(self, rank: int, world_size: int) -> None:
        """rank must be smaller than world_size when both are known."""
        pattern = rf"TraceName\.rank .*world_size \({world_size}\).*{rank}"
        with pytest.raises(ConfigError, match=pattern):
            make(rank=rank, world_size=world_size)

    def test_missing_required_field(self) -> None:
        """role, host, pid and time_ms are required."""
        with pytest.raises(TypeError):
            TraceName(role="actor", host="h", pid=1)  # type: ignore[call-arg]

    def test_is_a_value_error(self) -> None:
        """ConfigError is a ValueError, so callers may catch either."""
        with pytest.raises(ValueError):
            make(step=-1)


class TestParse:
    """parse rejects anything that is not exactly a profdsl name, quoting it."""

    @pytest.mark.parametrize(
        "name",
        [
            "dp0_pp0_tp0_dcp0_ep0_rank0.123.pt.trace.json.gz",
            "foo.json",
            "",
            "_",
            "___",
            "profiles/actor_node-1_pid1_19700101T000000000.json",
            "..\\actor_node-1_pid1_19700101T000000000.json",
            "actor_node-1_pid1_19700101T000000000",
            "actor_node-1_pid1_19700101T000000000.",
            "actor_node-1_pid1_19700101T000000000..json",
            "actor_node-1_pid1_19700101T000000000.json\n",
            "actor_node-1_pid1_1970010T1000000000.json",
            "actor_node-1_pid1_19701301T000000000.json",
            "actor_node-1_pid1_00000101T000000000.json",
            "actor_node-1_pid1_19691231T235959999.json",
            "actor_node-1_pid01_19700101T000000000.json",
            "actor_node-1_pidx_19700101T000000000.json",
            "actor_node-1_1_19700101T000000000.json",
            "Actor_node-1_pid1_19700101T000000000.json",
            "actor_Node-1_pid1_19700101T000000000.json",
            "actor_node--1_pid1_19700101T000000000.json",
            "actor._node-1_pid1_19700101T000000000.json",
            "actor.a.b_node-1_pid1_19700101T000000000.json",
            "_node-1_pid1_19700101T000000000.json",
            "actor__pid1_19700101T000000000.json",
            "actor_step5_node-1_pid1_19700101T000000000.json",
            "actor_step0000005_node-1_pid1_19700101T000000000.json",
            "actor_part1_step000005_node-1_pid1_19700101T000000000.json",
            "actor_step000001_step000002_node-1_pid1_19700101T000000000.json",
            "actor_rank8-of-8_node-1_pid1_19700101T000000000.json",
            "actor_rank1_world8_node-1_pid1_19700101T000000000.json",
            "actor_pp0-tp1_node-1_pid1_19700101T000000000.json",
            "actor_tp1-tp2_node-1_pid1_19700101T000000000.json",
            "actor_mb3-3_node-1_pid1_19700101T000000000.json",
            "actor_mb3-1_node-1_pid1_19700101T000000000.json",
            "actor_bogus_node-1_pid1_19700101T000000000.json",
            "actor_step01000000_node-1_pid1_19700101T000000000.json",
            "actor_node-1_pid1_19700101T000000000.json" + "n" * 300,
            "actor_node-1_pid1_19700101T000000000.pt.trace.json.gz.tmp-very-long-ext",
            "actor_node-1_pid1_１９700101T000000000.json",
        ],
    )
    def test_rejects(self, name: str) -> None:
        """A foreign or non-canonical name raises ConfigError quoting it; try_parse gives None."""
        with pytest.raises(ConfigError) as info:
            TraceName.parse(name)
        assert repr(name)[:200] in str(info.value)
        assert "not a profdsl trace name" in str(info.value)
        assert TraceName.try_parse(name) is None

    @pytest.mark.parametrize("name", [None, 3, b"actor_node-1_pid1_19700101T000000000.json"])
    def test_rejects_non_strings(self, name: Any) -> None:
        """A non-str raises ConfigError, and try_parse returns None."""
        with pytest.raises(ConfigError, match="TraceName.parse"):
            TraceName.parse(name)
        assert TraceName.try_parse(name) is None

    def test_path_is_named_in_the_message(self) -> None:
        """A path instead of a bare file name is rejected as a path."""
        with pytest.raises(ConfigError, match="not a path"):
            TraceName.parse("p/actor_node-1_pid1_19700101T000000000.json")

    def test_ext_is_everything_after_the_time(self) -> None:
        """The extension is everything from the first dot after the timestamp."""
        parsed = TraceName.parse("rollout_replica2_gpu-node_pid77_20260101T000000001.trace.json.gz")
        assert (parsed.role, parsed.replica, parsed.host) == ("rollout", 2, "gpu-node")
        assert parsed.pid == 77
        assert (parsed.time_ms, parsed.ext) == (1_767_225_600_001, ".trace.json.gz")


DOCS = Path(__file__).resolve().parent.parent / "docs" / "trace-names.md"


class TestDocs:
    """The examples in docs/trace-names.md are real names."""

    def test_examples_round_trip(self) -> None:
        """Every name in a text block of the doc parses and formats back to itself."""
        blocks = re.findall(r"```text\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
        names = [line for block in blocks for line in block.splitlines() if line]
        assert len(names) >= 6
        for name in names:
            assert TraceName.parse(name).format() == name
