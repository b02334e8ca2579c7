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
