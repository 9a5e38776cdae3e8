"""Capture: backends open sessions that write artifacts (torch.profiler traces, nsys capture
ranges); annotators mark named regions (``record_function``, NVTX).

This layer keeps no process-wide state: which session is open, and for whom, is the runtime's
business (:mod:`profdsl.runtime.coordinator`). Heavy libraries are imported lazily, when a
profiler that needs them is built: ``import profdsl`` imports none of them.
"""

from profdsl.capture.annotators import Annotator
from profdsl.capture.base import Backend, Runner, Session
from profdsl.capture.factory import make_annotator, make_backend

__all__ = ["Annotator", "Backend", "Runner", "Session", "make_annotator", "make_backend"]
