"""Trace file names: build and read back the flat, collision-free names of profdsl's trace files.

Every trace profdsl writes lands in one folder under a name made by :meth:`TraceName.format` and
read back by :meth:`TraceName.parse`. The grammar, caps and examples are in ``docs/trace-names.md``.
"""

from profdsl.core._naming import TraceName

__all__ = ["TraceName"]
