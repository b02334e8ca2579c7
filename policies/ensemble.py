"""Ensembles of MLPs with stacked weights: all members run in one batched matmul per layer.

A Python loop over 10 critics launches 10x the kernels and dominates the cost of small networks; stacking the
weights as [members, in, out] makes the whole ensemble one `matmul` per layer and keeps it compile-friendly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from robot_rl.policies.normalize import RunningNorm
from torch import Tensor, nn


class EnsembleLinear(nn.Module):
    """`num_members` independent linear layers. Input [B, in] (shared by all members) or [E, B, in]."""

    def __init__(self, num_members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.num_members, self.in_features, self.out_features = num_members, in_features, out_features
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Same distribution as nn.Linear's default init, drawn independently per member.
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:  # one input shared by all members: a stride-0 view, no copy
            x = x.expand(self.num_members, *x.shape)
        # bias + x @ W in one kernel (saves a full elementwise pass over the activations)
        return torch.baddbmm(self.bias, x, self.weight)

    def extra_repr(self) -> str:
        return f"members={self.num_members}, in={self.in_features}, out={self.out_features}"


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate affine transform per member. Input [E, B, H]."""

    def __init__(self, num_members: int, features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.features, self.eps = features, eps
        self.weight = nn.Parameter(torch.ones(num_members, 1, features))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, features))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (self.features,), eps=self.eps) * self.weight + self.bias


class EnsembleMLP(nn.Module):
    """`num_members` MLPs of identical shape evaluated together: [B, in] or [E, B, in] -> [E, B, out]."""

    def __init__(
        self,
        num_members: int,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (256, 256),
        layer_norm: bool = False,
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        self.num_members = num_members
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers.append(EnsembleLinear(num_members, width, h))
            if layer_norm:
                layers.append(EnsembleLayerNorm(num_members, h))
            layers.append(activation())
            width = h
        layers.append(EnsembleLinear(num_members, width, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class QEnsemble(nn.Module):
    """An ensemble of Q(s, a) critics evaluated in one call: (obs [B, O], action [B, A]) -> Q [E, B]."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_critics: int = 2,
        hidden: Sequence[int] = (256, 256),
        layer_norm: bool = True,
        obs_norm: RunningNorm | None = None,
    ) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.obs_norm = obs_norm  # observations are normalised first when given (statistics shared with the actor)
        self.net = EnsembleMLP(num_critics, obs_dim + action_dim, 1, hidden, layer_norm)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)
