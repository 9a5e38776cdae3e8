"""The demo's workers: a toy RL trainer's roles on a tiny torch policy (CPU, milliseconds)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from profdsl import ProfilerConfig, mini_batch_window, profile_stage
from profdsl.ray import ProfiledWorker
from profdsl.rollout.torch_sampler import TorchSamplerEngine

HIDDEN, ACTIONS = 64, 16


def _policy(seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, ACTIONS))


class Sampler(TorchSamplerEngine):
    """A rollout replica: samples actions from a copy of the policy, profiled as the torch
    sampler it is (in-process, rollout_window starts it on the generating thread)."""

    def __init__(self, config: ProfilerConfig, replica: int) -> None:
        super().__init__(config, replica)
        self.policy = _policy(replica)

    def generate(self, prompts: Any) -> Any:
        import torch

        with torch.no_grad():
            for _ in range(4):  # a few "decode" iterations
                logits = self.policy(prompts)
            return torch.distributions.Categorical(logits=logits).sample()  # type: ignore[no-untyped-call]


#: The injected slow step is held up at least this many times the longest actor update seen
#: before it, so that it stands out against a loaded machine's own slowness (a shared CI machine
#: made a 1.5 s hold-up only 2.7x the median, under the demo's 3x threshold).
HOLD_OVER = 6.0
#: ... but never longer than this.
MAX_HOLD_S = 30.0


class Trainer(ProfiledWorker):
    """One rank of the fused actor + ref + critic worker. ``slow``: seconds the first actor
    mini-batch of those steps is held up at least (the demo's injected slow step; longer where
    the machine is slow: :data:`HOLD_OVER` times the longest update before it)."""

    def __init__(
        self,
        config: ProfilerConfig,
        rank: int,
        world_size: int,
        mini_batches: int,
        slow: Mapping[int, float],
    ) -> None:
        import torch

        for role in ("actor", "ref", "critic"):
            self.init_profiler(config, role=role, rank=rank, world_size=world_size)
        self.actor, self.ref = _policy(0), _policy(0)
        self.critic = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=1e-3)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1e-3)
        self.mini_batches = mini_batches
        self.slow = dict(slow)
        self._pause = 0.0
        self._longest_update = 0.0

    @profile_stage("compute_ref_log_prob", role="ref")
    def ref_log_prob(self, prompts: Any, actions: Any) -> Any:
        import torch

        with torch.no_grad():
            return torch.log_softmax(self.ref(prompts), -1).gather(1, actions[:, None]).squeeze(1)

    @profile_stage("compute_values", role="critic")
    def values(self, prompts: Any) -> Any:
        import torch

        with torch.no_grad():
            return self.critic(prompts).squeeze(1)

    @profile_stage("update_actor", role="actor", scheduled=True)
    def update_actor(self, prompts: Any, actions: Any, ref_logp: Any, advantages: Any) -> float:
        import torch

        total = 0.0
        batches = zip(*(t.chunk(self.mini_batches) for t in (prompts, actions, ref_logp, advantages)))
        for p, a, old, adv in mini_batch_window(batches, role="actor"):
            if self._pause:  # the injected slow step: one mini-batch held up
                time.sleep(self._pause)
                self._pause = 0.0
            logp = torch.log_softmax(self.actor(p), -1).gather(1, a[:, None]).squeeze(1)
            ratio = torch.exp(logp - old)
            loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            self.actor_opt.zero_grad()
            loss.backward()
            self.actor_opt.step()
            total += loss.item()
        return total / self.mini_batches

    @profile_stage("update_critic", role="critic")
    def update_critic(self, prompts: Any, returns: Any) -> float:
        import torch

        loss = torch.nn.functional.mse_loss(self.critic(prompts).squeeze(1), returns)
        self.critic_opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        self.critic_opt.step()
        return float(loss.item())

    def train_step(self, prompts: Any, actions: Any, step: int) -> float:
        """One RL step's training work on this rank, after generation (``step``: held up when
        it is one of ``slow``)."""
        hold = self.slow.get(step, 0.0)
        self._pause = min(max(hold, HOLD_OVER * self._longest_update), MAX_HOLD_S) if hold else 0.0
        rewards = (actions % 3 == 0).float()
        ref_logp = self.ref_log_prob(prompts, actions)
        values = self.values(prompts)
        advantages = rewards - values
        normalized = (advantages - advantages.mean()) / (advantages.std() + 1e-6)
        began = time.perf_counter()
        loss = self.update_actor(prompts, actions, ref_logp, normalized)
        if not hold:
            self._longest_update = max(self._longest_update, time.perf_counter() - began)
        self.update_critic(prompts, rewards)
        return loss
