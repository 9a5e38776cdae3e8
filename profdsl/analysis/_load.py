"""Reading a folder's traces for the stage-time model: in parallel across cores, in bounded
memory, with progress on a terminal.

Each trace is read by :func:`~profdsl.analysis._scan.scan_file` (its header checked as every
command checks it, :func:`~profdsl.analysis._catalog.trace_header`). A folder of more than one
large trace is read by worker processes (:mod:`profdsl.analysis._workers`), one per core (up to
the number of traces); each holds about two read blocks of one trace at a time, so memory does
not grow with trace size.
A trace that cannot be read is left out with its reason, as every command leaves it out.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import IO

from profdsl.analysis._catalog import Artifact, json_traces
from profdsl.analysis._model import StageModel
from profdsl.analysis._scan import TraceScan
from profdsl.analysis._walls import LogRead, clocked_walls, read_walls
from profdsl.analysis._workers import run_workers, scan_one
from profdsl.core._units import size_text

__all__ = ["Progress", "load_model", "scan_artifacts"]

#: Below this many bytes on disk in all, traces are read in this process (a pool costs more).
POOL_BYTES = 16 << 20
#: How long a read runs before progress is shown (on a terminal only).
PROGRESS_AFTER_S = 2.0


def _size(folder: str, artifact: Artifact) -> int:
    try:
        return os.path.getsize(os.path.join(folder, str(artifact.path)))
    except OSError:
        return 0


class Progress:
    """``profdsl: reading traces 3/12 (1.2 of 4.8 GB)`` on ``stream``, rewritten in place, once
    a read has run for :data:`PROGRESS_AFTER_S` seconds, and only on a terminal."""

    def __init__(self, total: int, total_bytes: int, stream: IO[str] | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.total, self.total_bytes = total, total_bytes
        self.began = time.monotonic()
        self.shown = False
        try:
            self.on = self.stream.isatty()
        except (AttributeError, ValueError):
            self.on = False

    def update(self, done: int, done_bytes: int) -> None:
        """``done`` traces (``done_bytes``) read so far."""
        if not self.on or time.monotonic() - self.began < PROGRESS_AFTER_S:
            return
        self.shown = True
        self.stream.write(
            f"\rprofdsl: reading traces {done}/{self.total} ({size_text(done_bytes)} of {size_text(self.total_bytes)})"
        )
        self.stream.flush()

    def close(self) -> None:
        """Clear the progress line, if one was shown."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _workers(count: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, count))


def _results(
    folder: str, traces: Sequence[Artifact], sizes: Sequence[int], progress: Progress
) -> list[TraceScan | str]:
    """Each trace's scan (or the reason it cannot be read), in order: on worker processes when
    it pays, and here for whatever they did not finish."""
    results: list[TraceScan | str | None] = [None] * len(traces)
    done = [0, 0]

    def got(index: int, result: TraceScan | str) -> None:
        results[index] = result
        done[0] += 1
        done[1] += sizes[index]
        progress.update(done[0], done[1])

    workers = _workers(len(traces))
    left: Iterable[int] = range(len(traces))
    if workers > 1 and sum(sizes) >= POOL_BYTES:
        left = sorted(run_workers(folder, traces, sizes, workers, got))
    for index in left:
        got(index, scan_one(folder, traces[index]))
    return [r if r is not None else "" for r in results]


def scan_artifacts(
    folder: str | os.PathLike[str], items: Iterable[Artifact], skipped: list[str]
) -> list[tuple[Artifact, TraceScan]]:
    """The scan of every ok JSON trace of ``items`` (:func:`json_traces`), in their order; a
    trace that cannot be read is left out, its reason appended to ``skipped``."""
    folder = os.fspath(folder)
    traces = json_traces(items)
    sizes = [_size(folder, a) for a in traces]
    progress = Progress(len(traces), sum(sizes))
    try:
        results = _results(folder, traces, sizes, progress)
    finally:
        progress.close()
    skipped.extend(result for result in results if isinstance(result, str))
    return [(artifact, result) for artifact, result in zip(traces, results) if not isinstance(result, str)]


def load_model(
    folder: str | os.PathLike[str],
    items: Iterable[Artifact],
    skipped: list[str],
    log: LogRead | None = None,
) -> StageModel:
    """The stage-time model of ``items``' traces (see :func:`scan_artifacts`), with the step
    wall times of the folder's metrics logs (:func:`~profdsl.analysis._walls.clocked_walls`: one
    beyond any clock is left out, its line named in ``skipped``): from ``log``, the caller's read
    of them (whose bad lines, ``log.problems``, it names: every command passes its read), else
    read here, their bad lines not named."""
    walls = clocked_walls(read_walls(folder) if log is None else log, skipped)
    return StageModel(scan_artifacts(folder, items, skipped), walls)
