"""What ``profile_trainer`` understands: the installed versions and the kind of trainer.

transformers and TRL are imported here, lazily, only when a trainer is instrumented (the
trainer's own module has imported them already). A version, trainer class or loop shape that
is not understood is refused with a :class:`~profdsl.errors.ConfigError` saying what and why,
rather than profiled wrongly.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import attrs

from profdsl.errors import ConfigError
from profdsl.integrations.transformers._phases import RoundShape

__all__ = ["ON_POLICY", "PLAIN", "TRANSFORMERS_MAJORS", "TRL_MAJORS", "Kind", "major", "understand"]

#: The major versions whose loops profile_trainer follows (tested: transformers 5.24, trl 1.16).
TRANSFORMERS_MAJORS = frozenset({5})
TRL_MAJORS = frozenset({1})
#: TRL trainers that generate inside their first micro-batch: one profdsl step per generation round.
ON_POLICY = frozenset({"GRPOTrainer", "RLOOTrainer"})
#: TRL trainers that run transformers' own loop unchanged: one profdsl step per optimizer step.
PLAIN = frozenset({"SFTTrainer", "RewardTrainer", "DPOTrainer", "KTOTrainer"})
#: What an on-policy trainer must have for its phases to be found.
_ON_POLICY_PARTS = (
    "_prepare_inputs",
    "_generate_and_score_completions",
    "_generate",
    "_get_per_token_logps_and_entropies",
    "_calculate_rewards",
)


@attrs.frozen
class Kind:
    """What a trainer is: ``on_policy`` (with its round shape and whether the old policy's
    log-probs are computed at generation) or plain."""

    name: str
    shape: RoundShape | None = None
    old_log_prob: bool = False

    @property
    def on_policy(self) -> bool:
        """Whether a profdsl step is a generation round."""
        return self.shape is not None


def major(version: str) -> int | None:
    """The major number of a version string (``"5.24.0"`` → 5), or None.

    Examples:
        >>> major("5.24.0"), major("1.16.0.dev0"), major("x")
        (5, 1, None)
    """
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _check_version(label: str, module: Any, majors: frozenset[int]) -> None:
    version = str(getattr(module, "__version__", "?"))
    if major(version) not in majors:
        known = ", ".join(f"{m}.x" for m in sorted(majors))
        raise ConfigError(f"profile_trainer follows the training loop of {label} {known}, not {label} {version}")


def understand(trainer: object) -> Kind:
    """The kind of ``trainer``, or a ConfigError: not a transformers ``Trainer``, a version not
    understood, a trainer that runs its own loop, a TRL trainer not covered, a loop shape that
    splits an optimizer step between two rounds."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise ConfigError(f"profile_trainer needs transformers, which cannot be imported here: {exc}") from exc
    _check_version("transformers", transformers, TRANSFORMERS_MAJORS)
    base = transformers.Trainer
    if not isinstance(trainer, base):
        raise ConfigError(f"profile_trainer needs a transformers Trainer, got {type(trainer).__name__}")
    own = type(trainer)
    if own._inner_training_loop is not base._inner_training_loop or own.train is not base.train:
        raise ConfigError(
            f"profile_trainer: {own.__name__} runs its own training loop, which profile_trainer does not know; "
            "hook it with Profiler.start/stop and profile_stage (docs/transformers.md)"
        )
    # the first class of its MRO defined by TRL: a user's subclass of GRPOTrainer is a GRPOTrainer
    trl_class = next((cls for cls in own.__mro__ if cls.__module__.split(".", 1)[0] == "trl"), None)
    if trl_class is None:
        return Kind("plain")
    if "trl" in sys.modules:
        _check_version("trl", sys.modules["trl"], TRL_MAJORS)
    name = trl_class.__name__
    if name in PLAIN:
        return Kind("plain")
    if name not in ON_POLICY:
        covered = ", ".join(sorted(ON_POLICY | PLAIN))
        raise ConfigError(f"profile_trainer does not cover TRL's {name} (covered: {covered})")
    missing = [part for part in _ON_POLICY_PARTS if not callable(getattr(trainer, part, None))]
    if missing or not isinstance(getattr(trainer, "_step", None), int):
        raise ConfigError(f"profile_trainer: this {name} lacks {missing or ['_step']}, which its TRL loop had")
    args: Any = getattr(trainer, "args", None)
    shape = RoundShape(
        accumulation=getattr(args, "gradient_accumulation_steps", None),
        steps_per_generation=getattr(args, "steps_per_generation", None),
        num_iterations=getattr(trainer, "num_iterations", None),
    )
    vllm_ratio = bool(getattr(trainer, "use_vllm", False)) and bool(
        getattr(trainer, "vllm_importance_sampling_correction", False)
    )
    # GRPO computes the old policy's log-probs when the round is stale or vLLM's ratio needs
    # them; RLOO always does.
    old = name == "RLOOTrainer" or shape.old_log_prob or vllm_ratio
    return Kind(name, shape, old)
