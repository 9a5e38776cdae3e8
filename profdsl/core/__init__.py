"""The pure core: schedules, trace names, ranks and the step plan, as plain functions over ints
and strings (no torch, no I/O), plus profdsl's logger. Public entry points are re-exported by
:mod:`profdsl.schedule`, :mod:`profdsl.naming` and :mod:`profdsl.ranks`."""
