"""`ChunkPolicy`: what the behaviour-cloning policies (MLP, diffusion, flow) share.

The contract every BC policy implements, and what residual RL, DSRL, ReinFlow and DPPO build on:

- `act(obs, deterministic=False, noise=None) -> [N, A]` in [-1, 1]: the next action of each env, played from
  its current action chunk (`robot_rl.policies.chunking.ActionChunker`); this is the base action a residual policy
  corrects.
- `predict_chunk(obs, noise=None, deterministic=False) -> [N, H, A]` in [-1, 1]: one chunk, no queue.
  `noise` is the policy's latent, a standard normal of shape [N, *noise_shape] = [N, H, A]: the initial
  x_T of a diffusion policy, x_0 of a flow policy, the reparameterisation noise of a Gaussian MLP (ignored
  by a deterministic MLP). Passing it makes the output a deterministic function of (obs, noise), which is
  what steering in noise space (DSRL) needs; a diffusion policy with eta > 0 also draws noise at every
  DDIM step, so there only eta = 0 is deterministic given `noise`. `deterministic=True` means zero noise
  (and none injected along a sampling chain).
- `loss(obs, action_chunk) -> scalar`: the training loss on raw observations [B, O] and raw action chunks
  [B, H, A]; normalisation happens inside.
- `reset(env_ids)`: empty the action queues of envs whose episode ended; call it at every episode boundary.

Observations are the `state` group of an env's observation dict (or the bare [N, O] tensor). A camera policy
(`cameras`: group -> [H, W, C]) also reads those uint8 groups: its normalised state and each camera's image go
through `encoders.camera_fusion` (a DrQ `ConvEncoder` per camera by default, trained end to end by the BC loss,
with random shifts of the training images; `encoder` holds `camera_fusion`'s settings), and the policy's
network is conditioned on the fused features (`cond_dim` wide) instead of the state. Normalisers (`obs_norm`,
`action_norm`) are buffers, fitted once with `fit_normalization` before training, and saved with the weights. Subclasses implement `_sample` and
`_loss` in the normalised spaces and `config()` (their constructor keyword arguments, for
`robot_rl.policies.io.save_policy`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from robot_rl.policies.chunking import ActionChunker
from robot_rl.policies.encoders import CameraFusion, camera_batch, camera_fusion
from robot_rl.policies.normalize import Normalizer
from torch import Tensor, nn

# camera_fusion's settings of a BC camera policy unless its `encoder` says otherwise: DrQ's encoder, 64 features
DEFAULT_ENCODER: dict[str, Any] = {"encoder": "conv", "feature_dim": 64, "channels": 32, "layers": 4, "shift_pad": 4}

Obs = dict[str, Tensor] | Tensor


class ChunkPolicy(nn.Module, abc.ABC):
    """Base class: normalisers, the action chunker and the obs -> chunk -> action plumbing."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizon: int = 8,
        execute: int | None = None,
        obs_norm: str = "mean_std",
        action_norm: str = "min_max",
        cameras: Mapping[str, Sequence[int]] | None = None,
        encoder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.obs_dim, self.action_dim, self.horizon = int(obs_dim), int(action_dim), int(horizon)
        self.obs_norm = Normalizer(self.obs_dim, obs_norm)
        self.action_norm = Normalizer(self.action_dim, action_norm)
        self.chunker = ActionChunker(self.horizon, execute)
        self.cameras = {k: [int(v) for v in shape] for k, shape in sorted((cameras or {}).items())}
        self.encoder_config: dict[str, Any] = {}
        self.encoder: CameraFusion | None = None
        self.cond_dim = self.obs_dim  # what the subclass's network is conditioned on
        if self.cameras:
            bad = [k for k, shape in self.cameras.items() if len(shape) != 3 or min(shape) < 1]
            if bad:
                raise ValueError(f"camera group {bad[0]!r}: image shape must be [H, W, C], got {self.cameras[bad[0]]}")
            settings = [*DEFAULT_ENCODER, "backbone", "spatial_features"]  # camera_fusion's keyword arguments
            unknown = sorted(set(encoder or {}) - set(settings))
            if unknown:
                raise ValueError(f"encoder: unknown setting {unknown[0]!r} (settings: {', '.join(settings)})")
            self.encoder_config = {**DEFAULT_ENCODER, **(encoder or {})}
            self.encoder = camera_fusion(self.cameras, self.obs_dim, **self.encoder_config)
            self.cond_dim = self.encoder.out_dim

    # -- what subclasses provide -------------------------------------------------------------------------
    @abc.abstractmethod
    def _sample(self, obs_n: Tensor, noise: Tensor, deterministic: bool, num_steps: int | None) -> Tensor:
        """Conditioning [B, cond_dim] (`condition`) and latent noise [B, H, A] -> normalised action chunk [B, H, A]."""

    @abc.abstractmethod
    def _loss(self, obs_n: Tensor, chunk_n: Tensor) -> Tensor:
        """Training loss on a normalised batch."""

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this policy (JSON-serialisable)."""
        return {
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "horizon": self.horizon,
            "execute": self.chunker.execute,
            "obs_norm": self.obs_norm.mode,
            "action_norm": self.action_norm.mode,
            **({"cameras": self.cameras, "encoder": self.encoder_config} if self.cameras else {}),
        }

    # -- the contract --------------------------------------------------------------------------------------
    @property
    def noise_shape(self) -> tuple[int, int]:
        """Per-env shape of the latent noise `predict_chunk` takes: (horizon, action_dim)."""
        return (self.horizon, self.action_dim)

    @property
    def execute(self) -> int:
        return self.chunker.execute

    def fit_normalization(self, obs: Tensor, actions: Tensor) -> None:
        """Fit both normalisers to a dataset's observations [M, O] and actions [M, A]."""
        self.obs_norm.fit(obs)
        self.action_norm.fit(actions)

    def state(self, obs: Obs) -> Tensor:
        """The float32 state batch [N, O] on this policy's device."""
        x = obs["state"] if isinstance(obs, dict) else obs
        if x.dim() != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(f"expected observations [N, {self.obs_dim}], got {tuple(x.shape)}")
        return x.to(self.obs_norm.shift.device, torch.float32)

    def condition(self, obs: Obs, augment: bool = False) -> Tensor:
        """What the network is conditioned on: the normalised state [N, O], or for a camera policy the normalised
        state fused with the cameras' features [N, cond_dim] (`augment`: random shifts, in training)."""
        obs_n = self.obs_norm(self.state(obs))
        if self.encoder is None:
            return obs_n
        images = camera_batch(obs, self.cameras, obs_n.shape[0], obs_n)
        return self.encoder({"state": obs_n, **dict(zip(self.cameras, images, strict=True))}, augment)

    @property
    def features_dim(self) -> int:
        """Width of `features`: the state's for a state policy, `cond_dim` for a camera policy."""
        return self.obs_dim if self.encoder is None else self.cond_dim

    def features(self, obs: Obs) -> Tensor:
        """What a learner stacked on this frozen policy (residual RL, DSRL) sees of an observation [N, features_dim]:
        the raw state of a state policy; a camera policy's conditioning (its normalised state fused with its
        camera features), so that learner trains no image encoder of its own and its replay holds no frames."""
        return self.state(obs) if self.encoder is None else self.condition(obs)

    def predict_chunk(
        self, obs: Obs, noise: Tensor | None = None, deterministic: bool = False, num_steps: int | None = None
    ) -> Tensor:
        """One action chunk [N, H, A] in [-1, 1] per observation (see the module docstring)."""
        return self.chunk_from_features(self.features(obs), noise, deterministic, num_steps)

    def chunk_from_features(
        self, features: Tensor, noise: Tensor | None = None, deterministic: bool = False, num_steps: int | None = None
    ) -> Tensor:
        """`predict_chunk` from `features(obs)` [N, features_dim], which a learner on top computes once per step."""
        if self.encoder is None:
            obs_n = self.obs_norm(self.state(features))
        elif features.dim() != 2 or features.shape[1] != self.cond_dim:
            raise ValueError(f"expected camera-policy features [N, {self.cond_dim}], got {tuple(features.shape)}")
        else:
            obs_n = features.to(self.obs_norm.shift)
        if noise is None:
            shape = (obs_n.shape[0], *self.noise_shape)
            noise = obs_n.new_zeros(shape) if deterministic else torch.randn(shape, device=obs_n.device)
        elif noise.shape != (obs_n.shape[0], *self.noise_shape):
            raise ValueError(
                f"noise must be [N, {self.horizon}, {self.action_dim}], got {tuple(noise.shape)}"
            )
        chunk_n = self._sample(obs_n, noise.to(obs_n), deterministic, num_steps)
        return self.action_norm.unnormalize(chunk_n).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, noise: Tensor | None = None) -> Tensor:
        """The next action [N, A] of each env; a new chunk is planned (with `noise`, if given) for envs whose
        queue is empty."""
        return self.chunker.act(lambda: self.predict_chunk(obs, noise, deterministic))

    @torch.no_grad()
    def act_from_features(self, features: Tensor, deterministic: bool = False, noise: Tensor | None = None) -> Tensor:
        """`act` from `features(obs)` [N, features_dim]."""
        return self.chunker.act(lambda: self.chunk_from_features(features, noise, deterministic))

    def reset(self, env_ids: Tensor | None = None) -> None:
        """Drop the queued actions of `env_ids` (bool mask [N] or indices; None: all envs)."""
        self.chunker.reset(env_ids)

    def loss(self, obs: Obs, action_chunk: Tensor) -> Tensor:
        """Scalar training loss for raw observations [B, O] and raw action chunks [B, H, A]."""
        if action_chunk.shape[1:] != self.noise_shape:
            raise ValueError(
                f"action chunks must be [B, {self.horizon}, {self.action_dim}], got {tuple(action_chunk.shape)}"
            )
        obs_n = self.condition(obs, augment=self.training)
        return self._loss(obs_n, self.action_norm(action_chunk.to(obs_n)))
