"""The culprit at NCCL collectives: each rank's wait is its NCCL kernel, matched across ranks by
the collective's process group and sequence number (``docs/ledger.md``).

No GPU here: the traces are built to the format torch 2.13 and kineto write on a GPU run, from
their source:

- ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``, ``ProcessGroupNCCL::allreduce``: a
  ``RECORD_PARAM_COMMS_DATA`` scope (seq ``seqCollective_ + 1``, PG name ``(pg_uid_, pg_desc_)``,
  collective name ``"allreduce"``) around ``allreduce_impl(tensor, "nccl:all_reduce", opts)``,
  which launches the kernel: the launch runs inside the ``record_param_comms`` CPU event;
- ``torch/csrc/profiler/util.cpp``, ``saveNcclMeta`` (lines 467-526 of the version read):
  that event's args ``Collective name``, ``dtype``, ``In msg nelems``, ``Out msg nelems``,
  ``Group size``, ``Process Group Name``, ``Process Group Description``, ``Process Group
  Ranks``, ``Rank`` and, where the sequence number is set, ``Seq`` and ``Comms Id``; the keys are
  ``kCommsName`` ... ``kSeqNum`` of ``torch/csrc/profiler/util.h`` (checked in the installed
  torch 2.13's headers);
- kineto's trace: the launch (``cudaLaunchKernel``, category ``cuda_runtime``) and the kernel
  (category ``kernel``, on the device's pid and its stream's tid) share ``args.correlation``;
  NCCL's kernels are named ``ncclDevKernel_<Op>_<RedOp>_<type>_<ALGO>_<PROTO>(...)`` (NCCL 2.19
  and later) or ``ncclKernel_...`` (earlier), the prefixes HolisticTraceAnalysis reads
  (``hta/analyzers/straggler.py``: ``ncclKernel``; its ``hta/configs/default_event_args.py``
  names the same NCCL args), and a kernel lasts from when it began waiting for its peers to the
  collective's end.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from profdsl.analysis._collectives import Arrival, blame, match
from profdsl.analysis._nccl import op_name
from profdsl.collect._manifest import append_record, make_record

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _collective(
    rank: int, seq: int, group: str, ranks: list[int], launch_us: float, wait_from_us: float, end_us: float, corr: int
) -> list[dict[str, Any]]:
    """One all_reduce on ``rank``: the CPU events around its launch and its kernel."""
    comms = {
        "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024,
        "Group size": len(ranks), "Process Group Name": group, "Process Group Description": "default_pg",
        "Process Group Ranks": str(ranks), "Rank": ranks.index(rank), "Seq": seq, "Comms Id": 1000 + seq,
        "Is asynchronized op": 0, "External id": corr, "Record function id": 0,
    }  # fmt: skip
    return [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": launch_us - 5,
         "dur": 30, "args": comms},
        {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": launch_us - 2, "dur": 20,
         "args": {"External id": corr + 1, "Record function id": 0}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch_us, "dur": 8,
         "args": {"External id": corr + 1, "cbid": 211, "correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": wait_from_us,
         "dur": end_us - wait_from_us,
         "args": {"External id": corr + 1, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr,
                  "registers per thread": 96, "grid": [2, 1, 1], "block": [544, 1, 1]}},
    ]  # fmt: skip


def _nccl_folder(folder: Path) -> Path:
    """Step 1 of 3 ranks, update_actor [0, 5000) µs: three all_reduces of the world group (seq 1,
    2, 3), rank 1's kernels starting 1000 µs after the others' at seq 1 and 3; between seq 1 and
    2, ranks 0 and 1 alone run an all_reduce of their own group ``1``, so the ranks' sequences of
    kernels differ and matching by order would pair rank 2's seq 2 with their group 1 one."""
    folder.mkdir()
    for rank in range(3):
        events: list[dict[str, Any]] = [
            {"ph": "X", "cat": "user_annotation", "name": "update_actor", "pid": 1, "tid": 1, "ts": 0, "dur": 5000}
        ]
        late = 1000 if rank == 1 else 0
        events += _collective(rank, 1, "0", [0, 1, 2], 100 + late, 110 + late + rank, 1200, 10)
        if rank < 2:
            events += _collective(rank, 1, "1", [0, 1], 1300, 1310 + 50 * rank, 1500, 20)
        events += _collective(rank, 2, "0", [0, 1, 2], 1600, 1610 + 20 * rank, 1800, 30)
        events += _collective(rank, 3, "0", [0, 1, 2], 2000 + late, 2010 + late + rank, 3100, 40)
        trace = {
            "profdsl": {"role": "actor", "step": 1, "rank": rank, "world_size": 3,
                        "regions": {"stages": ["update_actor"]}},
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 3},
            "baseTimeNanoseconds": 1_790_000_000_000_000_000,
            "traceEvents": events,
        }  # fmt: skip
        name = f"r{rank}.pt.trace.json.gz"
        with gzip.open(folder / name, "wt") as file:
            json.dump(trace, file)
        record = make_record(
            "trace", name, role="actor", step=1, rank=rank, world_size=3, bytes=(folder / name).stat().st_size
        )
        assert append_record(folder, record)
    return folder


def _stragglers(folder: Path, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "profdsl", "summary", str(folder), "--stragglers", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_nccl_kernels_name_the_rank_that_launched_late(tmp_path: Path) -> None:
    """Rank 1's kernels at seq 1 and 3 wait 89 µs against the others' 1090 and 1088: it
    arrived last at both, 1000 µs late each (the others' median wait less its own); the group
    ``1`` all_reduce has rank 1 last by 50 µs (140 against 190); at seq 2 rank 2 was last (150
    against 190 and 170: 30 µs). Matched by order, rank 2's seq 2 would meet the others' group 1
    all_reduce and its seq 3 their seq 2."""
    data = _stragglers(_nccl_folder(tmp_path / "profiles"), "--late-ms", "0.5")
    [stage] = data["stages"]
    assert stage["stage"] == "update_actor" and stage["collectives"] == 4 and stage["ranks"] == 3
    assert stage["culprit"] == 1 and stage["culprit_last_at"] == 3
    assert stage["late_ms"] == {"0": 0.0, "1": 2.05, "2": 0.03}
    assert data["notes"] == []


def _nccl(rank: int, start: float, end: float, key: tuple[str, int] | None) -> Arrival:
    return Arrival(rank, "nccl:AllReduce", start, end - start, "update_actor", key)


def test_without_group_and_sequence_nccl_kernels_match_by_order_apart_from_gloos() -> None:
    """Kernels that say neither group nor sequence number are matched by their order on each
    rank, as gloo's events are, each backend's apart: a gloo collective between two NCCL ones
    does not shift the NCCL ones' pairing."""
    per_rank = {
        0: [_nccl(0, 0, 100, None), Arrival(0, "gloo:barrier", 150, 40, "update_actor"), _nccl(0, 200, 300, None)],
        1: [_nccl(1, 60, 100, None), _nccl(1, 210, 300, None), Arrival(1, "gloo:barrier", 250, 2, "update_actor")],
    }
    found, note = match("actor", 1, per_rank)
    assert note is None
    assert [(m.arrivals[0].name, m.last, m.late_us) for m in found] == [
        ("gloo:barrier", 1, 38.0),
        ("nccl:AllReduce", 1, 60.0),
        ("nccl:AllReduce", 1, 10.0),
    ]
    [stage] = blame(found, threshold_us=50.0)
    assert stage.culprit == 1 and stage.late_us == {0: 0.0, 1: 108.0}


def test_keyed_collectives_match_over_the_ranks_that_hold_them() -> None:
    """A sequence number only one rank traced matches nothing; ranks' NCCL kernels with the same
    group and sequence number match whatever their order."""
    per_rank = {
        0: [_nccl(0, 0, 100, ("0", 2)), _nccl(0, 200, 300, ("0", 1)), _nccl(0, 400, 500, ("0", 9))],
        1: [_nccl(1, 250, 300, ("0", 1)), _nccl(1, 10, 100, ("0", 2))],
    }
    found, note = match("actor", 1, per_rank)
    assert note is None
    assert [(m.last, m.late_us, [a.start_us for a in m.arrivals]) for m in found] == [
        (1, 10.0, [0, 10]),
        (1, 50.0, [200, 250]),
    ]


def test_a_kernels_op_is_read_from_its_name() -> None:
    assert op_name(KERNEL) == "nccl:AllReduce"
    assert op_name("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)") == "nccl:AllGather"
    assert op_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "nccl:SendRecv"
