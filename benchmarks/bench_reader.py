"""Speed and peak memory of the streaming trace reader against plain ``json.load``.

    python benchmarks/bench_reader.py [--size-mb 500] [--dir DIR] [--keep] [--repeat N]

Writes a synthetic Chrome trace shaped like torch's ``export_chrome_trace`` output (a header with
``schemaVersion``, ``deviceProperties``, ``profdsl``, ``distributedInfo`` and
``baseTimeNanoseconds``, then ``traceEvents``: ``M`` metadata, ``user_annotation`` stages and
mini-batches, ``cpu_op`` events with ``args`` such as ``External id`` and ``Input Dims``,
``cuda_runtime`` launches, ``kernel`` events and the ``ac2g`` flow pairs joining them, in torch's
indented layout) of about ``--size-mb`` MB uncompressed, as ``.json`` and ``.json.gz``. The trace is
generated in chunks and both files are written at once, so generation needs little memory too.

Each method then runs in a fresh subprocess (this script with the hidden ``--child`` option), so its
peak memory is its own:

* ``json.load (.json)``: the whole file parsed with the standard library, X events counted;
* ``events() (.json)``: :func:`profdsl.analysis._reader.events`, counting X events and summing ``dur``;
* ``events() (.json.gz)``: the same over the gzip file, decompressed on the fly;
* ``header() (.json.gz)``: :func:`profdsl.analysis._reader.header`, which reads only the file's head.

The child imports everything first, resets the kernel's peak-RSS mark (``/proc/self/clear_refs``),
reads its baseline ``VmRSS``, does the work, then reports ``VmHWM - baseline``: the memory the method
itself needed. Where ``clear_refs`` cannot be written, the baseline is the ``VmHWM`` after imports
(or ``ru_maxrss`` without ``/proc``). Wall time covers only the work, not the interpreter start.
Throughput is the uncompressed size divided by the wall time (not given for ``header()``, which
does not read the file). MB means 10**6 bytes throughout. The files were just written, so reads hit
the page cache: the figures measure parsing, not the disk.

Event counts, total events and the ``dur`` sum must agree between methods and with what the
generator wrote, and ``header()`` must return the written header; otherwise the script exits 1.
Generated files are deleted at the end unless ``--keep``.

With ``--summary`` it measures instead what a user waits for after a run: ``profdsl
summary`` of a folder of ``--traces`` such traces (``--size-mb`` each, gzipped, with a manifest),
against ``json.load`` of the same files in turn and ``zcat`` of them (the floor: decompression
alone), each a whole command in a fresh process, ``--repeat`` times in rotating order (medians).
The summary's numbers must equal an independent recount from the ``json.load``-ed events to the
nanosecond. Then the peak RSS of ``profdsl summary`` on one trace of ``--memory-mb`` MB. Bars:
summary <= 0.35x json.load; peak RSS < 400 MB (``--check`` exits 1 when one is missed).

    python benchmarks/bench_reader.py --summary [--traces 4] [--size-mb 40] [--memory-mb 225] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import ijson  # type: ignore[import-untyped]
from _args import count

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
GZIP_LEVEL = 6
RESULT_TAG = "BENCH_READER_RESULT "

METHODS: dict[str, str] = {
    "json_load": "json.load (.json)",
    "events_json": "events() (.json)",
    "events_gz": "events() (.json.gz)",
    "header_gz": "header() (.json.gz)",
}

# --------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------

PID = 48213
TID = 48213
GPU_PID = 0
STREAM = 7
BASE_TIME_NS = 1_790_857_026_000_000_000
T0_NS = 5_094_479_207_969_060  # torch's ts are microseconds with three decimals

STAGES = ("generate_sequences", "compute_log_prob", "compute_values", "update_actor")
MINI_BATCH = "mini_batch_"

#: (name, input dims, input types, launches a kernel)
CPU_OPS: tuple[tuple[str, str, str, bool], ...] = (
    ("aten::linear", "[[8, 4096], [4096, 4096], [4096]]", '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]', True),
    (
        "aten::addmm",
        "[[4096], [8, 4096], [4096, 4096], [], []]",
        '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]',
        True,
    ),
    ("aten::empty", "[[], [], [], [], [], []]", '["ScalarList", "Scalar", "", "Device", "Scalar", ""]', False),
    ("aten::view", "[[8, 128, 4096], []]", '["c10::BFloat16", "ScalarList"]', False),
    ("aten::t", "[[4096, 4096]]", '["c10::BFloat16"]', False),
    ("aten::transpose", "[[4096, 4096], [], []]", '["c10::BFloat16", "Scalar", "Scalar"]', False),
    ("aten::softmax", "[[8, 32, 128, 128], [], []]", '["float", "Scalar", ""]', True),
    ("aten::mul", "[[8, 128, 4096], [8, 128, 4096]]", '["c10::BFloat16", "c10::BFloat16"]', True),
    ("aten::add_", "[[8, 128, 4096], [8, 128, 4096], []]", '["c10::BFloat16", "c10::BFloat16", "Scalar"]', True),
    ("aten::copy_", "[[8, 128, 4096], [8, 128, 4096], []]", '["float", "c10::BFloat16", "Scalar"]', True),
    (
        "aten::_to_copy",
        "[[8, 128, 4096], [], [], [], [], [], []]",
        '["c10::BFloat16", "Scalar", "", "", "", "Scalar", ""]',
        False,
    ),
    (
        "aten::scaled_dot_product_attention",
        "[[8, 32, 128, 128], [8, 32, 128, 128], [8, 32, 128, 128], [], [], [], [], []]",
        '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar", "", "Scalar"]',
        True,
    ),
)
KERNELS = (
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t> >(Flash_fwd_params)",
)


def torch_header(size_mb: float) -> dict[str, Any]:
    """The top-level keys torch (and profdsl's metadata) put before ``traceEvents``."""
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": i,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 84929216512,
                "computeMajor": 9,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "numSms": 132,
                "regsPerMultiprocessor": 65536,
                "sharedMemPerBlockOptin": 232448,
                "sharedMemPerMultiprocessor": 233472,
            }
            for i in range(8)
        ],
        "profdsl": {
            "role": "actor",
            "roles": ["actor", "ref"],
            "stage": "update_actor",
            "step": 3,
            "rank": 0,
            "world_size": 8,
            "window": None,
            "config_hash": "3f9a1c2e",
            "host": "node-0",
            "pid": PID,
            "regions": {"stages": sorted(STAGES), "mini_batches": [MINI_BATCH]},
            "synthetic_size_mb": size_mb,
        },
        "distributedInfo": {
            "backend": "nccl",
            "rank": 0,
            "world_size": 8,
            "pg_count": 3,
            "pg_config": [],
            "nccl_version": "2.21.5",
        },
        "trace_id": "B77F300132F644B4A7927076EA7B0DDE",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
    }


def _ts(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _meta(name: str, pid: int | str, tid: int | str, args: str) -> str:
    return (
        f'  {{\n    "ph": "M",\n    "name": "{name}",\n    "ts": {_ts(T0_NS)},\n'
        f'    "pid": {json.dumps(pid)},\n    "tid": {json.dumps(tid)},\n'
        f'    "args": {{\n      {args}\n    }}\n  }}'
    )


Event = tuple[str, str, int | None]  # (text, category, dur in ns for X events)


@dataclass
class Totals:
    """What the generator wrote, in file order, to check every reader against."""

    x_events: int = 0
    events: int = 0
    dur_sum: float = 0.0
    by_cat: dict[str, int] = field(default_factory=dict)

    def add(self, cat: str, dur_ns: int | None) -> None:
        self.events += 1
        self.by_cat[cat] = self.by_cat.get(cat, 0) + 1
        if dur_ns is not None:
            self.x_events += 1
            self.dur_sum += float(_ts(dur_ns))  # the double a JSON parser makes of the same text


class TraceGenerator:
    """Events in torch's layout, one training step (a stage of a few mini-batches) at a time."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.now = T0_NS
        self.gpu_now = T0_NS
        self.external_id = 0
        self.correlation = 0
        self.ev_idx = 0
        self.step = 0

    @staticmethod
    def metadata() -> list[Event]:
        return [
            (text, "M", None)
            for text in (
                _meta("process_name", PID, 0, '"name": "python"'),
                _meta("process_labels", PID, 0, '"labels": "CPU"'),
                _meta("process_sort_index", PID, 0, f'"sort_index": {PID}'),
                _meta("thread_name", PID, TID, f'"name": "thread {TID} (python)"'),
                _meta("thread_sort_index", PID, TID, f'"sort_index": {TID}'),
                _meta("process_name", GPU_PID, 0, '"name": "python"'),
                _meta("process_labels", GPU_PID, 0, '"labels": "GPU 0"'),
                _meta("process_sort_index", GPU_PID, 0, '"sort_index": 5000000'),
                _meta("thread_name", GPU_PID, STREAM, f'"name": "stream {STREAM} "'),
                _meta("thread_sort_index", GPU_PID, STREAM, f'"sort_index": {STREAM}'),
            )
        ]

    @staticmethod
    def _x(cat: str, name: str, pid: int, tid: int, start: int, dur: int, args: str) -> Event:
        return (
            f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": {json.dumps(name)},\n'
            f'    "pid": {pid},\n    "tid": {tid},\n    "ts": {_ts(start)},\n    "dur": {_ts(dur)}\n'
            f'    ,\n    "args": {{\n      {args}\n    }}\n  }}',
            cat,
            dur,
        )

    @staticmethod
    def _flow(ph: str, ident: int, pid: int, tid: int, ts: int) -> Event:
        bp = ',\n    "bp": "e"' if ph == "f" else ""
        return (
            f'  {{\n    "ph": "{ph}",\n    "id": {ident},\n    "pid": {pid},\n    "tid": {tid},\n'
            f'    "ts": {_ts(ts)},\n    "cat": "ac2g",\n    "name": "ac2g"{bp}\n  }}',
            "ac2g",
            None,
        )

    def _annotation(self, name: str, start: int, dur: int) -> Event:
        self.external_id += 1
        self.ev_idx += 1
        return self._x(
            "user_annotation",
            name,
            PID,
            TID,
            start,
            dur,
            f'"External id": {self.external_id},"Record function id": 0, "Ev Idx": {self.ev_idx}',
        )

    def _op(self) -> list[Event]:
        """A cpu_op; one that launches a kernel brings its cudaLaunchKernel, kernel and ac2g pair."""
        rng = self.rng
        name, dims, types, launches = CPU_OPS[rng.randrange(len(CPU_OPS))]
        self.external_id += 1
        self.ev_idx += 1
        start = self.now + rng.randrange(500, 5_000)
        dur = rng.randrange(2_000, 400_000)
        strides = dims.replace("8, 128, 4096", "524288, 4096, 1").replace("4096, 4096", "4096, 1")
        concrete = ", ".join('""' for _ in range(dims.count("[") - 1))
        out = [
            self._x(
                "cpu_op",
                name,
                PID,
                TID,
                start,
                dur,
                f'"External id": {self.external_id},"Record function id": 0, "Concrete Inputs": [{concrete}], '
                f'"Input type": {types}, "Input Strides": {strides}, "Input Dims": {dims}, "Ev Idx": {self.ev_idx}',
            )
        ]
        if launches:
            self.correlation += 1
            launch = start + dur // 3
            out.append(
                self._x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    PID,
                    TID,
                    launch,
                    rng.randrange(3_000, 12_000),
                    f'"External id": {self.external_id}, "cbid": 211, "correlation": {self.correlation}',
                )
            )
            out.append(self._flow("s", self.correlation, PID, TID, launch))
            k_start = max(self.gpu_now, launch + rng.randrange(5_000, 50_000))
            k_dur = rng.randrange(5_000, 900_000)
            out.append(
                self._x(
                    "kernel",
                    KERNELS[rng.randrange(len(KERNELS))],
                    GPU_PID,
                    STREAM,
                    k_start,
                    k_dur,
                    f'"External id": {self.external_id},\n      "queued": 0, "device": 0, "context": 1,\n'
                    f'      "stream": {STREAM}, "correlation": {self.correlation},\n'
                    f'      "registers per thread": 168, "shared memory": 98304,\n'
                    f'      "blocks per SM": 0.484848, "warps per SM": 3.878788,\n'
                    f'      "grid": [64, 1, 1], "block": [256, 1, 1],\n'
                    f'      "est. achieved occupancy %": 6',
                )
            )
            out.append(self._flow("f", self.correlation, GPU_PID, STREAM, k_start))
            self.gpu_now = k_start + k_dur
        self.now = start + dur
        return out

    def step_events(self) -> list[Event]:
        """A stage region, then each mini-batch region followed by its ops."""
        rng = self.rng
        stage = STAGES[self.step % len(STAGES)]
        self.step += 1
        stage_start = self.now + 1_000
        self.now = stage_start + 2_000
        body: list[Event] = []
        for mb in range(rng.randrange(2, 5)):
            mb_start = self.now + 1_000
            self.now = mb_start + 1_000
            ops: list[Event] = []
            for _ in range(rng.randrange(20, 60)):
                ops.extend(self._op())
            self.now += 1_000
            body.append(self._annotation(f"{MINI_BATCH}{mb}", mb_start, self.now - mb_start))
            body.extend(ops)
        self.now += 2_000
        return [self._annotation(stage, stage_start, self.now - stage_start), *body]

    def trailer(self) -> Event:
        return (
            f'  {{\n    "ph": "i",\n    \n    "s": "g",\n    "name": "Record Window End",\n'
            f'    "pid": "",\n    "tid": "",\n    "ts": {_ts(self.now + 1_000)}\n    \n  }}',
            "instant",
            None,
        )


class TeeWriter:
    """Writes the same text to a plain file and a gzip file, counting uncompressed bytes."""

    def __init__(self, plain: IO[bytes], gz: IO[bytes]) -> None:
        self.plain, self.gz, self.size = plain, gz, 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self.plain.write(data)
        self.gz.write(data)
        self.size += len(data)


def generate(json_path: Path, gz_path: Path, size_mb: float, seed: int = 0) -> tuple[dict[str, Any], Totals]:
    """Write the trace to both paths in ~1 MB chunks; return the header written and the event totals.

    Only one chunk of text is in memory at a time; the size lands within one step of ``size_mb``.
    """
    target = int(size_mb * MB)
    head = torch_header(size_mb)
    gen = TraceGenerator(seed)
    totals = Totals()
    end = '\n  ],"traceName": "' + json_path.name + '" }'
    with (
        open(json_path, "wb") as plain,
        open(gz_path, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as gz,
    ):
        out = TeeWriter(plain, gz)  # type: ignore[arg-type]
        fields = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
        out.write("{\n" + fields + ',\n    "traceEvents": [\n    \n')
        first = gen.metadata()
        out.write(",\n".join(text for text, _, _ in first))
        for _, cat, dur in first:
            totals.add(cat, dur)
        done = False
        while not done:
            chunk: list[str] = []
            pending = 0
            while pending < MB:
                step = gen.step_events()
                for text, cat, dur in step:
                    totals.add(cat, dur)
                    chunk.append(text)
                    pending += len(text) + 2
                if out.size + pending >= target - 400:
                    done = True
                    break
            out.write(",\n" + ",\n".join(chunk))
        text, cat, dur = gen.trailer()
        totals.add(cat, dur)
        out.write(",\n" + text + end)
    return head, totals


# --------------------------------------------------------------------------------------------
# Measurement (child side)
# --------------------------------------------------------------------------------------------


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


class PeakMeter:
    """Peak RSS growth of this process from now on."""

    def __init__(self) -> None:
        self.source = "VmHWM after clear_refs"
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak-RSS mark to the current RSS
            rss = _status_kb("VmRSS")
            self.baseline = rss * 1024 if rss is not None else _maxrss_bytes()
        except OSError:
            hwm = _status_kb("VmHWM")
            if hwm is not None:
                self.source, self.baseline = "VmHWM", hwm * 1024
            else:
                self.source, self.baseline = "ru_maxrss", _maxrss_bytes()

    def peak(self) -> int:
        hwm = _status_kb("VmHWM") if self.source != "ru_maxrss" else None
        return hwm * 1024 if hwm is not None else _maxrss_bytes()


def child(method: str, path: str) -> dict[str, Any]:
    """Run one method in this (fresh) process; return its counts, wall seconds and peak memory."""
    sys.path.insert(0, str(ROOT))
    from profdsl.analysis._reader import events, header

    result: dict[str, Any] = {"method": method, "ijson_backend": ijson.backend}
    meter = PeakMeter()
    start = time.perf_counter()
    if method == "json_load":
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
        evs = trace["traceEvents"]
        n_x = 0
        dur = 0.0
        for e in evs:  # the same left-to-right float sum as the streaming methods
            if e.get("ph") == "X":
                n_x += 1
                dur += e["dur"]
        result.update(x_events=n_x, events=len(evs), dur_sum=dur)
        del trace, evs
    elif method in ("events_json", "events_gz"):
        n = n_x = 0
        dur = 0.0
        for e in events(path):
            n += 1
            if e.get("ph") == "X":
                n_x += 1
                dur += e["dur"]
        result.update(x_events=n_x, events=n, dur_sum=dur)
    elif method == "header_gz":
        head = header(path)
        result["header"] = json.loads(json.dumps(head, default=float))
    else:
        raise SystemExit(f"unknown method {method!r}")
    result["wall_s"] = time.perf_counter() - start
    result["peak_bytes"] = meter.peak() - meter.baseline
    result["baseline_bytes"] = meter.baseline
    result["memory_source"] = meter.source
    return result


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def run_child(method: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", method, str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{METHODS[method]} failed (exit {proc.returncode}):\n{proc.stderr}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])  # type: ignore[no-any-return]
    raise RuntimeError(f"{METHODS[method]} printed no result:\n{proc.stdout}\n{proc.stderr}")


def machine_info() -> list[str]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem = _meminfo_total()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"date:      {time.strftime('%Y-%m-%d %H:%M %Z')}",
        f"machine:   {platform.platform()}, {cpu}",
        f"cpus:      {os.cpu_count()} (usable: {usable}), memory: {mem}",
        f"python:    {platform.python_implementation()} {platform.python_version()}",
        f"ijson:     {ijson.__version__}, backend {ijson.backend}",
    ]


def _meminfo_total() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) * 1024 / 2**30:.1f} GiB"
    except OSError:
        pass
    return "?"


def check(results: dict[str, dict[str, Any]], totals: Totals, head: dict[str, Any]) -> list[str]:
    """Disagreements between the methods and what was written (empty when all agree)."""
    problems = []
    for method in ("json_load", "events_json", "events_gz"):
        r = results[method]
        for key, want in (("x_events", totals.x_events), ("events", totals.events)):
            if r[key] != want:
                problems.append(f"{METHODS[method]}: {key} {r[key]} != {want} written")
        if not math.isclose(r["dur_sum"], totals.dur_sum, rel_tol=1e-9):
            problems.append(f"{METHODS[method]}: dur sum {r['dur_sum']!r} != {totals.dur_sum!r} written")
    got = results["header_gz"]["header"]
    want_head = json.loads(json.dumps(head))
    if got != want_head:
        problems.append(
            f"{METHODS['header_gz']}: header differs from the one written (keys {sorted(got)} vs {sorted(want_head)})"
        )
    return problems


# --------------------------------------------------------------------------------------------
# --summary: profdsl summary of a folder against json.load and zcat
# --------------------------------------------------------------------------------------------

SUMMARY_BAR = 0.35
RSS_BAR_MB = 400.0


def write_folder(folder: Path, traces: int, size_mb: float, seed: int) -> list[Path]:
    """A save_path of ``traces`` gzipped traces (ranks 0..traces-1) with their manifest."""
    sys.path.insert(0, str(ROOT))
    from profdsl.collect._manifest import append_record, make_record
    from profdsl.naming import TraceName

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(traces):
        name = TraceName(
            role="actor",
            stage="update_actor",
            step=3,
            rank=rank,
            world_size=traces,
            host="node-0",
            pid=PID + rank,
            time_ms=1_790_857_026_000 + rank,
        ).format()
        plain = folder / f".plain-{rank}.json"
        generate(plain, folder / name, size_mb, seed + rank)
        plain.unlink()
        append_record(
            str(folder),
            make_record(
                "trace",
                name,
                role="actor",
                stage="update_actor",
                step=3,
                rank=rank,
                world_size=traces,
                bytes=(folder / name).stat().st_size,
            ),
        )
        paths.append(folder / name)
    return paths


def _is_region(name: str, stages: set[str]) -> bool:
    return name in stages or (name.startswith(MINI_BATCH) and name[len(MINI_BATCH) :].isdigit())


def recount_folder(paths: list[Path]) -> dict[tuple[int, tuple[str, ...]], float]:
    """Independent: each trace loaded whole; (rank, path) -> ms, a mini-batch under the stage
    region that contains it."""
    found: dict[tuple[int, tuple[str, ...]], float] = {}
    for rank, path in enumerate(paths):
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        stages = set(trace["profdsl"]["regions"]["stages"])
        regions = [
            e
            for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation" and _is_region(e["name"], stages)
        ]
        outer = sorted((e for e in regions if e["name"] in stages), key=lambda e: e["ts"])
        for event in regions:
            if event["name"] in stages:
                key = (rank, (event["name"],))
            else:
                (holder,) = [
                    o for o in outer if o["ts"] <= event["ts"] and event["ts"] + event["dur"] <= o["ts"] + o["dur"]
                ]
                key = (rank, (holder["name"], MINI_BATCH))
            found[key] = found.get(key, 0.0) + event["dur"] / 1000
    return found


def _timed(command: list[str], **kwargs: Any) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return wall, done


def peak_rss_mb(command: list[str]) -> float:
    """The peak RSS of ``command`` (its largest process), measured by a fresh parent."""
    probe = (
        "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)"
        ".returncode; print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
    )
    _wall, done = _timed([sys.executable, "-c", probe, *command])
    return int(done.stdout.split()[-1]) * 1024 / MB


def summary_main(args: argparse.Namespace) -> int:
    print("\n".join(machine_info()), flush=True)
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_summary-"))
    made = not args.dir
    try:
        started = time.perf_counter()
        paths = write_folder(folder / "profiles", args.traces, args.size_mb, args.seed)
        plain_mb = args.size_mb * args.traces
        gz_mb = sum(p.stat().st_size for p in paths) / MB
        print(
            f"folder:    {args.traces} traces of {args.size_mb:g} MB JSON ({plain_mb:g} MB in all, "
            f"{gz_mb:.1f} MB gzipped, level {GZIP_LEVEL}), written in {time.perf_counter() - started:.1f} s\n",
            flush=True,
        )
        files = [str(p) for p in paths]
        load = "import gzip, json, sys\nfor p in sys.argv[1:]:\n    with gzip.open(p, 'rt') as f:\n        json.load(f)"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        methods: dict[str, list[str]] = {
            "zcat (the floor)": ["sh", "-c", 'zcat "$@" > /dev/null', "zcat", *files],
            "json.load, one file after another": [sys.executable, "-c", load, *files],
            "profdsl summary DIR --json": [
                sys.executable,
                "-m",
                "profdsl",
                "summary",
                str(folder / "profiles"),
                "--json",
            ],
        }
        walls: dict[str, list[float]] = {m: [] for m in methods}
        output = ""
        names = list(methods)
        for turn in range(max(1, args.repeat)):
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                wall, done = _timed(methods[name], env=env)
                walls[name].append(wall)
                if name.startswith("profdsl"):
                    output = done.stdout
        median = {m: sorted(w)[len(w) // 2] for m, w in walls.items()}
        base = median["json.load, one file after another"]
        print(f"{'command (a fresh process each)':<36}  {'median s':>8}  {'min s':>6}  {'x json.load':>11}  bar")
        print(f"{'-' * 36}  {'-' * 8}  {'-' * 6}  {'-' * 11}  ---------")
        ok = True
        for name in methods:
            ratio = median[name] / base
            bar = ""
            if name.startswith("profdsl"):
                met = ratio <= SUMMARY_BAR
                ok &= met
                bar = f"<= {SUMMARY_BAR}x {'ok' if met else 'MISSED'}"
            print(f"{name:<36}  {median[name]:>8.3f}  {min(walls[name]):>6.3f}  {ratio:>10.2f}x  {bar}")
        rows = json.loads(output)
        got = {(r["rank"], tuple(r["path"])): r["total_ms"] for r in rows}
        expected = recount_folder(paths)
        exact = set(got) == set(expected) and all(abs(got[k] - v) <= 1e-6 for k, v in expected.items())
        print(
            f"\nexact: {'yes' if exact else 'NO'} ({len(rows)} rows; every total equals the recount "
            "from json.load to the nanosecond)"
            if exact
            else f"\nexact: NO\n  got {got}\n  want {expected}"
        )
        ok &= exact
        big = write_folder(folder / "big", 1, args.memory_mb, args.seed)
        rss = peak_rss_mb([sys.executable, "-m", "profdsl", "summary", str(folder / "big"), "--json"])
        met = rss < RSS_BAR_MB
        ok &= met
        print(
            f"peak RSS of profdsl summary on one {args.memory_mb:g} MB trace "
            f"({big[0].stat().st_size / MB:.1f} MB gzipped): {rss:.0f} MB (< {RSS_BAR_MB:g} MB "
            f"{'ok' if met else 'MISSED'})"
        )
        print(f"bars: {'all met' if ok else 'missed'}")
        return 0 if ok or not args.check else 1
    finally:
        if made and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size-mb", type=float, default=500.0, help="uncompressed size (MB = 10**6 bytes)")
    parser.add_argument("--dir", help="where to write the trace (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument(
        "--repeat",
        type=count,
        default=1,
        help="runs per method, each in a fresh process: fastest wall time, highest peak",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--summary", action="store_true", help="measure profdsl summary of a folder against json.load and zcat"
    )
    parser.add_argument("--traces", type=count, default=4, help="--summary: traces in the folder")
    parser.add_argument(
        "--memory-mb", type=float, default=225.0, help="--summary: size of the one trace whose peak RSS is measured"
    )
    parser.add_argument("--check", action="store_true", help="--summary: exit 1 when a bar is missed")
    args = parser.parse_args(argv)
    if args.summary:
        if "--size-mb" not in (argv if argv is not None else sys.argv[1:]):
            args.size_mb = 40.0
        if args.repeat == 1 and "--repeat" not in (argv if argv is not None else sys.argv[1:]):
            args.repeat = 3
        return summary_main(args)

    if args.child:
        print(RESULT_TAG + json.dumps(child(*args.child)), flush=True)
        return 0

    print("\n".join(machine_info()), flush=True)
    if args.dir:
        folder = Path(args.dir)
        folder.mkdir(parents=True, exist_ok=True)
        made_folder = False
    else:
        folder = Path(tempfile.mkdtemp(prefix="bench_reader-"))
        made_folder = True
    stem = f"bench_reader_{args.size_mb:g}mb.pt.trace"
    json_path, gz_path = folder / f"{stem}.json", folder / f"{stem}.json.gz"
    try:
        t = time.perf_counter()
        head, totals = generate(json_path, gz_path, args.size_mb, args.seed)
        size, gz_size = json_path.stat().st_size, gz_path.stat().st_size
        cats = ", ".join(f"{k} {v}" for k, v in sorted(totals.by_cat.items()))
        print(
            f"trace:     {size / MB:.1f} MB .json, {gz_size / MB:.1f} MB .json.gz (level {GZIP_LEVEL}), "
            f"written in {time.perf_counter() - t:.1f} s"
        )
        print(f"events:    {totals.events} ({totals.x_events} X; {cats})\n", flush=True)

        results: dict[str, dict[str, Any]] = {}
        for method in METHODS:
            path = gz_path if method.endswith("_gz") else json_path
            runs = [run_child(method, path) for _ in range(max(1, args.repeat))]
            best = min(runs, key=lambda r: r["wall_s"])
            best["peak_bytes"] = max(r["peak_bytes"] for r in runs)
            results[method] = best

        rows = [("method", "wall s", "MB/s", "peak RSS MB", "x file size", "X events")]
        for method, label in METHODS.items():
            r = results[method]
            header_only = method == "header_gz"
            rows.append(
                (
                    label,
                    f"{r['wall_s']:.3f}",
                    "n/a (head only)" if header_only else f"{size / MB / r['wall_s']:.1f}",
                    f"{r['peak_bytes'] / MB:.1f}",
                    f"{r['peak_bytes'] / size:.2f}",
                    "-" if header_only else str(r["x_events"]),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for i, row in enumerate(rows):
            print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
            if i == 0:
                print("  ".join("-" * w for w in widths))
        base = results["json_load"]["baseline_bytes"] / MB
        print(
            f"\npeak RSS: growth over the child's RSS after imports (~{base:.0f} MB), "
            f"from {results['json_load']['memory_source']}; best wall of {max(1, args.repeat)} run(s)."
        )

        problems = check(results, totals, head)
        if problems:
            print("MISMATCH:\n  " + "\n  ".join(problems))
            return 1
        print(
            f"counts agree: {totals.x_events} X events, {totals.events} events, "
            f"dur sum {totals.dur_sum:.3f} us in every method; header() returned the header written"
        )
        return 0
    finally:
        if args.keep:
            print(f"kept: {json_path}\n      {gz_path}")
        else:
            for p in (json_path, gz_path):
                p.unlink(missing_ok=True)
            if made_folder:
                shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
