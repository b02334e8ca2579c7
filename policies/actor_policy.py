"""`ActorPolicy`: a SAC actor as a saved policy (`robot-rl train` with any agent preset, hil-train learners).

A training checkpoint holds the actor's weights beside the critics, optimisers and replay, and rebuilding the
actor needs the agent's config (`robot_rl.agents.sac.build_actor`), i.e. training code. This wrapper keeps only
what acting needs, with constructor keyword arguments that JSON can hold, so `robot_rl.policies.io` saves and
loads it like the behaviour-cloning policies: `load_policy` rebuilds it from this package alone.

The deterministic action is tanh(mean(obs)) (the SAC actor's mode after squashing); the actor's running
observation normalisation (`obs_norm=True`, the default agent's) is a buffer of the actor, so it travels with
the weights. One action per call: `reset` exists only so that every saved policy has the same interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from robot_rl.policies.actor import TanhGaussianActor
from robot_rl.policies.hyper import HyperActorTrunk
from robot_rl.policies.normalize import RunningNorm
from torch import Tensor, nn

NETWORKS = ("mlp", "hyper")
Obs = dict[str, Tensor] | Tensor


def make_actor(
    obs_dim: int,
    action_dim: int,
    network: str = "mlp",
    hidden: Sequence[int] = (256, 256),
    layer_norm: bool = False,
    width: int = 128,
    blocks: int = 1,
    obs_norm: RunningNorm | None = None,
) -> TanhGaussianActor:
    """The SAC actor of a network kind: an MLP trunk (`hidden`, `layer_norm`) or a hyperspherical one (`width`,
    `blocks`). The one constructor for training (`build_actor`) and for loading, so saved weights always fit."""
    if network == "hyper":
        trunk = HyperActorTrunk(obs_dim, 2 * action_dim, width, blocks)
        return TanhGaussianActor(obs_dim, action_dim, trunk=trunk, obs_norm=obs_norm)
    if network != "mlp":
        raise ValueError(f"unknown actor network {network!r}; choose one of {', '.join(NETWORKS)}")
    return TanhGaussianActor(obs_dim, action_dim, hidden, layer_norm, obs_norm=obs_norm)


def state_batch(obs: Obs, obs_dim: int, like: Tensor) -> Tensor:
    """The float32 state batch [N, O] (the `state` group of an observation dict, or the bare tensor) on the
    device of `like`; a wrong shape is a ValueError naming the expected one."""
    x = obs["state"] if isinstance(obs, dict) else obs
    if x.dim() != 2 or x.shape[1] != obs_dim:
        raise ValueError(f"expected observations [N, {obs_dim}], got {tuple(x.shape)}")
    return x.to(like.device, torch.float32)


class ActorPolicy(nn.Module):
    """A tanh-Gaussian actor that acts from raw observations; see the module docstring.

    Args:
        obs_dim, action_dim: sizes of the state and the action.
        network: "mlp" or "hyper" (the agent's `network`).
        hidden, layer_norm: network=mlp: hidden widths, LayerNorm after each hidden layer.
        width, blocks: network=hyper: actor width and residual blocks.
        obs_norm: the actor normalises observations with running statistics (saved as buffers).
        action_repeat: env steps each action is held for during training (metadata for the deployer; the
            policy itself returns one action per call).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: str = "mlp",
        hidden: Sequence[int] = (256, 256),
        layer_norm: bool = False,
        width: int = 128,
        blocks: int = 1,
        obs_norm: bool = False,
        action_repeat: int = 1,
    ) -> None:
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self.network, self.hidden, self.layer_norm = network, [int(h) for h in hidden], bool(layer_norm)
        self.width, self.blocks, self.action_repeat = int(width), int(blocks), int(action_repeat)
        self.actor = make_actor(
            self.obs_dim, self.action_dim, network, self.hidden, self.layer_norm, self.width, self.blocks,
            RunningNorm(self.obs_dim) if obs_norm else None,
        )

    @property
    def _anchor(self) -> Tensor:
        return next(self.actor.parameters())

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this policy (JSON-serialisable)."""
        return {
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "network": self.network,
            "hidden": self.hidden,
            "layer_norm": self.layer_norm,
            "width": self.width,
            "blocks": self.blocks,
            "obs_norm": self.actor.obs_norm is not None,
            "action_repeat": self.action_repeat,
        }

    def forward(self, obs: Tensor) -> Tensor:
        """The deterministic action tanh(mean) [N, A] of raw observations [N, O] (the exported graph)."""
        mean, _ = self.actor.distribution_params(obs)
        return torch.tanh(mean)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, noise: Tensor | None = None) -> Tensor:
        """The action [N, A] in [-1, 1]: tanh(mean), or a sample of the actor's Gaussian. `noise` [N, A] is the
        sample's standard-normal draw (default: fresh), so a given noise makes the sample reproducible."""
        state = state_batch(obs, self.obs_dim, self._anchor)
        if deterministic:
            return self(state)
        mean, log_std = self.actor.distribution_params(state)
        eps = torch.randn_like(mean) if noise is None else noise.to(mean)
        return torch.tanh(mean + log_std.exp() * eps)

    def reset(self, env_ids: Tensor | None = None) -> None:
        """Nothing to forget: one action per observation, no queue."""
