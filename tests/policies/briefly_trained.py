"""A BC policy trained briefly on a smooth obs -> chunk map, for the export and ONNX tests: an untrained
diffusion policy's x0 estimates all land on its clip bounds, where a wrong network would go unnoticed."""

from __future__ import annotations

import torch
from robot_rl.policies.chunk_policy import ChunkPolicy


def briefly_trained(policy: ChunkPolicy, obs_scale: float = 3.0, steps: int = 150) -> ChunkPolicy:
    """Fit the normalisers and train `steps` Adam steps (batch 64 of 256 pairs); returns the policy in eval mode.
    Draws from torch's global RNG: seed before calling for a fixed policy."""
    obs_dim, horizon, action_dim = policy.obs_dim, policy.horizon, policy.action_dim
    obs = torch.randn(256, obs_dim) * obs_scale + 1
    chunks = torch.tanh(obs @ (torch.randn(obs_dim, horizon * action_dim) * 0.2)).view(-1, horizon, action_dim) * 0.6
    policy.fit_normalization(obs, chunks.reshape(-1, action_dim))
    opt = torch.optim.Adam(policy.parameters(), 3e-3)
    for _ in range(steps):
        batch = torch.randint(0, 256, (64,))
        loss = policy.loss(obs[batch], chunks[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy.eval()
