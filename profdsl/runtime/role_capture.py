"""What one role of one process captures with: its backend and annotator (none when its rank is
not selected), the trace label of a step, and the recorder each profiled step hands the DSL."""

from __future__ import annotations

import hashlib
import json
import os
import socket

from profdsl.capture import make_annotator, make_backend
from profdsl.collect.export import ExportPolicy, TraceLabel
from profdsl.config import ProfilerConfig
from profdsl.core.topology import Topology
from profdsl.runtime.claims import Claim
from profdsl.runtime.process import PROCESS
from profdsl.runtime.recorder import NULL_RECORDER, NullRecorder, Recorder

__all__ = ["RoleCapture"]


class RoleCapture:
    """One role's capture tools (``selected``: a backend exists) and its current recorder."""

    def __init__(self, config: ProfilerConfig, role: str, topology: Topology, *, selected: bool) -> None:
        self.config, self.role, self.topology = config, role, topology
        self.backend = make_backend(config) if selected else None
        self.annotator = make_annotator(config, role) if self.backend is not None else None
        self.recorder: Recorder | NullRecorder = NULL_RECORDER
        self._hash = hashlib.sha256(json.dumps(config.to_mapping(), sort_keys=True).encode()).hexdigest()[:12]

    @property
    def selected(self) -> bool:
        """Whether this role captures anything (its rank is selected and a backend exists)."""
        return self.backend is not None

    def label(self, step: int | None) -> TraceLabel:
        """Who and what a trace of ``step`` records."""
        topology = self.topology
        return TraceLabel(role=self.role, stage=None, step=step, rank=topology.rank,
                          world_size=topology.world_size, save_path=self.config.save_path,
                          host=socket.gethostname(), pid=os.getpid(), config_hash=self._hash,
                          export=ExportPolicy.of(self.config.torch), parallel=topology.parallel)

    def open(self, step: int, claim: Claim | None) -> None:
        """A profiled step begins: its recorder, registered where the DSL finds it."""
        assert self.backend is not None
        self.recorder = Recorder(self.label(step), annotator=self.annotator, backend=self.backend,
                                 coordinator=PROCESS.coordinator, discrete=self.config.discrete,
                                 schedule=self.config.torch.schedule, claim=claim)
        PROCESS.registry.activate(self.recorder)

    def end(self) -> None:
        """The step is over: its recorder leaves the registry and closes what it opened."""
        recorder, self.recorder = self.recorder, NULL_RECORDER
        if isinstance(recorder, Recorder):
            PROCESS.registry.deactivate(recorder)
            recorder.close()
