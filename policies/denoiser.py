"""The network of the diffusion and flow policies: (obs, noisy chunk, time) -> chunk-shaped output.

An MLP over the concatenation [normalised obs, flattened noisy chunk, time features], where the time
features are a sinusoidal embedding followed by a small MLP (as in DDPM and Diffusion Policy). It is the
simplest network that conditions on all three; Diffusion Policy's 1-D temporal U-Net with FiLM
conditioning is the stronger choice for long horizons and can replace it behind the same signature. The
diffusion policy predicts noise with it, the flow policy a velocity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from policies.mlp import mlp


def sinusoidal_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Transformer-style features [B, dim] of scalar times t [B] (integers or reals, up to ~max_period)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    angles = t.to(torch.float32)[:, None] * freqs[None, :]
    emb = torch.cat([angles.sin(), angles.cos()], dim=-1)
    return nn.functional.pad(emb, (0, dim - 2 * half))


class DenoiserMLP(nn.Module):
    """(obs [B, O], x [B, H, A], t [B]) -> [B, H, A]; see the module docstring."""

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256, 256),
        time_dim: int = 32,
    ) -> None:
        super().__init__()
        self.horizon, self.action_dim, self.time_dim = horizon, action_dim, time_dim
        self.time_mlp = nn.Sequential(
            nn.Linear(time_dim, 2 * time_dim), nn.SiLU(), nn.Linear(2 * time_dim, time_dim)
        )
        self.net = mlp(
            obs_dim + horizon * action_dim + time_dim, horizon * action_dim, hidden, activation=nn.SiLU
        )

    def forward(self, obs: Tensor, x: Tensor, t: Tensor) -> Tensor:
        time = self.time_mlp(sinusoidal_embedding(t, self.time_dim))
        out = self.net(torch.cat([obs, x.flatten(1), time], dim=-1))
        return out.view(x.shape)
