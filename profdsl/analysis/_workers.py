"""Scanning traces on several cores: a few ``python -m profdsl.analysis._workers`` processes.

Plain subprocesses rather than :mod:`multiprocessing`: a pool started with ``spawn`` or
``forkserver`` re-imports the caller's main script in every worker (a user's script without a
``__main__`` guard would run again), and ``fork`` is unsafe in a process holding threads. Each
worker gets its share of the traces (largest first, to the least loaded worker) as one pickle on
stdin, and writes one pickle per trace to stdout as it finishes it. A worker that fails leaves
its unfinished traces to the caller, who reads them itself: the result never depends on the pool.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from profdsl.analysis._catalog import Artifact, trace_header
from profdsl.analysis._reader import TraceError
from profdsl.analysis._scan import TraceScan, scan_file, spans_whole

__all__ = ["run_workers", "scan_one", "shares"]


def shares(sizes: Sequence[int], workers: int) -> list[list[int]]:
    """Indices of ``sizes`` split into ``workers`` groups: largest first, each to the group with
    the least in it so far (ties: the lowest group). Empty groups are dropped.

    Examples:
        >>> shares([5, 1, 4, 2], 2)
        [[0, 1], [2, 3]]
    """
    groups: list[list[int]] = [[] for _ in range(max(1, workers))]
    loads = [0] * len(groups)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        target = loads.index(min(loads))
        groups[target].append(index)
        loads[target] += sizes[index]
    return [g for g in groups if g]


def _environment() -> dict[str, str]:
    """The caller's environment, with profdsl's own folder first on the path (it may have been
    imported from a checkout the child would not find)."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _read(stream: IO[bytes], out: queue.SimpleQueue[tuple[int, Any] | None]) -> None:
    try:
        while True:
            out.put(pickle.load(stream))
    except (EOFError, pickle.UnpicklingError, OSError, ValueError):
        pass
    finally:
        out.put(None)


def run_workers(
    folder: str, tasks: Sequence[Any], sizes: Sequence[int], workers: int, on_result: Callable[[int, Any], None]
) -> set[int]:
    """Run :func:`scan_one` (``folder``, task) for each task on
    ``workers`` processes, calling ``on_result(index, result)`` as each arrives (on this
    thread). Returns the indices no worker finished (a worker failed to start or died)."""
    left = set(range(len(tasks)))
    procs: list[subprocess.Popen[bytes]] = []
    results: queue.SimpleQueue[tuple[int, Any] | None] = queue.SimpleQueue()
    for share in shares(sizes, workers):
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "profdsl.analysis._workers"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=_environment(),
            )
        except OSError:
            continue
        procs.append(proc)
        threading.Thread(target=_read, args=(proc.stdout, results), daemon=True, name="profdsl-scan-reader").start()
        try:
            assert proc.stdin is not None
            pickle.dump((folder, [(i, tasks[i]) for i in share]), proc.stdin)
            proc.stdin.close()
        except OSError:
            pass  # it died at once: its traces stay left
    try:
        ended = 0
        while ended < len(procs):
            item = results.get()
            if item is None:
                ended += 1
                continue
            index, result = item
            if index in left:
                left.discard(index)
                on_result(index, result)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    return left


def scan_one(folder: str, artifact: Artifact) -> TraceScan | str:
    """One trace's scan, or the reason it cannot be read (what a worker does for each trace of
    its share, and the caller for a trace no worker finished)."""
    try:
        meta = trace_header(folder, artifact)
        return scan_file(os.path.join(folder, str(artifact.path)), meta, span=spans_whole(artifact.kind, meta))
    except TraceError as exc:
        return str(exc)


def _main() -> None:
    """The worker: scan each trace of the share read from stdin, one result pickle each."""
    folder, share = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    for index, artifact in share:
        pickle.dump((index, scan_one(folder, artifact)), out)
        out.flush()


if __name__ == "__main__":
    _main()
