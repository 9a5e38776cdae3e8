"""Capture: backends open captures that write artifacts (torch.profiler traces, nsys capture
ranges); annotators mark named regions (``record_function``, NVTX).

This layer keeps no process-wide state: which capture is open, for whom and on which thread, is
the runtime's business (:mod:`profdsl._runtime.slot`). Heavy libraries are imported lazily, when a
profiler that needs them is built: ``import profdsl`` imports none of them.
"""
