"""The process's metrics logs (``Metrics(log=True)``): each step's timings become one line,
appended by the writer (``docs/architecture.md``: every write into save_path is the writer's).

Bounded twice: a file stops growing at ``Metrics.log_max_mb`` (logged once), and at most
:data:`MAX_QUEUED` lines wait for the writer (a writer busy with a long export or a stalled
disk): later lines are dropped and counted, never waited for. Each line is written with one
``write`` as soon as the writer reaches it: the log is as fresh as the writer's queue.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from profdsl._runtime.plan import RolePlan
from profdsl._runtime.writer.jobs import LineJob
from profdsl._runtime.writer.writer import Writer
from profdsl.collect.metrics_log import log_name
from profdsl.core._log import once
from profdsl.core._units import now_ms
from profdsl.metrics._timings import StepTimings
from profdsl.records.fields import to_json
from profdsl.records.metrics_log import MetricsLine, StageLine

__all__ = ["MAX_QUEUED", "MetricsLogs"]

#: The most lines waiting for the writer; more are dropped.
MAX_QUEUED = 1024


class MetricsLogs:
    """The metrics logs of this process, by file (see the module docstring)."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self._bytes: dict[str, int] = {}  # per file: bytes handed to the writer

    def write(self, plan: RolePlan, timings: StepTimings, *, traced: bool) -> None:
        """Hand one role's step to the writer; never raises, never waits."""
        try:
            pid = os.getpid()
            path = os.path.join(plan.save_path, log_name(plan.rank, plan.label.host, pid))
            line = MetricsLine(
                role=timings.role,
                rank=timings.rank,
                world_size=plan.world_size,
                step=timings.step,
                wall_s=timings.wall_s,
                overflow=timings.overflow or None,
                ledger=timings.ledger,
                ledger_beside=timings.ledger_beside or None,
                ledger_why=timings.ledger_why,
                ledger_spans=timings.ledger_spans or None,
                ledger_engines_s=timings.ledger_engines_s or None,
                ledger_waits_s=timings.ledger_waits_s,
                ledger_device=timings.ledger_device,
                began_s=timings.began_s,
                traced=traced,
                host=plan.label.host,
                pid=pid,
                time_ms=now_ms(),
                stages={
                    stage: StageLine(
                        total_s=t.total_s, self_s=t.self_s, count=t.count, device_s=t.device_s, kind=t.kind
                    )
                    for stage, t in timings.stages.items()
                },
            )
            data = (json.dumps(to_json(line), sort_keys=True) + "\n").encode()
            limit = int(plan.metrics.log_max_mb * 1e6)
            with self._lock:
                written = self._bytes.get(path, 0)
                if written + len(data) > limit:
                    once(
                        f"metrics-log-full:{path}",
                        logging.WARNING,
                        "profdsl: the metrics log %s reached Metrics.log_max_mb (%g MB): later steps are not logged",
                        path,
                        plan.metrics.log_max_mb,
                    )
                    return
                if len(self._writer.jobs("log")) >= MAX_QUEUED:
                    once(
                        f"metrics-log-queue:{path}",
                        logging.WARNING,
                        "profdsl: %s metrics log lines wait for the writer already; steps are dropped "
                        "from %s until it catches up",
                        MAX_QUEUED,
                        path,
                    )
                    return
                self._bytes[path] = written + len(data)
            self._writer.submit(LineJob(path, data))
        except Exception as exc:  # the training loop never sees the log's faults
            once(
                "metrics-log",
                logging.ERROR,
                "profdsl: logging step %s to the metrics log failed: %r",
                timings.step,
                exc,
            )

    def clear(self) -> None:
        """Forget every file (tests; a forked child writes logs of its own)."""
        self._lock = threading.Lock()
        self._bytes = {}
