"""The runtime: the :class:`~profdsl._runtime.profiler.Profiler` state machine, the recorder a
profiled step hands the DSL, the capture slot shared by a process's roles, and the process state
(:mod:`profdsl._runtime.process`)."""
