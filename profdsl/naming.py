"""Trace file names: build and read back the flat, collision-free names of profdsl's trace files.

Every trace profdsl writes lands in one folder under a name made by :meth:`TraceName.format` and
read back by :meth:`TraceName.parse`. The grammar, caps and examples are in ``docs/trace-names.md``.
"""

from profdsl.core import naming as _naming
from profdsl.core.naming import *  # noqa: F403  (the public names; their one home is profdsl.core.naming)

__all__ = _naming.__all__
