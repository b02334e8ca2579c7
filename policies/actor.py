"""Tanh-squashed Gaussian actor, the SAC policy."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from robot_rl.policies.mlp import mlp
from robot_rl.policies.normalize import RunningNorm
from torch import Tensor, nn

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class TanhGaussianActor(nn.Module):
    """obs [B, O] -> action in (-1, 1)^A, a = tanh(u), u ~ N(mean(obs), std(obs)).

    The log-std is squashed smoothly into [log_std_min, log_std_max] rather than clipped, so its gradient never
    vanishes at the bounds. `trunk` replaces the MLP (obs [B, O] -> [B, 2A], e.g. `robot_rl.policies.hyper.HyperActorTrunk`);
    `obs_norm` normalises observations first, and its statistics are saved with the actor's weights.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        layer_norm: bool = False,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        trunk: nn.Module | None = None,
        obs_norm: RunningNorm | None = None,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.trunk = trunk if trunk is not None else mlp(obs_dim, 2 * action_dim, hidden, layer_norm)
        self.obs_norm = obs_norm

    def output_layer(self) -> tuple[Tensor, Tensor]:
        """(weight, bias) of the last layer, rows/columns of the mean first: zeroing them zeroes the mean."""
        if hasattr(self.trunk, "output_layer"):
            weight, bias = self.trunk.output_layer
            return weight.T, bias
        last = self.trunk[-1]
        return last.weight, last.bias

    def distribution_params(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        mean, raw_log_std = self.trunk(obs).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw_log_std) + 1)
        return mean, log_std

    def forward(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Returns (action [B, A], log_prob [B]); log_prob includes the tanh change of variables."""
        mean, log_std = self.distribution_params(obs)
        if deterministic:
            u = mean
            noise = torch.zeros_like(mean)
        else:
            noise = torch.randn_like(mean)
            u = mean + log_std.exp() * noise
        gaussian_log_prob = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        # log(1 - tanh(u)^2) written in a form that stays finite for large |u|.
        squash_correction = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), gaussian_log_prob - squash_correction

    def log_prob(self, obs: Tensor, action: Tensor, eps: float = 1e-6) -> Tensor:
        """log pi(action | obs) [B] of given actions in [-1, 1] (e.g. a dataset's), clamped inside the open box."""
        mean, log_std = self.distribution_params(obs)
        u = torch.atanh(action.clamp(-1.0 + eps, 1.0 - eps))
        noise = (u - mean) * torch.exp(-log_std)
        gaussian_log_prob = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        squash_correction = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return gaussian_log_prob - squash_correction

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        return self(obs, deterministic)[0]
