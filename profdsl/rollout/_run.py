"""One profiled rollout: start and stop the selected replicas, then move their traces.

Each call to the engines is bounded and concurrent; failures are logged and recorded, never
raised. Relocation runs on the node that wrote the files (a pinned Ray task for replicas on other
nodes, all nodes at once); the whole rollout waits at most one ``rollout.flush_wait_s`` for
files to be complete, and a file recorded incomplete is not waited for again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from profdsl._runtime.process import PROCESS
from profdsl._runtime.writer.jobs import MoveJob, RecordJob
from profdsl._runtime.writer.writer import Writer
from profdsl.collect import _relocate as relocate
from profdsl.config import ProfilerConfig
from profdsl.core._log import once
from profdsl.core._selection import Selection
from profdsl.core._units import now_ms
from profdsl.metrics._tree import clock
from profdsl.records.manifest import RolloutRecord
from profdsl.rollout import rollout_trace_dir, trace_prefix
from profdsl.rollout._calls import Outcome, accepts
from profdsl.rollout._nodes import current_node, node_of, run_on_node
from profdsl.rollout._relocate import plan_rollout

if TYPE_CHECKING:
    from profdsl._runtime.step import StepContext

__all__ = ["RolloutRun", "relocate_replicas"]

#: Beyond ``flush_wait_s``, how long a relocation on another node may take (scheduling the task).
REMOTE_GRACE_S = 120.0


class RolloutRun:
    """One profiled rollout: the selected replicas of one step."""

    def __init__(self, step: StepContext, engines: Sequence[Any], replicas: list[int], replica_world_size: int) -> None:
        self.config = step.config
        self.writer = step.writer  # every record and move goes through it
        self.step = step.step
        self.width = replica_world_size
        self.world_size = len(engines) * replica_world_size
        self.selected = {r: engines[r] for r in replicas}
        self.started: dict[int, Any] = {}
        self.root = step.root  # the step's metrics tree, when it is timed

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The caller waits on the engines' profilers in this block: a placed wait, the step's
        ledger's overhead, when the step is timed (profiling's cost, not generation, whatever
        stage runs then)."""
        began = clock()
        yield
        if self.root is not None:
            self.root.wait_at(began, clock(), engines=True)

    def start_call(self) -> tuple[dict[int, Any], str, dict[int, dict[str, Any]], float]:
        """``call_all``'s arguments that start the selected replicas (with ``profile_prefix``
        where an engine takes it)."""
        prefixes = {
            r: {"profile_prefix": trace_prefix(self.step, r)}
            for r, engine in self.selected.items()
            if accepts(engine, "start_profile", "profile_prefix")
        }
        return self.selected, "start_profile", prefixes, self.config.rollout.start_timeout_s

    def stop_call(self) -> tuple[dict[int, Any], str, dict[int, dict[str, Any]], float]:
        """``call_all``'s arguments that stop the started replicas."""
        return self.started, "stop_profile", {}, self.config.rollout.stop_timeout_s

    def started_from(self, outcomes: list[Outcome]) -> None:
        self.record(outcomes, "start_profile")
        # A replica that timed out may still have started: it is stopped too.
        self.started = {o.replica: self.selected[o.replica] for o in outcomes if o.status != "failed"}

    def record(self, outcomes: list[Outcome], call: str) -> None:
        for outcome in outcomes:
            if outcome.status == "ok":
                continue
            once(
                f"rollout:{call}:{outcome.replica}:{outcome.status}",
                logging.WARNING,
                "profdsl: rollout replica %s %s %s at step %s: %s",
                outcome.replica,
                call,
                outcome.status,
                self.step,
                outcome.error,
            )
            self.writer.submit(
                RecordJob(
                    self.config.save_path,
                    RolloutRecord(
                        status=outcome.status,
                        role="rollout",
                        step=self.step,
                        replica=outcome.replica,
                        call=call,
                        error=outcome.error,
                        host=socket.gethostname(),
                        pid=os.getpid(),
                    ),
                )
            )

    def relocate(self) -> None:
        """Move the selected ranks' engine files into save_path, on the node that wrote them:
        every node at once, the whole window bounded by one ``rollout.flush_wait_s``."""
        if not self.config.relocate_results:
            return
        wait_s = self.config.rollout.flush_wait_s
        deadline = time.monotonic() + wait_s + REMOTE_GRACE_S
        here, remote = _nodes(self.selected)
        threads = [
            threading.Thread(
                target=self._relocate_remote,
                args=(node, replicas, wait_s),
                daemon=True,
                name=f"profdsl-relocate-{node}",
            )
            for node, replicas in remote.items()
        ]
        for thread in threads:
            thread.start()
        relocate_replicas(
            self.config,
            self.step,
            here,
            self.width,
            self.world_size,
            current_node() if remote else None,
            wait_s,
            writer=self.writer,
        )
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _relocate_remote(self, node: str, replicas: list[int], wait_s: float) -> None:
        try:
            absolute = attrs.evolve(self.config, save_path=os.path.abspath(self.config.save_path))
            run_on_node(
                node,
                relocate_replicas,
                absolute,
                self.step,
                replicas,
                self.width,
                self.world_size,
                node,
                wait_s,
                timeout=wait_s + REMOTE_GRACE_S,
            )
        except Exception as exc:
            once(
                f"rollout-remote:{node}",
                logging.ERROR,
                "profdsl: moving rollout traces on node %s failed: %s",
                node,
                exc,
            )


def _nodes(engines: dict[int, Any]) -> tuple[list[int], dict[str, list[int]]]:
    """Replicas whose files are on this node, and those on other Ray nodes (by node id)."""
    here: list[int] = []
    remote: dict[str, list[int]] = {}
    if "ray" not in sys.modules or not any(hasattr(e, "_actor_id") for e in engines.values()):
        return sorted(engines), remote
    this = current_node()
    for replica, engine in sorted(engines.items()):
        node = node_of(engine) if hasattr(engine, "_actor_id") else None
        if node is None or node == this:
            here.append(replica)
        else:
            remote.setdefault(node, []).append(replica)
    return here, remote


def relocate_replicas(
    config: ProfilerConfig,
    step: int | None,
    replicas: Sequence[int],
    width: int,
    world_size: int,
    node: str | None,
    wait_s: float,
    *,
    writer: Writer | None = None,
) -> None:
    """Move replicas' engine files into save_path on this node (runs as a pinned Ray task for
    replicas on other nodes), through this process's writer, and wait for them (at most
    ``wait_s`` for them all, plus the bookkeeping); never raises."""
    writer = PROCESS.writer if writer is None else writer
    # The kept GPUs: the named ranks, or every GPU of each selected replica (empty ranks: replica 0).
    keep = Selection.of(config).replica_gpus(width, world_size // width)
    folders = [rollout_trace_dir(config.save_path, replica) for replica in replicas]

    def plan() -> list[relocate.Move | relocate.Skip]:
        found: list[relocate.Move | relocate.Skip] = []
        for replica, source in zip(replicas, folders):
            try:
                names = os.listdir(source)
            except OSError:
                continue
            found += plan_rollout(
                names,
                source_dir=source,
                replica=replica,
                replica_world_size=width,
                keep=keep,
                step=step,
                world_size=world_size,
                host=socket.gethostname(),
                pid=os.getpid(),
                time_ms=now_ms(),
                node=node,
            )
        return found

    job = MoveJob(config.save_path, plan, wait_s=wait_s, record_incomplete=True, what="rollout traces", tidy=folders)
    if not writer.wait(writer.submit(job), timeout=writer.budget()):
        once(
            "rollout-relocate",
            logging.ERROR,
            "profdsl: moving rollout traces into %s is taking longer than %gs; it goes on in the background",
            config.save_path,
            wait_s,
        )
