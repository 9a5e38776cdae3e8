"""Parallel coordinates in every trace: explicit values, a named DeviceMesh and Megatron's
parallel_state in real gloo process groups on CPU, and rank selectors resolved on them as
``profdsl plan`` predicts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from profdsl import Profiler, ProfilerConfig, profile_stage
from profdsl.analysis._catalog import catalog
from profdsl.collect._export import PendingTrace, TraceLabel
from profdsl.collect._relocate import plan_nsys
from profdsl.config._checks import MAX_WIDE_INDEX
from profdsl.config._parallel import MAX_COORD, Parallel
from profdsl.core._parallel_discovery import resolve_parallel
from profdsl.core._topology import GridLayout
from profdsl.core.preview import preview
from profdsl.errors import ConfigError
from profdsl.manifest import read_manifest
from profdsl.naming import TraceName

from .profiling import config, work
from .traces import parsed

torch = pytest.importorskip("torch")

WORKER = Path(__file__).with_name("parallel_worker.py")
ROOT = Path(__file__).resolve().parent.parent


def traces(folder: Path) -> list[tuple[TraceName, dict[str, Any]]]:
    return parsed(folder) if folder.exists() else []


class TestExplicit:
    def test_coordinates_reach_name_metadata_manifest_and_catalog(self, tmp_path: Path) -> None:
        parallel = {"tp": 1, "pp": 0, "dp": 3, "sizes": {"tp": 2, "pp": 1, "dp": 4}}
        with Profiler(
            config(tmp_path, all_ranks=True), role="actor", rank=7, world_size=8, parallel=parallel
        ) as profiler:
            with profiler.step(1), profile_stage("update_actor"):
                work()
        [(name, trace)] = parsed(tmp_path)
        assert (name.tp, name.pp, name.dp, name.cp, name.ep) == (1, 0, 3, None, None)
        assert "_rank7-of-8_tp1-pp0-dp3_" in name.format()
        assert trace["profdsl"]["parallel"] == {"tp": 1, "pp": 0, "dp": 3}
        assert trace["profdsl"]["parallel_sizes"] == {"tp": 2, "pp": 1, "dp": 4}
        [record] = [r for r in read_manifest(tmp_path) if r["kind"] == "trace"]
        assert (record["tp"], record["pp"], record["dp"]) == (1, 0, 3) and "cp" not in record
        assert record["parallel_sizes"] == {"tp": 2, "pp": 1, "dp": 4}
        [artifact] = [a for a in catalog(tmp_path).artifacts if a.kind == "trace"]
        assert artifact.parallel == (("tp", 1), ("pp", 0), ("dp", 3))

    def test_the_attrs_class_and_a_plain_run(self, tmp_path: Path) -> None:
        with (
            Profiler(
                config(tmp_path / "a"), role="actor", rank=0, world_size=1, parallel=Parallel(cp=2, ep=0)
            ) as profiler,
            profiler.step(1),
        ):
            work()
        [(name, trace)] = parsed(tmp_path / "a")
        assert "_rank0-of-1_cp2-ep0_" in name.format() and trace["profdsl"]["parallel_sizes"] == {}
        with Profiler(config(tmp_path / "b"), role="actor", rank=0, world_size=1) as profiler, profiler.step(1):
            work()
        [(name, trace)] = parsed(tmp_path / "b")
        assert name.tp is None and trace["profdsl"]["parallel"] == {}
        assert catalog(tmp_path / "b").artifacts[0].parallel == ()

    def test_name_too_long_leaves_the_coordinates_out(self) -> None:
        """Wide indices, long labels and the widest coordinates would pass the 255-byte limit:
        the name leaves the coordinates out (they stay in the metadata and record) rather than
        the trace being lost; a name that fits keeps them."""
        coords = Parallel(**dict.fromkeys(("tp", "pp", "dp", "cp", "ep"), MAX_COORD))
        label = TraceLabel(
            role="r" * 30,
            stage="s" * 40,
            step=MAX_WIDE_INDEX,
            rank=MAX_WIDE_INDEX - 1,
            world_size=MAX_WIDE_INDEX,
            save_path="/x",
            host="h" * 40,
            pid=2**32 - 1,
            config_hash="0",
            part=MAX_WIDE_INDEX,
            parallel=coords,
        )
        pending = PendingTrace(
            label=label, window=(MAX_WIDE_INDEX - 1, MAX_WIDE_INDEX), time_ms=0, extra=None, events="/x/e"
        )
        name = pending.name()
        assert name.tp is None and len(name.format()) <= 255
        assert pending.fields()["tp"] == MAX_COORD
        short = attrs.evolve(label, step=1, rank=1, world_size=2, part=None)
        assert attrs.evolve(pending, label=short, window=None).name().ep == MAX_COORD

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ({"tp": -1}, "Parallel.tp must be an integer in 0..999999"),
            ({"tp": True}, "Parallel.tp must be an integer"),
            ({"tpp": 1}, "unknown key 'tpp' in Profiler parallel; did you mean 'tp'?"),
            ({"tp": 2, "tp_size": 2}, "Parallel.tp must be < tp_size (2), got 2"),
            ({"sizes": {"xp": 2}}, "unknown dimension 'xp'"),
            ({"sizes": [2]}, "sizes must be a mapping"),
            ("tp1", "Profiler parallel must be a dict"),
            (3, "Profiler parallel must be a dict"),
        ],
    )
    def test_bad_values_are_refused_when_the_profiler_is_built(
        self, tmp_path: Path, value: object, message: str
    ) -> None:
        with pytest.raises(ConfigError, match=re.escape(message)):
            Profiler(config(tmp_path), role="actor", rank=0, world_size=1, parallel=value)

    def test_a_selector_the_process_cannot_answer_fails_at_construction(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="needs the pp size"):
            Profiler(config(tmp_path, select="pp == last"), role="actor", rank=0, world_size=2, parallel={"pp": 0})

    def test_selected_from_explicit_coordinates(self, tmp_path: Path) -> None:
        layout = GridLayout(world_size=8, tp=2, pp=2)
        cfg = config(tmp_path, select="tp == 1 and pp == last")
        picked = []
        for rank in range(8):
            where = layout.topology(rank).parallel
            with Profiler(cfg, role="actor", rank=rank, world_size=8, parallel=where) as profiler:
                if profiler.selected:
                    picked.append(rank)
        assert picked == list(preview(cfg, world_size=8, layout=layout).ranks) == [5, 7]

    def test_nsys_report_names_carry_coordinates(self) -> None:
        label = {"role": "actor", "rank": 3, "world_size": 4, "host": "n1", "tp": 1, "pp": 1}
        [move] = plan_nsys(["worker_process_42.nsys-rep"], source_dir="/x", pid=42, label=label, time_ms=0)
        assert "_rank3-of-4_tp1-pp1_" in move.name.format()  # type: ignore[union-attr]

    @pytest.mark.slow
    def test_megatron_is_never_imported(self) -> None:
        script = (
            "import sys, profdsl\n"
            "from profdsl import Profiler, ProfilerConfig\n"
            "import torch.distributed\n"
            "Profiler(ProfilerConfig(enable=True, steps=[1], select='every(1)'), role='a',"
            " rank=0, world_size=1)\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'megatron'], 'megatron imported'\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr

    def test_device_mesh_without_names_is_refused(self) -> None:
        class Unnamed:
            mesh_dim_names = None

            def get_coordinate(self) -> tuple[int, ...]:
                return (0,)

        with pytest.raises(ConfigError, match="without mesh_dim_names"):
            resolve_parallel(Unnamed())


def run_group(mode: str, tmp_path: Path, world: int = 4) -> list[dict[str, Any]]:
    """Run ``world`` ranks of parallel_worker.py in a real gloo group; their findings."""
    out = tmp_path / "out"
    out.mkdir()
    store = tmp_path / "store"
    procs = []
    for rank in range(world):
        env = dict(os.environ, LOCAL_RANK=str(rank % 2), PYTHONPATH=str(ROOT))  # two "nodes" of two
        env.pop("RANK", None)
        env.pop("WORLD_SIZE", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), mode, str(rank), str(world), str(store), str(out)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=540)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def check_group(tmp_path: Path, found: list[dict[str, Any]], roles: dict[str, str | None]) -> None:
    """pp=2 x dp=1 x tp=2, tp fastest: rank r is tp r%2, pp r//2 (GridLayout's order)."""
    layout = GridLayout(world_size=4, tp=2, pp=2, nodes=2)
    for rank, seen in enumerate(found):
        assert seen["ref"]["coords"] == {"tp": rank % 2, "pp": rank // 2, "dp": 0}
        assert seen["ref"]["sizes"] == {"tp": 2, "pp": 2, "dp": 1}
        assert seen["critic"]["local_rank"] == rank % 2 and seen["ref"]["local_rank"] is None
    for role, select in roles.items():
        folder = tmp_path / "out" / role
        wrote = sorted(name.rank for name, _ in traces(folder))
        cfg = ProfilerConfig(enable=True, steps=[1], select=select, all_ranks=select is None)
        predicted = list(preview(cfg, world_size=4, layout=layout).ranks)
        assert wrote == predicted == [r for r in range(4) if found[r][role]["selected"]], role
        for name, trace in traces(folder):
            assert r"_" + f"tp{name.rank % 2}-pp{name.rank // 2}-dp0_" in name.format()  # type: ignore[operator]
            assert trace["profdsl"]["parallel"] == {"tp": name.rank % 2, "pp": name.rank // 2, "dp": 0}  # type: ignore[operator]
            assert trace["distributedInfo"]["rank"] == name.rank
        records = [r for r in read_manifest(folder) if r["kind"] == "trace"]
        assert sorted((r["rank"], r["tp"], r["pp"], r["dp"]) for r in records) == [
            (r, r % 2, r // 2, 0) for r in predicted
        ]


ROLES = {"actor": "tp == 0 and pp == last", "critic": "first_per_node", "ref": None}


@pytest.mark.slow
def test_named_device_mesh_in_a_gloo_group(tmp_path: Path) -> None:
    """init_device_mesh('cpu', (2, 1, 2), mesh_dim_names=('pp', 'dp', 'tp')) in 4 real processes:
    coordinates discovered from the mesh's groups, from the active mesh (``with mesh:``) and
    given as ``parallel=mesh``; selectors pick what ``plan`` predicts; Megatron not imported."""
    found = run_group("mesh", tmp_path)
    check_group(tmp_path, found, {**ROLES, "explicit": "one_per_dp_group"})
    assert [r for r, f in enumerate(found) if f["actor"]["selected"]] == [2]
    assert [r for r, f in enumerate(found) if f["critic"]["selected"]] == [0, 2]
    assert not any(f["megatron_imported"] for f in found)


@pytest.mark.skipif(
    importlib.util.find_spec("megatron") is None,
    reason="megatron-core is installed by the test setup (.ci/run, README)",
)
@pytest.mark.slow
def test_megatron_parallel_state_in_a_gloo_group(tmp_path: Path) -> None:
    """Megatron's initialize_model_parallel(tp=2, pp=2) on 4 real gloo processes: its
    coordinates name the traces and answer the selectors."""
    found = run_group("megatron", tmp_path)
    check_group(tmp_path, found, ROLES)
    assert all(f["megatron_imported"] for f in found)


def test_plan_cli_predicts_the_gloo_selection(tmp_path: Path) -> None:
    """The command line gives the same ranks the gloo groups above select."""
    for select, expected in (("tp == 0 and pp == last", [2]), ("first_per_node", [0, 2])):
        (tmp_path / "p.yaml").write_text(f'enable: true\nsteps: [1]\nselect: "{select}"\n')
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "profdsl",
                "plan",
                str(tmp_path / "p.yaml"),
                "--world-size",
                "4",
                "--tp",
                "2",
                "--pp",
                "2",
                "--nodes",
                "2",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["ranks"] == expected


def test_check_with_a_selector_config_expects_no_rank_it_cannot_place(tmp_path: Path) -> None:
    """``profdsl check --config`` with a ``select``: ranks are placed by their coordinates, which
    only the writers know; it no longer expects rank 0 (what an empty ``ranks`` would mean)."""
    cfg = config(tmp_path / "out", select="tp == 1")
    layout = GridLayout(world_size=4, tp=2)
    for rank in range(4):
        with Profiler(cfg, role="actor", rank=rank, world_size=4, parallel=layout.topology(rank).parallel) as p:
            with p.step(1):
                work()
    assert sorted(n.rank for n, _ in parsed(tmp_path / "out")) == [1, 3]
    (tmp_path / "c.yaml").write_text("enable: true\nsteps: [1]\nselect: tp == 1\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "profdsl",
            "check",
            str(tmp_path / "out"),
            "--config",
            str(tmp_path / "c.yaml"),
            "--world-size",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
