"""A ``rollout_window`` engine for samplers that generate with a plain torch model (HF
``generate``, a custom decoding loop), in their own actor process or in the trainer's.

Its traces go through profdsl's one torch session per process (a second session crashed the
process): in its own process it records into the replica's trace dir; in a process where a
profdsl session is already open (the trainer's, in continuous mode) it records nothing of its own,
since its work is already in that session's trace.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from profdsl._runtime.process import PROCESS
from profdsl._runtime.slot.session import Session
from profdsl._runtime.slot.slot import Busy
from profdsl.collect._export import ExportPolicy, TraceLabel
from profdsl.config import ProfilerConfig
from profdsl.core._log import once
from profdsl.rollout import rollout_trace_dir

__all__ = ["TorchSamplerEngine"]


class TorchSamplerEngine:
    """Profiles a torch sampler as rollout replica ``replica`` (GPU ``local_rank`` of it).

    Examples:
        >>> from profdsl import ProfilerConfig
        >>> engine = TorchSamplerEngine(ProfilerConfig(enable=True, save_path="/tmp/p"), replica=0)
        >>> engine.replica
        0
    """

    #: rollout_window calls it on its own thread: its session records the thread that starts it.
    profdsl_thread_affine = True

    def __init__(
        self, config: ProfilerConfig, replica: int, *, local_rank: int = 0, replica_world_size: int = 1
    ) -> None:
        self.config, self.replica = config, replica
        self.local_rank, self.replica_world_size = local_rank, replica_world_size
        self._session: Session | None = None

    def start_profile(self, profile_prefix: str | None = None) -> None:
        """Open a torch session writing into this replica's trace dir (nothing if one is open)."""
        from profdsl._capture.torch_session import TorchBackend

        if self._session is not None:
            return
        label = TraceLabel(
            role="rollout",
            stage=profile_prefix,
            step=None,
            rank=self.local_rank,
            world_size=self.replica_world_size,
            save_path=rollout_trace_dir(self.config.save_path, self.replica),
            host=socket.gethostname(),
            pid=os.getpid(),
            config_hash="",
            manifest=False,
            export=ExportPolicy.of(self.config.torch),
        )
        session = PROCESS.slot.begin_stage(label, TorchBackend(self.config.torch), None, cut=False)
        if isinstance(session, Busy):
            once(
                "sampler-shared",
                logging.INFO,
                "profdsl: the torch sampler shares its process with an open profdsl capture (%s); "
                "its work is recorded there",
                session.holder,
            )
        elif session is not None:
            self._session = session

    def stop_profile(self) -> None:
        """Close the session; returns once its trace is written (as an engine's stop does:
        the rollout relocation moves it next)."""
        session, self._session = self._session, None
        if session is not None:
            PROCESS.slot.end_stage(session)
            PROCESS.writer.wait(timeout=PROCESS.writer.budget())

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_session": None}  # shipped to a Ray actor without its session
