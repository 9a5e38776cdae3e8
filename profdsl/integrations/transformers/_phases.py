"""Which part of a Hugging Face or TRL training loop is which profdsl phase: pure arithmetic over
what docs/transformers.md's "What a step and a mini-batch are" says (TRL counts its micro-batches
in ``trainer._step``). Nothing here imports torch, transformers or TRL.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from profdsl.config._checks import require_int
from profdsl.errors import ConfigError

__all__ = [
    "BACKWARD",
    "FORWARD",
    "GENERATE",
    "MICRO_BATCH",
    "MINI_BATCH",
    "OLD_LOG_PROB",
    "OPTIMIZER_STEP",
    "REF_LOG_PROB",
    "REWARD",
    "TRAIN_STEP",
    "UPDATE",
    "LogProbPasses",
    "RoundShape",
]

#: The stages of an on-policy round, in the order TRL runs them.
GENERATE, OLD_LOG_PROB, REF_LOG_PROB, REWARD, UPDATE = "generate", "old_log_prob", "ref_log_prob", "reward", "update"
#: The stage around a plain Trainer's optimizer step, and the stages of any micro-batch.
TRAIN_STEP, FORWARD, BACKWARD, OPTIMIZER_STEP = "train_step", "forward", "backward", "optimizer_step"
#: The mini-batch windows' base names: an optimizer step of a round, a plain Trainer's micro-batch.
MINI_BATCH, MICRO_BATCH = "mini_batch", "micro_batch"


def _count(field: str) -> Callable[[object], int]:
    """A converter: the trainer's ``field``, an integer >= 1."""
    return lambda value: require_int(f"profile_trainer: the trainer's {field}", value, 1)


@attrs.frozen
class RoundShape:
    """The shape of a TRL on-policy loop: micro-batches per optimizer step (``accumulation``)
    and per generation (``steps_per_generation``), and how often each generation is reused
    (``num_iterations``). A round must hold whole optimizer steps: otherwise an optimizer step
    would straddle two rounds, and no window could belong to one step (refused).

    Examples:
        >>> shape = RoundShape(accumulation=2, steps_per_generation=4, num_iterations=1)
        >>> shape.optimizer_steps, [shape.ends_round(n) for n in (2, 4)]
        (2, [False, True])
    """

    accumulation: int = attrs.field(converter=_count("gradient_accumulation_steps"))  # type: ignore[misc]
    steps_per_generation: int = attrs.field(converter=_count("steps_per_generation"))  # type: ignore[misc]
    num_iterations: int = attrs.field(converter=_count("num_iterations"))  # type: ignore[misc]

    def __attrs_post_init__(self) -> None:
        if self.generate_every % self.accumulation:
            raise ConfigError(
                "profile_trainer: a generation round must hold whole optimizer steps: "
                f"steps_per_generation * num_iterations = {self.generate_every} is not a multiple of "
                f"gradient_accumulation_steps = {self.accumulation}"
            )

    @property
    def generate_every(self) -> int:
        """Micro-batches per round (TRL's own name for it)."""
        return self.steps_per_generation * self.num_iterations

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps (mini-batch windows) per round."""
        return self.generate_every // self.accumulation

    @property
    def old_log_prob(self) -> bool:
        """Whether GRPO computes the old policy's log-probs at generation (its rule: the
        samples may be stale when a round is not one optimizer step's worth)."""
        return self.accumulation % self.generate_every != 0

    def generates(self, done: int) -> bool:
        """Whether the micro-batch after ``done`` micro-batches begins a round."""
        return done % self.generate_every == 0

    def ends_round(self, done: int) -> bool:
        """Whether the optimizer step that ended with ``done`` micro-batches ends its round."""
        return done > 0 and self.generates(done)

    def round_of(self, done: int) -> int:
        """The round (from 1) that the micro-batch after ``done`` micro-batches belongs to."""
        return done // self.generate_every + 1


@attrs.define
class LogProbPasses:
    """Names the log-prob passes of one round's scoring, in TRL's order: the old policy's (when
    ``old`` is expected) first, then the reference model's (a separate ``ref_model``, or the
    policy with its adapter off).

    Examples:
        >>> passes = LogProbPasses(old=True)
        >>> passes.name(is_ref_model=False), passes.name(is_ref_model=False)
        ('old_log_prob', 'ref_log_prob')
    """

    old: bool
    seen: int = 0

    def name(self, *, is_ref_model: bool) -> str:
        """The stage of the next pass (a pass on the reference model is always the reference's)."""
        first = self.seen == 0
        self.seen += 1
        return OLD_LOG_PROB if first and self.old and not is_ref_model else REF_LOG_PROB
