"""Policies made of a frozen behaviour-cloning policy and a learned SAC actor: residual RL and DSRL results.

The fine-tuning methods (`robot_rl.finetune.residual`, `robot_rl.finetune.dsrl`) train only a SAC actor and
act through a frozen base `ChunkPolicy`. Their checkpoints hold neither in a form that deployment can load
without the training code, so these two classes hold both, with constructor keyword arguments that JSON can
hold (`robot_rl.policies.io`). The way base and actor combine is defined once, here (`residual_action`,
`steered_chunk`), and the training code calls the same functions, so an exported policy acts exactly as the
run's own evaluation did.

- `ResidualPolicy`: a = clip(a_base + scale * r, -1, 1), where a_base is the base's next action (played from
  its action chunks with its own queue) and r = the actor's correction from (features, a_base).
- `NoiseSteeredPolicy` (DSRL): the actor maps the features to w in [-1, 1]^(H*A); the base denoises the chunk
  from the initial noise noise_bound * w with no noise injected along the chain; the chunk plays with receding
  horizon like any chunk policy.

The actors see `ChunkPolicy.features`: the state for a state base; for a camera base its own frozen conditioning
(normalised state fused with its camera features), so a camera base needs no second encoder.
"""

from __future__ import annotations

from typing import Any

import torch
from robot_rl.policies.actor_policy import ActorPolicy, Obs
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.chunking import ActionChunker
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from torch import Tensor, nn

BASE_CLASSES: dict[str, type[ChunkPolicy]] = {cls.__name__: cls for cls in (MLPPolicy, DiffusionPolicy, FlowPolicy)}


def residual_action(base_action: Tensor, residual: Tensor, scale: float) -> Tensor:
    """The executed action of residual RL: clip(base + scale * residual, -1, 1)."""
    return (base_action + scale * residual).clamp(-1.0, 1.0)


def steered_chunk(base: ChunkPolicy, features: Tensor, w: Tensor, noise_bound: float) -> Tensor:
    """The chunk [M, H, A] the frozen `base` denoises from steering actions w [M, H*A] (DSRL) at `base.features`
    [M, F]: initial noise noise_bound * w, and no noise along the chain, so the chunk is a function of (obs, w)."""
    noise = noise_bound * w.view(-1, *base.noise_shape)
    return base.chunk_from_features(features, noise=noise, deterministic=True)


def base_spec(base: ChunkPolicy) -> dict[str, Any]:
    """How a composed policy's config names its base: class and constructor keyword arguments."""
    return {"class": type(base).__name__, "kwargs": base.config()}


def _build_base(spec: dict[str, Any]) -> ChunkPolicy:
    name = spec.get("class")
    if name not in BASE_CLASSES:
        raise ValueError(f"unknown base policy class {name!r}; known: {', '.join(BASE_CLASSES)}")
    return BASE_CLASSES[name](**spec.get("kwargs", {}))


class ResidualPolicy(nn.Module):
    """Frozen base chunk policy plus a learned correction (module docstring).

    Args:
        base: `base_spec` of the base policy (its weights load with this module's).
        actor: `ActorPolicy` keyword arguments of the correction, whose observation is [features, a_base].
        scale: bound of the correction (`residual.scale` of the run).
        base_deterministic: the base samples with zero noise (`residual.base_deterministic`).
    """

    def __init__(
        self, base: dict[str, Any], actor: dict[str, Any], scale: float, base_deterministic: bool = True
    ) -> None:
        super().__init__()
        self.base = _build_base(base)
        self.correction = ActorPolicy(**actor)
        if self.correction.obs_dim != self.base.features_dim + self.base.action_dim:
            raise ValueError(
                f"the correction sees [base features, base action] ({self.base.features_dim + self.base.action_dim} "
                f"values), not {self.correction.obs_dim}"
            )
        self.obs_dim, self.action_dim = self.base.obs_dim, self.base.action_dim
        self.cameras = self.base.cameras
        self.horizon, self.execute = self.base.horizon, self.base.execute
        self.scale, self.base_deterministic = float(scale), bool(base_deterministic)

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this policy (JSON-serialisable)."""
        return {"base": base_spec(self.base), "actor": self.correction.config(), "scale": self.scale,
                "base_deterministic": self.base_deterministic}

    def correct(self, features: Tensor, base_action: Tensor, deterministic: bool = True) -> Tensor:
        """The executed action for `base.features` [N, F] and the base's actions [N, A] there."""
        residual = self.correction.act(torch.cat([features, base_action], 1), deterministic)
        return residual_action(base_action, residual.to(base_action), self.scale)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, noise: Tensor | None = None) -> Tensor:
        """The next action [N, A] of each env: the base plays its chunks (its queue; `noise` [N, H, A] is the
        base's latent when it plans), the correction is the actor's mean (`deterministic`) or a sample."""
        features = self.base.features(obs)
        base_action = self.base.act_from_features(features, self.base_deterministic, noise)
        return self.correct(features, base_action, deterministic)

    def reset(self, env_ids: Tensor | None = None) -> None:
        """Drop the base's queued actions of `env_ids` (None: all); call at every episode boundary."""
        self.base.reset(env_ids)

    def step(self, obs: Obs, queue: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """`act` as a pure function of the queue state, for the exported graph (no Python state, no branch):
        obs [N, O] (with a camera base: the dict of state and images), queue [N, H, A] (the base chunk each env
        plays), pos [N] int64 (index of its next action; >= execute: plan a new chunk from obs, e.g. at an episode's
        first step) -> (action [N, A], queue, pos).
        The base plans every call and `where` keeps it only for the envs that need it; a base that samples
        (base_deterministic=False) has no such pure form."""
        if not self.base_deterministic:
            raise ValueError("step() needs a deterministic base (residual.base_deterministic=true)")
        features = self.base.features(obs)
        chunk = self.base.chunk_from_features(features, deterministic=True)
        need = pos >= self.execute
        queue = torch.where(need[:, None, None], chunk, queue)
        pos = torch.where(need, torch.zeros_like(pos), pos)
        base_action = queue.gather(1, pos.view(-1, 1, 1).expand(-1, 1, self.action_dim)).squeeze(1)
        return self.correct(features, base_action, deterministic=True), queue, pos + 1


class NoiseSteeredPolicy(nn.Module):
    """A frozen diffusion or flow policy steered through its initial noise by a learned actor (DSRL).

    Args:
        base: `base_spec` of the base policy.
        actor: `ActorPolicy` keyword arguments of the steering actor (base features -> H*A noise directions).
        noise_bound: w in [-1, 1] maps to the initial noise noise_bound * w (`dsrl.noise_bound`).
    """

    def __init__(self, base: dict[str, Any], actor: dict[str, Any], noise_bound: float) -> None:
        super().__init__()
        self.base = _build_base(base)
        if not isinstance(self.base, DiffusionPolicy | FlowPolicy):
            raise ValueError(f"DSRL steers a diffusion or flow policy, not a {type(self.base).__name__}")
        self.steering = ActorPolicy(**actor)
        size = self.base.horizon * self.base.action_dim
        if (self.steering.obs_dim, self.steering.action_dim) != (self.base.features_dim, size):
            raise ValueError(f"the steering actor must map {self.base.features_dim} base features to {size} noise values")
        self.obs_dim, self.action_dim = self.base.obs_dim, self.base.action_dim
        self.cameras = self.base.cameras
        self.horizon, self.execute = self.base.horizon, self.base.execute
        self.noise_bound = float(noise_bound)
        self.chunker = ActionChunker(self.horizon, self.execute)

    @property
    def noise_shape(self) -> tuple[int, int]:
        """Per-env shape of the latent `predict_chunk` takes: the actor's Gaussian draw, as [H, A]."""
        return self.base.noise_shape

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this policy (JSON-serialisable)."""
        return {"base": base_spec(self.base), "actor": self.steering.config(), "noise_bound": self.noise_bound}

    def predict_chunk(self, obs: Obs, noise: Tensor | None = None, deterministic: bool = False) -> Tensor:
        """One chunk [N, H, A] in [-1, 1]. `noise` [N, H, A] is the steering actor's standard-normal draw: w =
        tanh(mean + std * noise), so zeros (or deterministic) give the actor's mean steering."""
        features = self.base.features(obs)
        if deterministic:
            w = self.steering.act(features, deterministic=True)
        else:
            w = self.steering.act(features, noise=None if noise is None else noise.flatten(1))
        return steered_chunk(self.base, features, w, self.noise_bound)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, noise: Tensor | None = None) -> Tensor:
        """The next action [N, A] of each env, played from its current chunk (planned with `noise` if given)."""
        return self.chunker.act(lambda: self.predict_chunk(obs, noise, deterministic))

    def reset(self, env_ids: Tensor | None = None) -> None:
        """Drop the queued actions of `env_ids` (None: all); call at every episode boundary."""
        self.chunker.reset(env_ids)
