"""Implicit Q-learning (Kostrikov et al. 2022) as an offline pretraining option for a SAC agent's networks.

IQL never queries Q at actions outside the dataset:
- a state-value network V is fitted by expectile regression (expectile `expectile` > 0.5) to the target critics'
  minimum Q(s, a_data), which makes V approach the best in-distribution action value;
- the critics are fitted to r + discount * V(s');
- the actor (SAC's tanh-Gaussian) is fitted by advantage-weighted regression: maximise
  exp(beta * (Q(s, a) - V(s))) * log pi(a | s) on dataset actions, weights capped at `max_weight`.

The critics and actor are the SAC agent's own, so online SAC continues from them (WSRL accepts IQL as well as
Cal-QL for the offline phase); V is only used offline. The temperature is left at its initial value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from robot_rl.agents.sac import SAC
from robot_rl.fields import help_field as _help
from robot_rl.policies import mlp
from robot_rl.replay import Batch


@dataclass
class IQLConfig:
    expectile: float = _help(0.7, "expectile of the value regression (0.7 locomotion, 0.9 manipulation)")
    beta: float = _help(3.0, "inverse temperature of the advantage weights")
    max_weight: float = _help(100.0, "cap on the advantage weights")

    def validate(self) -> None:
        if not 0.5 <= self.expectile < 1.0:
            raise ValueError("offline.expectile must be in [0.5, 1)")
        if self.beta <= 0 or self.max_weight <= 0:
            raise ValueError("offline.beta and offline.max_weight must be > 0")


def expectile_loss(diff: Tensor, expectile: float) -> Tensor:
    """Asymmetric squared loss of `diff = target - prediction`: minimised by the `expectile` of the target."""
    weight = torch.abs(expectile - (diff < 0).float())
    return (weight * diff.pow(2)).mean()


class IQL:
    """Offline IQL updates of a SAC agent's actor and critics, with a value network of its own."""

    def __init__(self, sac: SAC, cfg: IQLConfig) -> None:
        cfg.validate()
        self.sac, self.cfg = sac, cfg
        hidden, ln = sac.cfg.network.hidden_dims, sac.cfg.network.critic_layer_norm
        self.value = mlp(sac.net_dim, 1, hidden, ln).to(sac.device)
        self.value_opt = torch.optim.Adam(self.value.parameters(), lr=sac.cfg.optimiser.critic_lr)

    def update(self, batch: Batch, mc_return: Tensor | None = None) -> dict[str, Tensor]:
        """Value, critic and actor steps on one batch [B]; `mc_return` is unused (same call as Cal-QL)."""
        sac, cfg = self.sac, self.cfg
        # a pixel agent's encoder learns from the critic loss only; V and the actor read its features detached
        obs, next_obs, _ = sac.batch_features(batch)
        action, features = batch.action, obs.detach()
        with torch.no_grad():
            target_obs = features if sac.encoder is None else sac.features(batch.obs, augment=True, target=True)
            q_target = sac.critic_target(target_obs, action).min(dim=0).values  # [B]
        v = self.value(features).squeeze(-1)
        value_loss = expectile_loss(q_target - v, cfg.expectile)
        self.value_opt.zero_grad(set_to_none=True)
        value_loss.backward()
        self.value_opt.step()

        with torch.no_grad():  # V is fitted to the critics, so it is in their (scaled) units already
            target = batch.reward * sac.reward_scale() + batch.discount * self.value(next_obs).squeeze(-1)
        critic_loss, q = sac.critic_loss(obs, action, target.unsqueeze(-1))
        sac.step_critic(critic_loss)

        with torch.no_grad():
            adv_weight = torch.exp(cfg.beta * (q_target - v.detach())).clamp(max=cfg.max_weight)
        actor_loss = -(adv_weight * sac.actor.log_prob(features, action)).mean()
        sac.step_actor(actor_loss)
        return {
            "critic_loss": critic_loss.detach(),
            "value_loss": value_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q_mean": q.detach().mean(),
            "adv_weight_mean": adv_weight.mean(),
        }
