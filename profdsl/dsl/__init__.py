"""The DSL: ``profile_stage`` and ``mini_batch_window``, as ``with`` blocks and decorators
(``rollout_window`` lives with the rollout engines, :mod:`profdsl.rollout.window`)."""

from profdsl.dsl.mini_batch import mini_batch_window
from profdsl.dsl.stage import profile_stage

__all__ = ["mini_batch_window", "profile_stage"]
