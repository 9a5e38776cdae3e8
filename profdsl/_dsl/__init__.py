"""The DSL: ``profile_stage`` and ``mini_batch_window``, as ``with`` blocks and decorators
(``rollout_window`` lives with the rollout engines, :mod:`profdsl.rollout._window`)."""

from profdsl._dsl.mini_batch import mini_batch_window
from profdsl._dsl.stage import profile_stage

__all__ = ["mini_batch_window", "profile_stage"]
