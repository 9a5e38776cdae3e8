"""Backends: *captures* open and close profiling sessions that write artifacts (torch.profiler
traces, nsys capture ranges); *annotators* mark named regions (``record_function``, NVTX).

Heavy libraries are imported lazily, inside the backend modules, when a profiler that needs them
is built: ``import profdsl`` imports none of them.
"""

from profdsl.backends.base import NULL_CAPTURE, Annotator, Capture, Session, TraceLabel
from profdsl.backends.factory import make_annotators, make_capture

__all__ = [
    "NULL_CAPTURE",
    "Annotator",
    "Capture",
    "Session",
    "TraceLabel",
    "make_annotators",
    "make_capture",
]
