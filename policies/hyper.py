"""Hyperspherical residual networks (the SimbaV2 architecture, Lee et al. 2025): norms bounded everywhere.

Why: at high update-to-data ratios the weights and features of plain MLP critics grow without bound, effective
learning rates shrink and the network loses plasticity. Here every hidden feature vector lives on the unit sphere
and every weight vector of a hidden layer is re-projected onto the unit sphere after each optimiser step
(`project_()`), so the only free magnitudes are a few learned per-feature gains (`Scaler`).

- `HyperLinear`: bias-free linear layer whose weight columns (one per output unit) have unit norm;
- `Scaler`: a learned per-feature gain, stored as `scale` and used as `init / scale` times the stored value, so
  its effective learning rate is independent of the optimiser's (the parametrisation SimbaV2 uses);
- the embedder appends a constant `c_shift` to the input before normalising it, so the input's norm survives
  the projection onto the sphere;
- a block is an inverted bottleneck (width x4) whose output is interpolated with its input by a learned
  per-feature rate and projected back onto the sphere (`x <- normalize(x + alpha * (mlp(x) - x))`).

Every module here is an ensemble of `members` independent networks evaluated in one batched matmul per layer
(weights `[E, in, out]`), as `robot_rl.policies.ensemble` does for the MLP critics; an actor is an ensemble of one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from robot_rl.policies.normalize import RunningNorm
from torch import Tensor, nn


def l2_normalize(x: Tensor, dim: int = -1, eps: float = 1e-8) -> Tensor:
    return x * torch.rsqrt(x.pow(2).sum(dim, keepdim=True) + eps)


class HyperLinear(nn.Module):
    """`members` bias-free linear maps [E, B, in] -> [E, B, out] with unit-norm weight columns."""

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        for w in self.weight.data:
            nn.init.orthogonal_(w)
        self.project_()

    @torch.no_grad()
    def project_(self) -> None:
        """Back onto the unit sphere: each output unit's weight vector (a column) gets norm 1."""
        self.weight.copy_(l2_normalize(self.weight, dim=1))

    def forward(self, x: Tensor) -> Tensor:
        return torch.bmm(x, self.weight)


class Scaler(nn.Module):
    """Learned per-feature gain: value `init`, effective learning rate scaled by `init / scale`."""

    def __init__(self, members: int, features: int, init: float, scale: float) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.full((members, 1, features), float(scale)))
        self.forward_scale = init / scale

    def forward(self, x: Tensor) -> Tensor:
        return x * (self.gain * self.forward_scale)


class HyperBlock(nn.Module):
    """Residual block on the sphere: inverted bottleneck, then a learned interpolation with the input."""

    def __init__(self, members: int, hidden: int, expansion: int = 4, num_blocks: int = 1) -> None:
        super().__init__()
        inner = hidden * expansion
        self.up = HyperLinear(members, hidden, inner)
        scaler = math.sqrt(2.0 / hidden) / math.sqrt(expansion)
        self.up_gain = Scaler(members, inner, init=scaler, scale=scaler)
        self.down = HyperLinear(members, inner, hidden)
        # the interpolation rate starts at 1 / (blocks + 1) and learns at the rate of a 1/sqrt(hidden) parameter
        self.alpha = Scaler(members, hidden, init=1.0 / (num_blocks + 1), scale=1.0 / math.sqrt(hidden))

    def forward(self, x: Tensor) -> Tensor:
        # eps keeps an all-zero ReLU output off the origin, where the projection is undefined
        h = l2_normalize(self.down(F.relu(self.up_gain(self.up(x))) + 1e-8))
        return l2_normalize(x + self.alpha(h - x))


class HyperEncoder(nn.Module):
    """x [B, in] -> features [E, B, hidden] on the unit sphere: shift, embed, `num_blocks` residual blocks."""

    def __init__(self, members: int, in_dim: int, hidden: int, num_blocks: int, c_shift: float = 3.0) -> None:
        super().__init__()
        self.members, self.c_shift = members, c_shift
        self.embed = HyperLinear(members, in_dim + 1, hidden)
        gain = math.sqrt(2.0 / hidden)
        self.embed_gain = Scaler(members, hidden, init=gain, scale=gain)
        self.blocks = nn.Sequential(*(HyperBlock(members, hidden, num_blocks=num_blocks) for _ in range(num_blocks)))

    def forward(self, x: Tensor) -> Tensor:
        shift = torch.full((*x.shape[:-1], 1), self.c_shift, dtype=x.dtype, device=x.device)
        x = l2_normalize(torch.cat([x, shift], dim=-1))
        x = x.expand(self.members, *x.shape) if x.dim() == 2 else x
        return self.blocks(l2_normalize(self.embed_gain(self.embed(x))))


class HyperHead(nn.Module):
    """Features [E, B, hidden] -> outputs [E, B, out]: a hyperspherical layer, a gain, a linear output layer.

    `normalized_output=True` keeps the output layer's weight columns on the sphere too (the critic's value head);
    the actor's output layer is a plain linear layer so that it can be zeroed (residual RL and DSRL start from a
    zero action mean, `SAC.zero_actor_mean`).
    """

    def __init__(self, members: int, hidden: int, out_dim: int, normalized_output: bool) -> None:
        super().__init__()
        self.hidden = HyperLinear(members, hidden, hidden)
        # unit gain here (not sqrt(2/hidden) as inside the encoder, where a normalisation follows every gain): the
        # head's outputs are logits and action means, whose scale matters; with a gain of sqrt(2/hidden) the
        # categorical critic starts (and stays for thousands of updates) near the uniform distribution
        self.gain = Scaler(members, hidden, init=1.0, scale=1.0)
        self.normalized_output = normalized_output
        if normalized_output:
            self.out = HyperLinear(members, hidden, out_dim)
            self.bias = nn.Parameter(torch.zeros(members, 1, out_dim))
        else:
            self.out_weight = nn.Parameter(torch.empty(members, hidden, out_dim))
            self.bias = nn.Parameter(torch.zeros(members, 1, out_dim))
            nn.init.uniform_(self.out_weight, -1.0 / math.sqrt(hidden), 1.0 / math.sqrt(hidden))

    def forward(self, x: Tensor) -> Tensor:
        h = self.gain(self.hidden(x))
        if self.normalized_output:
            return self.out(h) + self.bias
        return torch.baddbmm(self.bias, h, self.out_weight)


def project_(module: nn.Module) -> None:
    """Re-project every hyperspherical layer of `module` after an optimiser step."""
    for m in module.modules():
        if isinstance(m, HyperLinear):
            m.project_()


class HyperQEnsemble(nn.Module):
    """`num_critics` hyperspherical critics: (obs [B, O], action [B, A]) -> Q [E, B] (and `logits` [E, B, K]).

    With `num_atoms > 1` each critic is categorical over `num_atoms` values evenly spaced in [-v_max, v_max]
    (`support`) and Q is the expectation; with one atom the head's output is Q itself. Observations go through
    `obs_norm` (shared with the actor) when given.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_critics: int = 2,
        hidden: int = 256,
        num_blocks: int = 1,
        num_atoms: int = 101,
        v_max: float = 5.0,
        obs_norm: RunningNorm | None = None,
    ) -> None:
        super().__init__()
        self.num_critics, self.num_atoms = num_critics, num_atoms
        self.obs_norm = obs_norm
        self.encoder = HyperEncoder(num_critics, obs_dim + action_dim, hidden, num_blocks)
        self.head = HyperHead(num_critics, hidden, num_atoms, normalized_output=True)
        self.register_buffer("support", torch.linspace(-v_max, v_max, num_atoms), persistent=False)

    def logits(self, obs: Tensor, action: Tensor) -> Tensor:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        return self.head(self.encoder(torch.cat([obs, action], dim=-1)))

    def values(self, logits: Tensor) -> Tensor:
        """Expected values [E, B] of head outputs [E, B, K]."""
        if self.num_atoms == 1:
            return logits.squeeze(-1)
        return (logits.float().softmax(-1) * self.support).sum(-1)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        return self.values(self.logits(obs, action))


class HyperActorTrunk(nn.Module):
    """obs [B, O] -> [B, out]: the hyperspherical actor body, a drop-in for the MLP trunk of the SAC actor."""

    def __init__(self, obs_dim: int, out_dim: int, hidden: int = 128, num_blocks: int = 1) -> None:
        super().__init__()
        self.encoder = HyperEncoder(1, obs_dim, hidden, num_blocks)
        self.head = HyperHead(1, hidden, out_dim, normalized_output=False)

    @property
    def output_layer(self) -> tuple[Tensor, Tensor]:
        """(weight [in, out], bias [out]) of the last layer, for zeroing the action mean."""
        return self.head.out_weight[0], self.head.bias[0, 0]

    def forward(self, obs: Tensor) -> Tensor:
        return self.head(self.encoder(obs))[0]
