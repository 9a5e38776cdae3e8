"""The writer's jobs but the finish hook's (:mod:`profdsl._runtime.writer.hook`): finishing a
trace, appending a record, appending a metrics log line, moving other tools' files in. Each commits through the writer's
:class:`~profdsl._runtime.writer.writer.CommitGuard` and, when given up, records its own loss."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from profdsl._runtime.writer.writer import RECORD_BUDGET_S, CommitGuard
from profdsl.collect import _relocate as relocate
from profdsl.collect._export import PendingTrace, finish, write_events
from profdsl.collect._manifest import append_record
from profdsl.collect.metrics_log import append_line
from profdsl.core._log import failing_once, once
from profdsl.records.manifest import Record

__all__ = ["ExportJob", "LineJob", "MoveJob", "RecordJob", "traces_into"]


def traces_into(folder: str) -> str:
    """The logged-once key of the line naming ``folder`` (absolute) at its first trace: a
    process that said it also names the folder when it closes."""
    return f"traces-into:{folder}"


class ExportJob:
    """Finish one trace (:func:`profdsl.collect._export.finish`): torch's events written (when the
    session handed them over unwritten), spliced, compressed, checked, renamed, recorded."""

    kind = "export"

    def __init__(self, pending: PendingTrace) -> None:
        self.pending = pending
        self.budget_s = pending.label.export.timeout_s
        self.started = False

    def run(self, guard: CommitGuard) -> None:
        self.started = True
        # finish raises no Exception (an interrupt, recorded, goes to the writer's last guard)
        path = finish(self.pending, commit=guard.commit, waited=guard.waited, settled=guard.settle)
        label = self.pending.label
        if path is not None and label.manifest:  # where the traces go, said once (tests/test_where_traces_went.py)
            folder = os.path.abspath(label.save_path)
            once(traces_into(folder), logging.INFO, "[profdsl rank %s] traces go into %s", label.rank, folder)

    def revoke(self, guard: CommitGuard) -> None:
        """Given up: recorded ``incomplete``, naming torch's events file, which is written first
        (by this thread) when the job never began: the trace is kept as plain JSON."""
        pending = self.pending
        label = pending.label
        if not self.started and pending.write is not None:
            with failing_once(
                f"export-events:{label.save_path}",
                "[profdsl rank %s] could not write torch's events of a given-up trace: %s",
                label.rank,
            ):
                pending = write_events(pending)
        once(
            f"export-given-up:{label.save_path}",
            logging.ERROR,
            "[profdsl rank %s] the %s trace of step %s was still being written after %gs, when the "
            "finish hook or the exit could wait no longer; its events are kept as plain JSON",
            label.rank,
            label.role,
            label.step,
            label.export.timeout_s,
        )
        if not label.manifest:
            return
        kept = dict(events=os.path.basename(pending.events)) if os.path.exists(pending.events) else {}
        why = (
            f"still being written in the background after export_timeout_s ({label.export.timeout_s:g}s), "
            "when the finish hook or the process exit could wait no longer"
        )
        record = label.loss("incomplete", why, **kept, **pending.fields(guard.waited()))
        guard.commit(lambda: append_record(label.save_path, record))


class RecordJob:
    """Append one manifest record (``data``) to ``path``'s manifest."""

    kind = "record"
    budget_s = RECORD_BUDGET_S
    what = "a manifest record"

    def __init__(self, path: str, data: Record | Mapping[str, Any]) -> None:
        self.path, self.data = path, data

    def run(self, guard: CommitGuard) -> None:
        guard.commit(lambda: append_record(self.path, self.data))

    def revoke(self, guard: CommitGuard) -> None:
        """What a write that hung (a disk that stops answering) was to append is not written."""
        once(
            f"{self.kind}-given-up",
            logging.ERROR,
            "profdsl: %s of %s could not be written before the process exited",
            self.what,
            self.path,
        )


class LineJob(RecordJob):
    """Append one line of the metrics log (:mod:`profdsl._runtime.metrics_log`): ``data``, to
    the file ``path``."""

    kind = "log"
    what = "a metrics log line"

    def __init__(self, path: str, data: bytes) -> None:
        self.path, self.line = path, data

    def run(self, guard: CommitGuard) -> None:
        guard.commit(lambda: append_line(self.path, self.line))


#: ``plan()``: what to move, decided when the job runs (after the files' writers are done).
Plan = Callable[[], Sequence["relocate.Move | relocate.Skip"]]


class MoveJob:
    """Move other tools' files into save_path (:func:`profdsl.collect._relocate.apply`), each
    waited for until complete, at most ``wait_s``; records one record per file. Then each of
    ``tidy`` (the folders the files came from) that is left empty is removed: an engine makes
    it again when it next writes (tests/test_rollout_tidy.py)."""

    kind = "move"

    def __init__(
        self,
        save_path: str,
        plan: Plan,
        *,
        wait_s: float,
        record_incomplete: bool,
        what: str,
        tidy: Sequence[str] = (),
    ) -> None:
        self.save_path, self._plan, self.wait_s = save_path, plan, wait_s
        self.record_incomplete, self.what, self.tidy = record_incomplete, what, tuple(tidy)
        self.budget_s = wait_s + RECORD_BUDGET_S

    def run(self, guard: CommitGuard) -> None:
        with failing_once(f"move:{self.what}", "profdsl: moving %s into %s failed: %s", self.what, self.save_path):
            plan = self._plan()
            relocate.apply(
                plan, self.save_path, wait_s=self.wait_s, record_incomplete=self.record_incomplete, commit=guard.commit
            )
            for folder in self.tidy:
                guard.commit(functools.partial(_remove_if_empty, folder))

    def revoke(self, guard: CommitGuard) -> None:
        """Given up at exit: the files not moved yet stay where their tool wrote them."""
        once(
            f"move-given-up:{self.what}",
            logging.ERROR,
            "profdsl: moving %s into %s was given up "
            "when the process exited; what was not moved stays where it was written",
            self.what,
            self.save_path,
        )


def _remove_if_empty(folder: str) -> None:
    """Remove ``folder`` when it is an empty folder (never what it holds)."""
    with contextlib.suppress(OSError):  # not empty, gone already, or not ours to remove
        os.rmdir(folder)
