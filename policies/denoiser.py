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
from robot_rl.policies.mlp import mlp
from torch import Tensor, nn


def sinusoidal_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Transformer-style features [B, dim] of scalar times t [B] (integers or reals, up to ~max_period)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    angles = t.to(torch.float32)[:, None] * freqs[None, :]
    emb = torch.cat([angles.sin(), angles.cos()], dim=-1)
    return nn.functional.pad(emb, (0, dim - 2 * half))


def _embedding_mlp(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))


class DenoiserMLP(nn.Module):
    """(obs [B, O], x [B, H, A], t [B]) -> [B, H, A]; see the module docstring.

    `step_input=True` adds a second conditioning scalar (the step size of a shortcut flow model), embedded
    like t and concatenated with it; `forward` then takes it as `step` [B].
    """

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256, 256),
        time_dim: int = 32,
        step_input: bool = False,
    ) -> None:
        super().__init__()
        self.horizon, self.action_dim, self.time_dim = horizon, action_dim, time_dim
        self.time_mlp = _embedding_mlp(time_dim)
        self.step_mlp = _embedding_mlp(time_dim) if step_input else None
        cond_dim = time_dim * (2 if step_input else 1)
        self.net = mlp(
            obs_dim + horizon * action_dim + cond_dim, horizon * action_dim, hidden, activation=nn.SiLU
        )

    def forward(self, obs: Tensor, x: Tensor, t: Tensor, step: Tensor | None = None) -> Tensor:
        cond = [self.time_mlp(sinusoidal_embedding(t, self.time_dim))]
        if self.step_mlp is not None:
            if step is None:
                raise ValueError("this network is conditioned on the step size: pass step")
            cond.append(self.step_mlp(sinusoidal_embedding(step, self.time_dim)))
        out = self.net(torch.cat([obs, x.flatten(1), *cond], dim=-1))
        return out.view(x.shape)
