"""Profile a Hugging Face ``Trainer`` or a TRL trainer whose loop you do not own, in one call.

Importing it imports neither transformers, TRL nor torch. See ``docs/transformers.md``.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar, cast

from profdsl.config import ProfilerConfig
from profdsl.errors import ConfigError
from profdsl.integrations.transformers._phases import RoundShape
from profdsl.integrations.transformers._support import understand

__all__ = ["RoundShape", "profile_trainer", "trainer_profiler"]

T = TypeVar("T")

_ATTRIBUTE = "_profdsl_hooks"


def profile_trainer(trainer: T, config: ProfilerConfig, **options: Any) -> T:
    """Instrument ``trainer`` in place for ``config`` and return it; nothing else changes.

    A TRL on-policy trainer (``GRPOTrainer``, ``RLOOTrainer``): a profdsl step is one generation
    round, numbered from 1 (from the optimizer steps done, so that a resumed run numbers alike),
    with stages ``generate``, ``old_log_prob`` (when TRL computes it), ``ref_log_prob`` (a nonzero
    ``beta``), ``reward`` and ``update``, whose mini-batch windows ``mini_batch<i>`` are the round's
    optimizer steps, each holding its micro-batches (``micro_batch<k>``: ``forward``, ``backward``)
    and ``optimizer_step``. A plain ``Trainer`` (or TRL's SFT, reward, DPO, KTO trainers): a step is
    one optimizer step (``state.global_step`` after it), a ``train_step`` stage whose windows
    ``micro_batch<i>`` are its micro-batches (``forward``, ``backward``), then ``optimizer_step``.
    Rank and world size come from the trainer's ``args``; the profiler closes at ``on_train_end``
    (and if ``train()`` raises), running a finish hook still owed.

    Args:
        trainer: a ``transformers.Trainer`` (or a TRL trainer) not yet training.
        config: what to profile (``steps`` are rounds, or optimizer steps).
        **options: ``role`` (default ``"actor"`` on-policy, ``"trainer"`` otherwise), and
            ``on_step`` / ``parallel``, passed to :class:`~profdsl.Profiler`.

    Returns:
        ``trainer``, instrumented; :func:`trainer_profiler` gives its profiler.

    Raises:
        ConfigError: a trainer, version or loop shape profile_trainer does not understand
            (the message says which), an unknown option, or a trainer instrumented twice.

    Examples:
        The whole change to a training script (``trainer`` built as usual)::

            trainer = profile_trainer(trainer, ProfilerConfig(enable=True, steps=(2, 3)))
            trainer.train()

        Adding a stage of your own inside a step, as a ``with`` block or a decorator
        (a reward function that TRL calls while scoring)::

            with profile_stage("my_reward_io"):
                ...

            @profile_stage("my_reward")
            def my_reward(completions, **kwargs):
                return [float(len(c)) for c in completions]
    """
    unknown = sorted(set(options) - {"role", "on_step", "parallel"})
    if unknown:
        raise ConfigError(f"profile_trainer: unknown option(s) {unknown} (known: role, on_step, parallel)")
    if getattr(trainer, _ATTRIBUTE, None) is not None:
        raise ConfigError("profile_trainer: this trainer is instrumented already")
    kind = understand(trainer)
    from profdsl._runtime.profiler import Profiler
    from profdsl.integrations.transformers._hooks import install

    args: Any = cast(Any, trainer).args
    role = options.pop("role", "actor" if kind.on_policy else "trainer")
    profiler = Profiler(config, role=role, rank=int(args.process_index), world_size=int(args.world_size), **options)
    callback_base = importlib.import_module("transformers").TrainerCallback
    setattr(trainer, _ATTRIBUTE, install(trainer, profiler, kind, callback_base))
    return trainer


def trainer_profiler(trainer: object) -> Any:
    """The :class:`~profdsl.Profiler` that :func:`profile_trainer` gave ``trainer`` (its
    ``metrics``, ``request()``), or None.

    Examples:
        >>> trainer_profiler(object()) is None
        True
    """
    hooks = getattr(trainer, _ATTRIBUTE, None)
    return None if hooks is None else hooks.profiler
