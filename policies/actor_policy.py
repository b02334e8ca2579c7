"""`ActorPolicy`: a SAC actor as a saved policy (`robot-rl train` with any agent preset, hil-train learners).

A training checkpoint holds the actor's weights beside the critics, optimisers and replay, and rebuilding the
actor needs the agent's config (`robot_rl.agents.sac.build_actor`), i.e. training code. This wrapper keeps only
what acting needs, with constructor keyword arguments that JSON can hold, so `robot_rl.policies.io` saves and
loads it like the behaviour-cloning policies: `load_policy` rebuilds it from this package alone.

The deterministic action is tanh(mean(obs)) (the SAC actor's mode after squashing); the actor's running
observation normalisation (`obs_norm=True`, the default agent's) is a buffer of the actor, so it travels with
the weights. One action per call: `reset` exists only so that every saved policy has the same interface.

Cameras: the actor of a pixel SAC agent (DrQ) reads the proprioceptive `state`, normalised by the agent's running
statistics (`obs_norm`), fused with one encoder per camera group (`cameras`: group -> [H, W, C]; a `ConvEncoder`,
or a `PretrainedEncoder` on a frozen ResNet whose weights travel in the policy's weights file) by `CameraFusion`.
Given `cameras`, the policy holds those modules too (`state_norm`, `encoder`; built by `encoders.camera_fusion`,
as the agent builds them) and `act` takes `{"state": [N, S], "pixels/<camera>": uint8
[N, H, W, C], ...}`, never augmenting the images: the action of `SAC.act(obs, deterministic=True)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from robot_rl.policies.actor import TanhGaussianActor
from robot_rl.policies.encoders import ENCODERS, CameraFusion, camera_batch, camera_fusion
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
    """A tanh-Gaussian actor that acts from raw observations, optionally with cameras; see the module docstring.

    Args:
        obs_dim, action_dim: sizes of the state and the action.
        network: "mlp" or "hyper" (the agent's `network`).
        hidden, layer_norm: network=mlp: hidden widths, LayerNorm after each hidden layer.
        width, blocks: network=hyper: actor width and residual blocks.
        obs_norm: the state is normalised with running statistics (saved as buffers): inside the actor, or for a
            camera policy before the fusion (`state_norm`), as the agent does.
        action_repeat: env steps each action is held for during training (metadata for the deployer; the
            policy itself returns one action per call).
        cameras: camera group (`pixels`, `pixels/<camera>`) -> image shape [H, W, C]; none: a state-only actor.
        encoder_feature_dim, encoder_channels, encoder_layers, encoder, encoder_backbone, encoder_spatial_features,
            encoder_readout: each camera's encoder (the agent's `encoder*` fields; `encoder` is conv or pretrained).
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
        cameras: Mapping[str, Sequence[int]] | None = None,
        encoder_feature_dim: int = 50,
        encoder_channels: int = 32,
        encoder_layers: int = 4,
        encoder: str = "conv",
        encoder_backbone: str = "resnet10",
        encoder_spatial_features: int = 8,
        encoder_readout: bool = False,
    ) -> None:
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self.network, self.hidden, self.layer_norm = network, [int(h) for h in hidden], bool(layer_norm)
        self.width, self.blocks, self.action_repeat = int(width), int(blocks), int(action_repeat)
        self.obs_norm = bool(obs_norm)
        self.cameras = {k: [int(v) for v in shape] for k, shape in sorted((cameras or {}).items())}
        self.encoder_feature_dim, self.encoder_channels = int(encoder_feature_dim), int(encoder_channels)
        self.encoder_layers = int(encoder_layers)
        self.encoder_kind, self.encoder_backbone = str(encoder), str(encoder_backbone)
        self.encoder_spatial_features = int(encoder_spatial_features)
        self.encoder_readout = bool(encoder_readout)
        self.state_norm: RunningNorm | None = None
        self.encoder: CameraFusion | None = None
        net_dim, net_norm = self.obs_dim, RunningNorm(self.obs_dim) if obs_norm else None
        if self.cameras:
            bad = [k for k, shape in self.cameras.items() if len(shape) != 3 or min(shape) < 1]
            if bad:
                raise ValueError(f"camera group {bad[0]!r}: image shape must be [H, W, C], got {self.cameras[bad[0]]}")
            self.state_norm, net_norm = net_norm, None  # the state is normalised before the fusion
            if self.encoder_kind not in ENCODERS:
                raise ValueError(f"unknown encoder {self.encoder_kind!r}; choose one of {', '.join(ENCODERS)}")
            # a pretrained backbone is built empty here: the policy's weights file carries it
            self.encoder = camera_fusion(
                self.cameras, self.obs_dim, encoder=self.encoder_kind, feature_dim=self.encoder_feature_dim,
                channels=self.encoder_channels, layers=self.encoder_layers, backbone=self.encoder_backbone,
                spatial_features=self.encoder_spatial_features, readout=self.encoder_readout,
            )
            net_dim = self.encoder.out_dim
        self.actor = make_actor(
            net_dim, self.action_dim, network, self.hidden, self.layer_norm, self.width, self.blocks, net_norm
        )

    @property
    def _anchor(self) -> Tensor:
        return next(self.actor.parameters())

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this policy (JSON-serialisable)."""
        config = {
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "network": self.network,
            "hidden": self.hidden,
            "layer_norm": self.layer_norm,
            "width": self.width,
            "blocks": self.blocks,
            "obs_norm": self.obs_norm,
            "action_repeat": self.action_repeat,
        }
        if self.cameras:  # state-only policies keep the config they always had
            config.update(cameras=self.cameras, encoder_feature_dim=self.encoder_feature_dim,
                          encoder_channels=self.encoder_channels, encoder_layers=self.encoder_layers)
            if self.encoder_kind != "conv":  # conv policies keep the config they had before pretrained encoders
                config.update(encoder=self.encoder_kind, encoder_backbone=self.encoder_backbone,
                              encoder_spatial_features=self.encoder_spatial_features)
                if self.encoder_readout:  # policies without one keep the config they had before readouts
                    config.update(encoder_readout=True)
        return config

    def features(self, state: Tensor, images: Sequence[Tensor] = ()) -> Tensor:
        """What the actor reads: the raw state, or for a camera policy the normalised state fused with the cameras'
        features (`images` uint8 [N, H, W, C] in the order of `cameras`; no augmentation)."""
        if self.encoder is None:
            return state
        if self.state_norm is not None:
            state = self.state_norm(state)
        return self.encoder({"state": state, **dict(zip(self.cameras, images, strict=True))})

    def forward(self, obs: Tensor, *images: Tensor) -> Tensor:
        """The deterministic action tanh(mean) [N, A] of raw states [N, O] and, for a camera policy, the images of
        each camera group in the order of `cameras` (the exported graph)."""
        mean, _ = self.actor.distribution_params(self.features(obs, images))
        return torch.tanh(mean)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, noise: Tensor | None = None) -> Tensor:
        """The action [N, A] in [-1, 1]: tanh(mean), or a sample of the actor's Gaussian. `noise` [N, A] is the
        sample's standard-normal draw (default: fresh), so a given noise makes the sample reproducible. A camera
        policy takes a dict with `state` and every camera group (ValueError naming a missing or misshapen one)."""
        state = state_batch(obs, self.obs_dim, self._anchor)
        images = camera_batch(obs, self.cameras, state.shape[0], self._anchor) if self.cameras else []
        if deterministic:
            return self(state, *images)
        mean, log_std = self.actor.distribution_params(self.features(state, images))
        eps = torch.randn_like(mean) if noise is None else noise.to(mean)
        return torch.tanh(mean + log_std.exp() * eps)

    def reset(self, env_ids: Tensor | None = None) -> None:
        """Nothing to forget: one action per observation, no queue."""
