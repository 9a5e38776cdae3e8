"""The callback and method wrappers that ``profile_trainer`` installs on one trainer.

transformers' callbacks see an optimizer step begin and end, and the optimizer step itself; they
do not see what TRL runs inside the first micro-batch's ``training_step`` (generation, scoring),
nor a micro-batch's forward and backward. Those are seen by wrapping the trainer's own methods
(on the instance only). DSL blocks are entered in one call and left in another: allowed, since
every call runs on the training thread, in one context. What maps to what is in
:mod:`profdsl.integrations.transformers._phases`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from profdsl._dsl import mini_batch_window, profile_stage
from profdsl._dsl.base import Annotation
from profdsl._runtime.profiler import Profiler
from profdsl.integrations.transformers import _phases as phases
from profdsl.integrations.transformers._support import Kind

__all__ = ["TrainerHooks", "install"]


class _Open:
    """The DSL blocks open now, outermost first: entered and left across calls."""

    def __init__(self) -> None:
        self.blocks: list[Annotation] = []

    def enter(self, block: Annotation) -> None:
        block.__enter__()
        self.blocks.append(block)

    def holds(self, block: Annotation) -> bool:
        return any(open_ is block for open_ in self.blocks)

    def leave(self, block: Annotation) -> None:
        """Leave ``block`` and whatever is open inside it (innermost first); nothing if not open."""
        if self.holds(block):
            while self.blocks:
                top = self.blocks.pop()
                top.__exit__(None, None, None)
                if top is block:
                    return

    def leave_all(self) -> None:
        while self.blocks:
            self.blocks.pop().__exit__(None, None, None)


class TrainerHooks:
    """Drives one role's :class:`~profdsl.Profiler` from a trainer's callbacks and methods: where
    its steps, stages and windows begin and end is docs/transformers.md's "What a step and a
    mini-batch are" (a round begins when TRL scores a new generation, in training mode only)."""

    def __init__(self, trainer: Any, profiler: Profiler, kind: Kind) -> None:
        self.trainer, self.profiler, self.kind = trainer, profiler, kind
        self.in_step = False  # a profdsl step is open
        self.scoring: phases.LogProbPasses | None = None  # inside TRL's scoring of a generation
        self.micro = 0  # micro-batches of the open optimizer step
        self.finished = False
        self.open = _Open()
        stage = functools.partial(profile_stage, profiler=profiler)
        outer = phases.UPDATE if kind.on_policy else phases.TRAIN_STEP
        self.outer = stage(outer, scheduled=True)
        window = phases.MINI_BATCH if kind.on_policy else phases.MICRO_BATCH
        self.window = mini_batch_window(name=window, profiler=profiler)
        self.stages = {name: stage(name) for name in (*_SCORING, phases.FORWARD, phases.BACKWARD)}
        self.optimizer_stage = stage(phases.OPTIMIZER_STEP)
        self._micro_stages: dict[int, profile_stage] = {}

    # -- steps ---------------------------------------------------------------------------------

    def _begin(self, step: int) -> None:
        if self.in_step:
            self._end()
        self.profiler.start(step)
        self.in_step = True

    def _end(self) -> None:
        self.open.leave_all()
        self.micro = 0
        if self.in_step:
            self.in_step = False
            self.profiler.stop()

    def finish(self) -> None:
        """End what is open and close the profiler (its finish hook, if still owed). Idempotent."""
        if not self.finished:
            self.finished = True
            self._end()
            self.profiler.close()

    # -- micro-batches -------------------------------------------------------------------------

    def _micro_block(self, index: int) -> Annotation:
        """Micro-batch ``index``'s block: a plain Trainer's window, or, on-policy, its
        ``micro_batch<index>`` stage inside the optimizer step's window."""
        if not self.kind.on_policy:
            return self.window
        found = self._micro_stages.get(index)
        if found is None:
            found = self._micro_stages[index] = profile_stage(f"{phases.MICRO_BATCH}{index}", profiler=self.profiler)
        return found

    def begin_micro(self) -> None:
        """A micro-batch's inputs are ready: open its block (and the update and window) as needed."""
        if not self.in_step:
            return
        if not self.open.holds(self.outer):
            self.open.enter(self.outer)
        if self.kind.on_policy and not self.open.holds(self.window):
            self.open.enter(self.window)
        self.open.enter(self._micro_block(self.micro))
        self.micro += 1

    def end_micro(self) -> None:
        """The micro-batch's ``training_step`` returned (or raised)."""
        if self.micro:
            self.open.leave(self._micro_block(self.micro - 1))

    @property
    def in_micro(self) -> bool:
        return self.in_step and self.micro > 0 and self.open.holds(self._micro_block(self.micro - 1))

    # -- callback events (of transformers' ``TrainerCallback``, which :func:`install` mixes in) --

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.kind.on_policy:
            self._begin(int(state.global_step) + 1)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.in_step and self.open.holds(self.outer):
            self.open.enter(self.optimizer_stage)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.open.leave(self.optimizer_stage)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.kind.on_policy:
            self._end()
            return
        self.open.leave(self.window)
        self.micro = 0
        shape = self.kind.shape
        if shape is not None and shape.ends_round(int(self.trainer._step)):
            self._end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.finish()

    # -- TRL's scoring -------------------------------------------------------------------------

    def score(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """TRL's ``_generate_and_score_completions``: in training, the start of a round."""
        shape = self.kind.shape
        if not self.trainer.model.training or self.finished or shape is None:
            return call(*args, **kwargs)
        # numbered from the optimizer steps done, so that a run resumed from a checkpoint
        # numbers its rounds as the first run did
        self._begin(int(self.trainer.state.global_step) // shape.optimizer_steps + 1)
        self.scoring = phases.LogProbPasses(old=self.kind.old_log_prob)
        try:
            return call(*args, **kwargs)
        finally:
            self.scoring = None

    def log_prob(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A log-prob pass: named while scoring (the training loss's pass is the forward)."""
        passes = self.scoring
        if passes is None:
            return call(*args, **kwargs)
        model = args[0] if args else kwargs.get("model")
        ref = getattr(self.trainer, "ref_model", None)
        name = passes.name(is_ref_model=ref is not None and model is ref)
        with self.stages[name]:
            return call(*args, **kwargs)

    def scoring_stage(self, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self.stages[name] if self.scoring is not None else contextlib.nullcontext():
            return call(*args, **kwargs)

    def micro_stage(self, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A micro-batch's forward or backward (not an evaluation's ``compute_loss``)."""
        with self.stages[name] if self.in_micro else contextlib.nullcontext():
            return call(*args, **kwargs)


_SCORING = (phases.GENERATE, phases.OLD_LOG_PROB, phases.REF_LOG_PROB, phases.REWARD)


def _wrap(owner: Any, name: str, around: Callable[..., Any]) -> None:
    """Replace ``owner.name`` (on the instance) by ``around(original, *args, **kwargs)``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return around(original, *args, **kwargs)

    setattr(owner, name, wrapper)


def install(trainer: Any, profiler: Profiler, kind: Kind, callback_base: type) -> TrainerHooks:
    """Wrap ``trainer``'s methods and add the hooks as its callback (their class with
    ``callback_base``, transformers' ``TrainerCallback``, mixed in); return them."""
    hooks: TrainerHooks = type("ProfdslCallback", (TrainerHooks, callback_base), {})(trainer, profiler, kind)

    def prepare(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        inputs = call(*args, **kwargs)
        if trainer.model.training:
            hooks.begin_micro()
        return inputs

    def training_step(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not kind.on_policy:
            hooks.begin_micro()
        try:
            return call(*args, **kwargs)
        finally:
            hooks.end_micro()

    def train(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        finally:
            hooks.finish()

    if kind.on_policy:
        _wrap(trainer, "_prepare_inputs", prepare)
        _wrap(trainer, "_generate_and_score_completions", hooks.score)
        _wrap(trainer, "_get_per_token_logps_and_entropies", hooks.log_prob)
        _wrap(trainer, "_generate", functools.partial(hooks.scoring_stage, phases.GENERATE))
        _wrap(trainer, "_calculate_rewards", functools.partial(hooks.scoring_stage, phases.REWARD))
    _wrap(trainer, "training_step", training_step)
    _wrap(trainer, "compute_loss", functools.partial(hooks.micro_stage, phases.FORWARD))
    _wrap(trainer.accelerator, "backward", functools.partial(hooks.micro_stage, phases.BACKWARD))
    _wrap(trainer, "train", train)
    trainer.add_callback(hooks)
    return hooks
