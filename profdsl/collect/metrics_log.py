"""The metrics log (``Metrics(log=True)``): every step's stage timings, per role and rank, as
JSON lines (:class:`~profdsl.records.metrics_log.MetricsLine`) in ``save_path``.

Each process appends to its own file, ``profdsl-metrics-rank{R}-{host}-{pid}.jsonl``, through
its writer (one line per role and step, one ``write`` each: a line torn by a crash loses that
line only). :func:`read_log` reads every such file of a folder back, skipping (and naming) the
lines that are not valid.
"""

from __future__ import annotations

import os
import re

from profdsl.collect._manifest import append_whole, json_lines
from profdsl.core._files import read_regular
from profdsl.records.fields import RecordError
from profdsl.records.metrics_log import MetricsLine, parse_metrics_line

__all__ = ["LOG_PREFIX", "LOG_SUFFIX", "append_line", "log_name", "log_files", "read_log"]

LOG_PREFIX = "profdsl-metrics-"
LOG_SUFFIX = ".jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")


def log_name(rank: int, host: str, pid: int) -> str:
    """The file name of one process's log (the host made safe for a file name).

    Examples:
        >>> log_name(3, "node/1", 42)
        'profdsl-metrics-rank3-node_1-42.jsonl'
    """
    return f"{LOG_PREFIX}rank{rank}-{_UNSAFE.sub('_', host)[:64]}-{pid}{LOG_SUFFIX}"


def append_line(path: str, data: bytes) -> bool:
    """Append ``data`` (one or more whole lines) to the log ``path``; never raises
    (:func:`~profdsl.collect._manifest.append_whole`)."""
    return append_whole(path, data, "metrics log")


def log_files(folder: str | os.PathLike[str]) -> list[str]:
    """The metrics logs of ``folder``, sorted ([] when there are none or it cannot be listed)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(LOG_PREFIX) and n.endswith(LOG_SUFFIX))


#: The most bytes read of one metrics log: a log is bounded by ``Metrics.log_max_mb`` (at most
#: this much), so a larger file named like one is not one.
MAX_LOG_BYTES = 64 * 1024**3


def read_log_lines(folder: str | os.PathLike[str]) -> tuple[list[tuple[str, int, MetricsLine]], list[str]]:
    """Every valid line of ``folder``'s metrics logs with its file and line number, and one
    problem per file or line that is not (its file and line number, and why; a file that is not
    regular, or over :data:`MAX_LOG_BYTES`, unread). A last line without its newline (still being
    written) is left out quietly."""
    lines: list[tuple[str, int, MetricsLine]] = []
    problems: list[str] = []
    for name in log_files(folder):
        path = os.path.join(folder, name)
        try:
            raw = read_regular(path, limit=MAX_LOG_BYTES, holds="a metrics log")
        except OSError as exc:
            problems.append(f"{path}: unreadable: {exc.strerror or exc}")
            continue
        last = raw.count(b"\n") + 1  # a last line without its newline is still being written
        for number, value, error in json_lines(raw):
            try:
                if error is not None:
                    raise RecordError(error)
                lines.append((path, number, parse_metrics_line(value)))
            except RecordError as exc:
                if number != last:
                    problems.append(f"{path} line {number}: {exc}")
    return lines, problems


def read_log(folder: str | os.PathLike[str]) -> tuple[list[MetricsLine], list[str]]:
    """Every valid line of ``folder``'s metrics logs (:func:`read_log_lines` without where each
    came from), and the problems."""
    found, problems = read_log_lines(folder)
    return [line for _, _, line in found], problems
