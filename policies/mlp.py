"""Plain MLP blocks."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def mlp(
    in_dim: int,
    out_dim: int,
    hidden: Sequence[int] = (256, 256),
    layer_norm: bool = False,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Sequential:
    """Linear -> [LayerNorm] -> activation for each hidden width, then a linear output layer.

    LayerNorm after each hidden linear layer is the RLPD recipe: it bounds Q-value extrapolation, which is what
    keeps high update-to-data ratios stable.
    """
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers.append(nn.Linear(width, h))
        if layer_norm:
            layers.append(nn.LayerNorm(h))
        layers.append(activation())
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)
