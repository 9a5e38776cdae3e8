"""Rank selectors: the grammar (round trips, errors pointing at the bad token), the resolver
against a brute-force enumeration of layouts, the config field, and ``profdsl plan``."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import ProfilerConfig
from profdsl.config import FinishHook
from profdsl.config._parallel import Parallel
from profdsl.config.selector import parse_selector
from profdsl.core._decide import decide
from profdsl.core._selection import Selection
from profdsl.core._topology import GridLayout, Topology
from profdsl.core.preview import preview
from profdsl.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# An independent model of selectors: plain tuples, rendered to text by hand.
# ---------------------------------------------------------------------------------------------

COORD_DIMS = ("tp", "pp", "dp", "cp")


@dataclass(frozen=True)
class Place:
    """One rank of an enumerated layout (the oracle's own record)."""

    rank: int
    coords: dict[str, int]
    sizes: dict[str, int]
    node: int
    first_on_node: bool


def enumerate_layout(tp: int, pp: int, cp: int, dp: int, nodes: int) -> list[Place]:
    """Every rank of a tp x cp x dp x pp grid, numbered by counting through nested loops
    (pp outermost, tp innermost), on ``nodes`` nodes of consecutive ranks."""
    world = tp * pp * cp * dp
    per_node = world // nodes
    sizes = {"tp": tp, "pp": pp, "cp": cp, "dp": dp}
    places, counter = [], 0
    for p in range(pp):
        for d in range(dp):
            for c in range(cp):
                for t in range(tp):
                    places.append(
                        Place(counter, {"tp": t, "pp": p, "dp": d, "cp": c}, sizes, counter // per_node, False)
                    )
                    counter += 1
    firsts = {min(p.rank for p in places if p.node == n) for n in range(nodes)}
    return [Place(p.rank, p.coords, p.sizes, p.node, p.rank in firsts) for p in places]


def oracle(terms: list[tuple], places: list[Place]) -> list[int]:
    """The ranks matching every term, decided from the enumeration alone."""
    chosen = []
    replica_firsts = {d: min(p.rank for p in places if p.coords["dp"] == d) for d in {p.coords["dp"] for p in places}}
    world = len(places)
    for place in places:
        ok = True
        for term in terms:
            kind = term[0]
            if kind == "every":
                ok &= place.rank in range(0, world, term[1])
            elif kind == "first_per_node":
                ok &= place.first_on_node
            elif kind == "one_per_dp_group":
                ok &= replica_firsts[place.coords["dp"]] == place.rank
            else:
                _, dim, values = term
                if dim == "rank":
                    value, last = place.rank, world - 1
                else:
                    value, last = place.coords[dim], place.sizes[dim] - 1
                ok &= value in {last if v == "last" else v for v in values}
        if ok:
            chosen.append(place.rank)
    return chosen


def render(term: tuple, space: str) -> str:
    kind = term[0]
    if kind == "every":
        return f"every{space}({space}{term[1]}{space})"
    if kind in ("first_per_node", "one_per_dp_group"):
        return kind
    _, dim, values = term
    if len(values) == 1 and space != "  ":
        return f"{dim}{space}=={space}{values[0]}"
    return f"{dim} in {{{(',' + space).join(str(v) for v in values)}}}"


values = st.lists(st.integers(min_value=0, max_value=5) | st.just("last"), min_size=1, max_size=3)
terms = st.one_of(
    st.tuples(st.just("match"), st.sampled_from((*COORD_DIMS, "rank")), values),
    st.tuples(st.just("every"), st.integers(min_value=1, max_value=9)),
    st.tuples(st.sampled_from(["first_per_node", "one_per_dp_group"])),
)
selector_terms = st.lists(terms, min_size=1, max_size=4)
spaces = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def layouts(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    tp, pp, cp, dp = (draw(st.integers(min_value=1, max_value=4)) for _ in range(4))
    world = tp * pp * cp * dp
    nodes = draw(st.sampled_from([n for n in range(1, world + 1) if world % n == 0]))
    return tp, pp, cp, dp, nodes


def is_rank_selected(rank: int, ranks: tuple[int, ...], *, select: str, topology: Topology) -> bool:
    """Whether the selection's rank rule (``Selection.matches``) takes ``topology``'s rank."""
    assert topology.rank == rank and not ranks
    return Selection(enabled=True, select=parse_selector(select)).matches(topology)


def resolved(text: str, layout: GridLayout) -> list[int]:
    return [r for r in range(layout.world_size) if is_rank_selected(r, (), select=text, topology=layout.topology(r))]


class TestResolverAgainstEnumeration:
    @given(layouts(), selector_terms, spaces)
    def test_resolver_picks_what_the_enumeration_picks(
        self, shape: tuple[int, ...], chosen: list[tuple], space: str
    ) -> None:
        tp, pp, cp, dp, nodes = shape
        text = " and ".join(render(t, space) for t in chosen)
        layout = GridLayout(world_size=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, nodes=nodes)
        assert layout.dp == dp
        assert resolved(text, layout) == oracle(chosen, enumerate_layout(tp, pp, cp, dp, nodes))

    @given(layouts())
    def test_grid_layout_matches_the_enumeration(self, shape: tuple[int, ...]) -> None:
        tp, pp, cp, dp, nodes = shape
        layout = GridLayout(world_size=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, nodes=nodes)
        for place in enumerate_layout(tp, pp, cp, dp, nodes):
            topo = layout.topology(place.rank)
            assert topo.parallel.coords() == place.coords
            assert layout.node_of(place.rank) == place.node
            assert (topo.local_rank == 0) == place.first_on_node

    @given(layouts(), selector_terms)
    def test_plan_predicts_the_resolver(self, shape: tuple[int, ...], chosen: list[tuple]) -> None:
        """``profdsl plan``'s prediction (core/preview) is the resolver's answer, rank by rank."""
        tp, pp, cp, dp, nodes = shape
        text = " and ".join(render(t, " ") for t in chosen)
        layout = GridLayout(world_size=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, nodes=nodes)
        config = ProfilerConfig(enable=True, steps=[1], select=text)
        found = preview(config, world_size=layout.world_size, layout=layout)
        assert list(found.ranks) == oracle(chosen, enumerate_layout(tp, pp, cp, dp, nodes))
        assert [c["node"] for c in found.coords] == [layout.node_of(r) for r in found.ranks]


class TestGrammar:
    @given(selector_terms, spaces)
    def test_parse_format_round_trip(self, chosen: list[tuple], space: str) -> None:
        text = " and ".join(render(t, space) for t in chosen)
        parsed = parse_selector(text)
        assert parse_selector(parsed.format()) == parsed
        assert parse_selector(parsed.format()).format() == parsed.format()
        assert len(parsed.terms) == len(chosen)

    def test_canonical_spelling(self) -> None:
        assert parse_selector("pp in {last,0,0}").format() == "pp in {0, last}"
        assert parse_selector("tp in { 3 }").format() == "tp == 3"
        assert parse_selector("every(8)and first_per_node").format() == "every(8) and first_per_node"

    @pytest.mark.parametrize(
        ("text", "column", "token", "problem"),
        [
            ("tp = 0", 4, "=", "expected '==' or 'in' after 'tp'"),
            ("tp == 0 and pp in {0, lats}", 23, "lats", "expected an integer or 'last'"),
            ("tpp == 0", 1, "tpp", "unknown term; did you mean 'tp'?"),
            ("tp == 0 pp == 1", 9, "pp", "expected 'and' or the end"),
            ("every(0)", 7, "0", "expected an integer in 1..999999999999"),
            ("every 8", 7, "8", "expected '(' after 'every'"),
            ("pp in {0, 1", 12, "", "expected ',' or '}' in the set"),
            ("tp == 0 and", 12, "", "expected a term"),
            ("", 1, "", "empty selector"),
            ("tp == 0 @ pp == 1", 9, "@", "expected 'and' or the end"),
            ("rank == -1", 9, "-", "expected an integer or 'last'"),
            ("tp == 1.5", 8, ".", "expected 'and' or the end"),
            ("tp == é", 7, "é", "expected an integer or 'last'"),
        ],
    )
    def test_errors_point_at_the_bad_token(self, text: str, column: int, token: str, problem: str) -> None:
        with pytest.raises(ConfigError) as caught:
            parse_selector(text, where="ProfilerConfig.select")
        first, shown, caret = str(caught.value).split("\n")
        assert first.startswith(f"ProfilerConfig.select: {problem}")
        assert first.endswith(f"at column {column}")
        assert shown == f"  {text}"
        assert caret == "  " + " " * (column - 1) + "^" * max(len(token), 1)
        if token:
            assert f"got {token!r}" in first

    @given(selector_terms, st.sampled_from(["tpp", "==", "}", "last", "7", "and"]))
    def test_a_bad_term_after_valid_ones_is_pointed_at(self, chosen: list[tuple], bad: str) -> None:
        prefix = " and ".join(render(t, " ") for t in chosen) + " and "
        with pytest.raises(ConfigError) as caught:
            parse_selector(prefix + bad + " == 0")
        first, _, caret = str(caught.value).split("\n")
        assert first.endswith(f"at column {len(prefix) + 1}")
        assert caret.index("^") == 2 + len(prefix)

    @pytest.mark.parametrize("value", [None, 3, ["tp == 0"], b"tp == 0", "tp == 0\nand pp == 0", "x" * 5000])
    def test_non_selectors_are_refused(self, value: object) -> None:
        with pytest.raises(ConfigError, match="selector"):
            parse_selector(value)

    def test_no_eval(self) -> None:
        with pytest.raises(ConfigError, match="unknown term"):
            parse_selector("__import__('os').system('true')")


class TestWhatTermsNeed:
    def test_missing_coordinate_is_named(self) -> None:
        topology = Topology(rank=1, world_size=4, local_rank=1, parallel=Parallel(dp=1))
        with pytest.raises(ConfigError, match="'tp == 0' needs the tp coordinate"):
            is_rank_selected(1, (), select="tp == 0", topology=topology)
        with pytest.raises(ConfigError, match="needs the dp size"):
            is_rank_selected(1, (), select="dp == last", topology=topology)
        assert is_rank_selected(1, (), select="dp in {1, 5}", topology=topology)

    def test_first_per_node_needs_the_local_rank(self) -> None:
        topology = Topology(rank=1, world_size=4, local_rank=None)
        with pytest.raises(ConfigError, match="LOCAL_RANK"):
            is_rank_selected(1, (), select="first_per_node", topology=topology)
        assert is_rank_selected(0, (), select="first_per_node", topology=Topology(rank=0, world_size=1))

    def test_one_per_dp_group_ignores_dimensions_the_process_lacks(self) -> None:
        """FSDP only (a dp dimension): every rank is its own data-parallel index."""
        for rank in range(4):
            topology = Topology(rank=rank, world_size=4, parallel=Parallel(dp=rank, dp_size=4))
            assert is_rank_selected(rank, (), select="one_per_dp_group", topology=topology)

    def test_hook_ranks_follow_the_selector(self) -> None:
        layout = GridLayout(world_size=8, tp=2)
        config = ProfilerConfig(enable=True, select="tp == 1", finish_hook=FinishHook(cmd="true"))
        hook = [r for r in range(8) if decide(config, layout.topology(r)).runs_hook]
        assert hook == [1, 3, 5, 7]


class TestConfig:
    def test_select_is_stored_canonically_and_round_trips(self) -> None:
        config = ProfilerConfig(enable=True, select="pp in {last,0} and tp==0")
        assert config.select == "pp in {0, last} and tp == 0"
        assert ProfilerConfig.from_mapping(config.to_mapping()) == config

    def test_validated_when_built(self) -> None:
        with pytest.raises(ConfigError, match=r"ProfilerConfig.select: .* at column 1"):
            ProfilerConfig.from_mapping({"select": "tq == 0"})

    @pytest.mark.parametrize("other", [{"ranks": [1]}, {"all_ranks": True}])
    def test_select_excludes_ranks_and_all_ranks(self, other: dict) -> None:
        with pytest.raises(ConfigError, match="both choose the profiled ranks"):
            ProfilerConfig(select="tp == 0", **other)

    def test_ranks_keep_their_contract(self) -> None:
        with pytest.raises(ConfigError, match="ProfilerConfig.ranks"):
            ProfilerConfig(ranks="tp == 0")  # type: ignore[arg-type]
        assert ProfilerConfig(ranks=[3, 1]).ranks == (1, 3)

    @given(layouts(), selector_terms, selector_terms)
    def test_intersect_of_selectors_selects_both(self, shape: tuple[int, ...], a: list[tuple], b: list[tuple]) -> None:
        tp, pp, cp, dp, nodes = shape
        layout = GridLayout(world_size=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, nodes=nodes)
        first = ProfilerConfig(enable=True, steps=[1], select=" and ".join(render(t, " ") for t in a))
        second = ProfilerConfig(enable=True, steps=[1], select=" and ".join(render(t, " ") for t in b))
        both = first.intersect(second)
        assert both.select is not None
        assert set(resolved(both.select, layout)) == set(resolved(first.select or "", layout)) & set(
            resolved(second.select or "", layout)
        )

    def test_intersect_of_a_selector_and_a_rank_list(self) -> None:
        layout = GridLayout(world_size=8, tp=2)
        mixed = ProfilerConfig(enable=True, steps=[1], select="tp == 0").intersect(
            ProfilerConfig(enable=True, steps=[1], ranks=[2, 3, 6])
        )
        assert mixed.select is not None and resolved(mixed.select, layout) == [2, 6]

    def test_union_of_different_selectors_is_refused(self) -> None:
        a = ProfilerConfig(enable=True, steps=[1], select="tp == 0")
        assert a.union(a) == a
        with pytest.raises(ConfigError, match="a selector has no 'or'"):
            a.union(ProfilerConfig(enable=True, steps=[1], select="pp == 0"))
        with pytest.raises(ConfigError, match="a selector has no 'or'"):
            a.union(ProfilerConfig(enable=True, steps=[1], ranks=[1]))


class TestPlanCommand:
    @pytest.mark.slow
    def test_plan_prints_the_selected_ranks(self, tmp_path: Path) -> None:
        (tmp_path / "p.yaml").write_text('enable: true\nsteps: [1]\nselect: "tp == 0 and pp in {0, last}"\n')
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "profdsl",
                "plan",
                str(tmp_path / "p.yaml"),
                "--world-size",
                "64",
                "--tp",
                "4",
                "--pp",
                "2",
                "--nodes",
                "8",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        import json

        found = json.loads(out.stdout)
        expected = oracle([("match", "tp", [0]), ("match", "pp", [0, "last"])], enumerate_layout(4, 2, 1, 8, 8))
        assert found["ranks"] == expected == list(range(0, 64, 4))
        assert found["layout"] == {"tp": 4, "pp": 2, "cp": 1, "dp": 8, "nodes": 8}
        assert found["coords"][9] == {"tp": 0, "pp": 1, "dp": 1, "cp": 0, "node": 4}
        text = subprocess.run(
            [
                sys.executable,
                "-m",
                "profdsl",
                "plan",
                str(tmp_path / "p.yaml"),
                "--world-size",
                "64",
                "--tp",
                "4",
                "--pp",
                "2",
                "--nodes",
                "8",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
        assert "profiled ranks (16 of 64): 0, 4, 8" in text and "rank 36: tp=0 pp=1 dp=1 cp=0 node=4" in text

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--tp", "3"], "world size 8 is not a multiple of tp*pp*cp = 3*1*1 = 3"),
            (["--nodes", "3"], "not a multiple of nodes = 3"),
            (["--tp", "0"], "GridLayout.tp must be an integer in 1..1000000, got 0"),
        ],
    )
    @pytest.mark.slow
    def test_bad_layouts_exit_2(self, tmp_path: Path, args: list[str], message: str) -> None:
        (tmp_path / "p.yaml").write_text("enable: true\nsteps: [1]\nselect: every(2)\n")
        out = subprocess.run(
            [sys.executable, "-m", "profdsl", "plan", str(tmp_path / "p.yaml"), "--world-size", "8", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 2 and message in out.stderr

    @pytest.mark.slow
    def test_a_bad_selector_points_at_its_token(self, tmp_path: Path) -> None:
        (tmp_path / "p.yaml").write_text('enable: true\nselect: "tp == 0 and pp in {0, lats}"\n')
        out = subprocess.run(
            [sys.executable, "-m", "profdsl", "plan", str(tmp_path / "p.yaml"), "--world-size", "8"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 2
        assert out.stderr.splitlines()[1:] == ["  tp == 0 and pp in {0, lats}", " " * 24 + "^^^^"]

    @pytest.mark.slow
    def test_a_term_the_layout_cannot_answer(self, tmp_path: Path) -> None:
        (tmp_path / "p.yaml").write_text('enable: true\nsteps: [1]\nselect: "ep == 0"\n')
        out = subprocess.run(
            [sys.executable, "-m", "profdsl", "plan", str(tmp_path / "p.yaml"), "--world-size", "8"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 2 and "needs the ep coordinate" in out.stderr


def test_every_term_in_the_docs_grammar_parses() -> None:
    """The terms docs/configuration.md lists all parse (and nothing else is claimed)."""
    for text in (
        "tp == 0",
        "pp in {0, last}",
        "dp == 0",
        "first_per_node",
        "one_per_dp_group",
        "every(8)",
        "rank in {0, 8}",
        "cp == last",
        "ep == 0",
        "tp == 0 and pp in {0, last} and every(8)",
    ):
        assert parse_selector(parse_selector(text).format()) == parse_selector(text)
