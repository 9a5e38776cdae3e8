"""What a profiler does once a capture session ends: collect artifacts, and the finish hook.

A :class:`Finisher` belongs to one :class:`~profdsl.runtime.profiler.Profiler`. After each nsys
capture it moves this process's finished reports into ``save_path``; when the hook is owed it
runs it (after those moves, so the upload sees every artifact), once per process and
``save_path`` (the :class:`~profdsl.runtime.hooks.HookRendezvous`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from profdsl.collect import finish_hook, relocate
from profdsl.config import ProfilerConfig
from profdsl.core.log import once
from profdsl.core.ranks import is_hook_rank
from profdsl.core.topology import Topology
from profdsl.runtime.hooks import HookRendezvous

__all__ = ["Finisher"]

#: At each stop, how long to wait for nsys reports; at close, how long for the last ones.
NSYS_STOP_WAIT_S = 2.0
NSYS_CLOSE_WAIT_S = 30.0


class Finisher:
    """Artifact relocation and the finish hook for one role of one process."""

    def __init__(self, config: ProfilerConfig, *, role: str, rank: int, world_size: int,
                 selected: bool, rendezvous: HookRendezvous, hooks: bool = True,
                 topology: Topology | None = None) -> None:
        self.config, self.role, self.rank, self.world_size = config, role, rank, world_size
        self.topology = topology
        self.selected = selected
        hook = config.finish_hook
        self.hook_rank = hooks and hook.cmd is not None and is_hook_rank(
            rank, hook_ranks=hook.ranks, hook_all_ranks=hook.all_ranks,
            profiled_ranks=config.ranks, profiled_all_ranks=config.all_ranks,
            profiled_select=config.select, topology=topology)
        self._background: finish_hook.BackgroundHook | None = None
        self._arrived = not hooks  # a step clock never holds up another role's hook
        self._rendezvous = rendezvous
        if config.enable and hooks:
            rendezvous.join(config.save_path, self)
        self._final_done = False  # incomplete reports are recorded once, at the first pass at close

    def _label(self) -> dict[str, Any]:
        coords = {} if self.topology is None else self.topology.parallel.coords()
        return {"role": self.role, "rank": self.rank, "world_size": self.world_size,
                "host": socket.gethostname(), **coords}

    def after_session(self, *, final: bool) -> None:
        """A capture session closed: move this process's finished nsys reports into save_path.

        ``final``: the pass at ``close()``, the last chance: it waits longest, and records what is
        still converting or being written as ``incomplete``. Earlier passes (the last profiled
        step's included) leave such reports for a later pass.
        """
        if not (self.selected and self.config.tool == "nsys" and self.config.relocate_results):
            return
        final, self._final_done = final and not self._final_done, self._final_done or final
        source = self.config.nsys_report_dir or relocate.default_nsys_dir()
        try:
            names = os.listdir(source)
        except OSError:
            return  # nothing written there (yet): late reports are picked up at the next stop
        try:
            plan = relocate.plan_nsys(names, source_dir=source, pid=os.getpid(),
                                       label=self._label(), time_ms=time.time_ns() // 1_000_000)
            relocate.apply(plan, self.config.save_path, record_incomplete=final,
                            wait_s=NSYS_CLOSE_WAIT_S if final else NSYS_STOP_WAIT_S)
        except Exception as exc:
            once("nsys-relocate", logging.ERROR, "[profdsl rank %s] moving nsys reports failed: %s",
                 self.rank, exc)

    def run_hook(self, steps: list[int]) -> None:
        """The hook is owed by this role: it runs once this process's last role is done too."""
        if self._arrived:
            return
        self._arrived = True
        hook = self.config.finish_hook
        job = self._job() if self.hook_rank and hook.cmd is not None else None
        self._rendezvous.arrive(self.config.save_path, self, job, steps)

    def done(self) -> None:
        """This role is closing: the hook no longer waits for it."""
        if not self._arrived:
            self._arrived = True
            self._rendezvous.arrive(self.config.save_path, self, None)

    def leave(self, steps: list[int]) -> None:
        """This role was replaced by a re-created profiler: it owes no hook and holds none up."""
        if not self._arrived:
            self._arrived = True
            self._rendezvous.leave(self.config.save_path, self, steps)

    def _job(self) -> Callable[[bool, list[int]], None]:
        hook = self.config.finish_hook
        save_path = self.config.save_path

        def job(first: bool, steps: list[int]) -> None:
            """Run the hook (``first``) or record that it already ran; ``steps``: the round's."""
            fields = dict(self._label(), pid=os.getpid(), steps=steps)
            env = finish_hook.hook_environment(
                os.environ, save_path=save_path, tool=self.config.tool, role=self.role,
                rank=self.rank, world_size=self.world_size, steps=steps, host=fields["host"],
                pid=os.getpid())

            def run(abort: finish_hook.Abort | None = None) -> None:
                finish_hook.run_and_record(save_path, hook.cmd or "", env, timeout_s=hook.timeout_s,
                                           rank=self.rank, fields=fields, abort=abort)

            if not first:
                finish_hook.record(save_path, finish_hook.HookResult(
                    "skipped", error="already ran in this process for this save_path"), **fields)
            elif hook.background and not self._rendezvous.exiting:  # at exit: nothing would wait
                self._background = finish_hook.BackgroundHook(run, timeout_s=hook.timeout_s)
                self._background.start()
            else:
                run()

        return job

    def wait(self) -> None:
        """Wait for a background hook, up to its timeout (plus the time to kill it)."""
        background, self._background = self._background, None
        if background is not None:
            background.wait()
