"""MLP behaviour-cloning policy that predicts a whole action chunk in one forward pass.

obs [B, O] -> MLP -> chunk [B, H, A] (deterministic, trained with MSE), or -> mean and log-std of a
diagonal Gaussian over the chunk (`gaussian=True`, trained with the negative log-likelihood). The Gaussian
is not tanh-squashed: it lives in the normalised action space and samples are clamped to [-1, 1] after
unnormalising, which keeps the likelihood exact where the data lies and needs no atanh of demo actions
that sit on the bounds (grippers do).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.mlp import mlp
from torch import Tensor

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class MLPPolicy(ChunkPolicy):
    """Chunked MLP policy; see the module docstring and `ChunkPolicy` for the API.

    Args (beyond `ChunkPolicy`'s):
        hidden: hidden widths of the MLP.
        gaussian: predict a Gaussian (NLL loss) instead of a point (MSE loss).
        log_std_min, log_std_max: bounds of the Gaussian's log-std (in the normalised space), reached smoothly.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizon: int = 8,
        execute: int | None = None,
        hidden: Sequence[int] = (256, 256),
        gaussian: bool = False,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        obs_norm: str = "mean_std",
        action_norm: str = "min_max",
        cameras: Mapping[str, Sequence[int]] | None = None,
        encoder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(obs_dim, action_dim, horizon, execute, obs_norm, action_norm, cameras, encoder)
        self.hidden, self.gaussian = [int(h) for h in hidden], bool(gaussian)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        outputs = self.horizon * self.action_dim * (2 if self.gaussian else 1)
        self.net = mlp(self.cond_dim, outputs, self.hidden)

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "hidden": self.hidden,
            "gaussian": self.gaussian,
            "log_std_min": self.log_std_min,
            "log_std_max": self.log_std_max,
        }

    def distribution(self, obs_n: Tensor) -> tuple[Tensor, Tensor | None]:
        """(mean [B, H, A], log_std [B, H, A] or None for the deterministic MLP), normalised space."""
        out = self.net(obs_n).view(obs_n.shape[0], self.horizon, -1)
        if not self.gaussian:
            return out, None
        mean, raw = out.chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw) + 1)
        return mean, log_std

    def _sample(self, obs_n: Tensor, noise: Tensor, deterministic: bool, num_steps: int | None) -> Tensor:
        mean, log_std = self.distribution(obs_n)
        if log_std is None or deterministic:
            return mean
        return mean + log_std.exp() * noise

    def _loss(self, obs_n: Tensor, chunk_n: Tensor) -> Tensor:
        mean, log_std = self.distribution(obs_n)
        if log_std is None:
            return F.mse_loss(mean, chunk_n)
        z = (chunk_n - mean) * torch.exp(-log_std)
        return (0.5 * z.pow(2) + log_std + _LOG_SQRT_2PI).mean()
