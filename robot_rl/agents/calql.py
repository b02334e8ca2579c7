"""Conservative offline pretraining of a SAC agent: CQL (Kumar et al. 2020) and Cal-QL (Nakamoto et al. 2023).

Both train the *same* networks as online SAC (`robot_rl.agents.sac.SAC`: tanh-Gaussian actor, critic ensemble,
temperature), so that fine-tuning starts from them without any conversion. Only the critic loss differs:

    loss = TD loss of SAC + alpha * mean_critics( T * logsumexp_j(Q(s, a_j) / T) - Q(s, a_data) )

The a_j are `num_action_samples` actions each from the uniform distribution on [-1, 1]^A, from pi(.|s) and from
pi(.|s') (all evaluated at s), importance-weighted by their sampling densities (the "CQL(H)" estimator of the
soft maximum). Pushing that soft maximum down while pushing the dataset actions up makes Q conservative on
out-of-distribution actions.

Cal-QL adds one line: the Q-values of the policy's actions are clamped from below by the Monte-Carlo return of
the dataset trajectory (`mc_return`, a reference value a real policy achieves), so the conservative term never
pushes them under the behaviour policy's value. Without this, CQL's Q-values sit far below the true values and
the first online updates "unlearn" the pretrained policy while the critic recalibrates (the dip that Cal-QL and
WSRL are about). `CalQL(sac, cfg, calibrated=False)` is plain CQL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from robot_rl.agents.sac import SAC
from robot_rl.fields import help_field as _help
from robot_rl.replay import Batch


@dataclass
class CalQLConfig:
    """The conservative term added to SAC's critic loss during offline pretraining."""

    cql_alpha: float = _help(5.0, "weight of the conservative term (Cal-QL uses 5 on sparse-reward manipulation)")
    num_action_samples: int = _help(4, "actions sampled per state from each of uniform, pi(s) and pi(s')")
    cql_temperature: float = _help(1.0, "temperature of the logsumexp soft maximum")

    def validate(self) -> None:
        if self.cql_alpha < 0:
            raise ValueError("offline.cql_alpha must be >= 0")
        if self.num_action_samples < 1:
            raise ValueError("offline.num_action_samples must be >= 1")
        if self.cql_temperature <= 0:
            raise ValueError("offline.cql_temperature must be > 0")


class CalQL:
    """Offline updates of a SAC agent's networks with the (calibrated) conservative critic loss."""

    def __init__(self, sac: SAC, cfg: CalQLConfig, calibrated: bool = True) -> None:
        cfg.validate()
        self.sac, self.cfg, self.calibrated = sac, cfg, calibrated

    def update(self, batch: Batch, mc_return: Tensor) -> dict[str, Tensor]:
        """One critic step (TD + conservative term) and one actor/temperature step on a batch [B]."""
        sac = self.sac
        obs, next_obs, target_next_obs = sac.batch_features(batch)  # a pixel agent's encoder learns from this loss
        target = sac.td_target(batch.reward, batch.discount, next_obs, target_next_obs)
        td_loss, q_data = sac.critic_loss(obs, batch.action, *target)
        # Q is in the agent's reward units (agent.critic.reward_scale), so the Monte-Carlo bound is scaled the same way
        gap, q_ood = self._conservative_gap(obs, next_obs, q_data, mc_return * sac.reward_scale())
        critic_loss = td_loss + self.cfg.cql_alpha * gap.sum()
        sac.step_critic(critic_loss)
        actor_metrics = sac.update_actor_and_temperature(obs.detach())
        return {
            "critic_loss": critic_loss.detach(),
            "td_loss": td_loss.detach(),
            "cql_gap": gap.detach().mean(),
            "q_mean": q_data.detach().mean(),
            "q_ood_mean": q_ood,
            **actor_metrics,
        }

    def _conservative_gap(
        self, obs: Tensor, next_obs: Tensor, q_data: Tensor, mc_return: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Per critic: mean over the batch of soft-max_a Q(s, a) - Q(s, a_data). Returns ([E], mean OOD Q)."""
        sac, cfg = self.sac, self.cfg
        n, (b, a_dim) = cfg.num_action_samples, (obs.shape[0], sac.action_dim)
        with torch.no_grad():
            obs_n = obs.repeat_interleave(n, dim=0)
            a_cur, logp_cur = sac.actor(obs_n)
            a_next, logp_next = sac.actor(next_obs.repeat_interleave(n, dim=0))
            a_rand = torch.rand(b * n, a_dim, device=obs.device) * 2 - 1
        # One critic call for all 3n actions of every state: [B, 3n, A] -> Q [E, B, 3n].
        actions = torch.cat([a.view(b, n, a_dim) for a in (a_rand, a_cur, a_next)], dim=1)
        q = sac.critic(obs.repeat_interleave(3 * n, dim=0), actions.reshape(b * 3 * n, a_dim)).view(-1, b, 3 * n)
        q_rand, q_cur, q_next = q.split(n, dim=2)
        if self.calibrated:
            bound = mc_return.view(1, b, 1)
            q_cur, q_next = torch.maximum(q_cur, bound), torch.maximum(q_next, bound)
        # Importance weights: the uniform density on [-1, 1]^A is 2^-A; the policy's is exp(log_prob).
        log_uniform = -a_dim * math.log(2.0)
        weighted = torch.cat(
            [q_rand - log_uniform, q_cur - logp_cur.view(1, b, n), q_next - logp_next.view(1, b, n)], dim=2
        )
        t = cfg.cql_temperature
        soft_max = torch.logsumexp(weighted / t, dim=2) * t  # [E, B]
        return (soft_max - q_data).mean(dim=1), q_cur.detach().mean()
