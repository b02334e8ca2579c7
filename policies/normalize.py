"""Per-dimension affine normalisation of observations or actions, fitted to a dataset.

`Normalizer` keeps `shift` and `scale` as buffers, so the statistics travel with the weights when a policy
is saved (safetensors) and a loaded policy normalises exactly as the trained one did, without the dataset.

Modes:
- `mean_std`: (x - mean) / std, the usual choice for observations;
- `min_max`:  maps [min, max] affinely onto [-1, 1], the usual choice for actions of diffusion and flow
  policies, whose samples are clipped to [-1, 1] in the normalised space;
- `identity`: leaves x unchanged (data that is already well scaled, and tests).

A dimension that does not vary in the data (std or range below `eps`, e.g. a gripper that stays open in
every demo) keeps a scale of 1: it is only centred, never divided by ~0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

MODES = ("mean_std", "min_max", "identity")


class Normalizer(nn.Module):
    """x -> (x - shift) / scale per dimension; `unnormalize` is the exact inverse."""

    shift: Tensor
    scale: Tensor

    def __init__(self, dim: int, mode: str = "mean_std", eps: float = 1e-6) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown normalisation mode {mode!r}; choose one of {', '.join(MODES)}")
        self.dim, self.mode, self.eps = int(dim), mode, float(eps)
        self.register_buffer("shift", torch.zeros(self.dim))
        self.register_buffer("scale", torch.ones(self.dim))

    @torch.no_grad()
    def fit(self, data: Tensor) -> Normalizer:
        """Set the statistics from samples [M, dim] (any leading shape, last dim = dim); returns self."""
        x = data.reshape(-1, self.dim).to(torch.float64)
        if x.shape[0] == 0:
            raise ValueError("cannot fit a normaliser to zero samples")
        if self.mode == "mean_std":
            shift, scale = x.mean(0), x.std(0, unbiased=False)
        elif self.mode == "min_max":
            lo, hi = x.amin(0), x.amax(0)
            shift, scale = (hi + lo) / 2, (hi - lo) / 2
        else:
            shift, scale = torch.zeros(self.dim, dtype=x.dtype), torch.ones(self.dim, dtype=x.dtype)
        scale = torch.where(scale < self.eps, torch.ones_like(scale), scale)
        self.shift.copy_(shift)
        self.scale.copy_(scale)
        return self

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.shift) / self.scale

    def unnormalize(self, y: Tensor) -> Tensor:
        return y * self.scale + self.shift

    def forward(self, x: Tensor) -> Tensor:
        return self.normalize(x)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, mode={self.mode}"


class RunningNorm(nn.Module):
    """Observation normalisation with running statistics: x -> clip((x - mean) / sqrt(var + eps)).

    Online RL cannot fit a normaliser to a dataset in advance; these statistics follow the data as it arrives
    (`update`, Chan et al.'s parallel mean/variance merge, exact for any batch sizes). They are buffers, so they
    are saved with the network that owns them (a checkpoint, a policy broadcast to an actor process, an export)
    and a restored policy normalises exactly as the trained one did. Before any update the map is the identity.
    """

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.clip, self.eps = int(dim), float(clip), float(eps)
        self.register_buffer("mean", torch.zeros(self.dim))
        self.register_buffer("var", torch.ones(self.dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge the statistics of samples [..., dim] into the running ones (tensor ops only, no host sync)."""
        x = x.reshape(-1, self.dim).float()
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        w = (n / total).float()  # the new samples' weight in the merged mean
        delta = batch_mean - self.mean
        self.mean.add_(delta * w)
        self.var.copy_(self.var * (1 - w) + batch_var * w + delta.pow(2) * w * (1 - w))
        self.count.copy_(total)

    def forward(self, x: Tensor) -> Tensor:
        return ((x - self.mean) * torch.rsqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update_preserving(self, x: Tensor, first_layers: Sequence[nn.Module]) -> None:
        """`update`, then rewrite the first layers that read this normaliser's output (their first `dim` inputs)
        so that every layer's output stays what it was for every observation inside the clip: the networks' function
        moves only with their updates, not with the statistics (as PopArt preserves outputs when it rescales
        targets, here for inputs). A layer y = W z + b with z = (x - m) / s becomes W' = W s' / s,
        b' = b + W (m' - m) / s. `nn.Linear` (weight [out, in]) and ensemble layers (weight [E, in, out], bias
        [E, 1, out]) are accepted."""
        old_mean, old_std = self.mean.clone(), torch.sqrt(self.var + self.eps)
        self.update(x)
        ratio = torch.sqrt(self.var + self.eps) / old_std
        shift = (self.mean - old_mean) / old_std
        for layer in first_layers:
            weight, bias = layer.weight, layer.bias
            if weight.dim() == 2:  # nn.Linear
                bias.add_(weight[:, : self.dim] @ shift)
                weight[:, : self.dim].mul_(ratio)
            else:
                bias[:, 0].add_(torch.einsum("eio,i->eo", weight[:, : self.dim], shift))
                weight[:, : self.dim].mul_(ratio[:, None])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, clip={self.clip}"
