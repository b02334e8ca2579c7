"""Soft actor-critic with the RLPD recipe and the 2025 sample-efficiency recipe, in one agent.

What the RLPD recipe (Ball et al. 2023; SERL, HIL-SERL, WSRL) adds to plain SAC, each a config field below
(`agent.<group>.<key>`: the groups `network` and `encoder` are the deployed policy, the rest belong to training):
- an ensemble of `critic.num` Q-networks in one batched module; the TD target is the minimum over a random
  subset of `critic.num_target` target critics (RLPD's "random ensemble distillation" of REDQ);
- LayerNorm in the critics, so high update-to-data ratios do not blow Q-values up;
- `optimiser.utd` critic updates per environment transition, with one actor/temperature update per environment step
  (`optimiser.actor_each_update`: one after each critic update, as SimbaV2);
- a learned temperature with target entropy -|A| (scaled by `exploration.target_entropy_scale`);
- n-step returns, computed by the replay buffer, which also hands back the bootstrap discount: 0 after a
  terminal state, gamma^n through time limits (truncation bootstraps).

What the sample-efficient agents of 2025-26 share (SimbaV2, FlashSAC, CrossQ, BRO), each also a field, all on
in `configs/agent/simba.yaml`, the default of `robot-rl train`:
- `network.kind=hyper`: residual networks whose features and weights live on the unit sphere
  (`robot_rl.policies.hyper`), re-projected after every optimiser step, so parameter norms cannot drift at any
  update ratio;
- `critic.num_atoms > 1`: a distributional critic, categorical over `num_atoms` returns evenly spaced in
  [-v_max, v_max]; the TD target distribution (rewards plus the discounted support) is projected back onto
  the atoms and the critic is trained by cross-entropy (C51's projection; with min-reduction the target is
  the distribution of the target critic whose expected value is lowest);
- `critic.reward_scale`: rewards divided by a running scale of the discounted return (its standard deviation, but
  at least max|G| / v_max), so returns fit the fixed support on any task;
- `network.obs_norm`: running observation normalisation, part of the actor and critic modules (so saved with them);
- `exploration.noise_repeat_max > 1`: time-correlated exploration, each Gaussian noise sample held for a random number
  of steps (FlashSAC), which explores further than white noise at the same entropy.

Cameras (DrQ, Kostrikov et al. 2020): given `cameras` (the observation's `pixels` / `pixels/<camera>` groups), SAC
builds one `ConvEncoder` per camera (cameras see different things: a wrist view and a scene view share little
at the pixel level, and two small encoders cost the same as one twice as wide), fused with the (normalised)
proprioceptive `state` by `CameraFusion`; actor and critics then work on the fused features. Sampled frames are
randomly shifted (`random_shift`, +-`encoder.image_shift` pixels): obs once for the encoder, next obs once for
both the encoder and its target copy (as DrQ). Only the critic
loss trains the encoder (it is in the critic optimiser); the actor sees the critic update's features detached, as
in DrQ and SAC-AE, where actor gradients through the encoder made learning unstable. The target critics have
their own encoder copy, Polyak-averaged with them (rate `critic.tau`). State-only agents build none of this and run
exactly the code they ran before. `encoder.kind=pretrained` (HIL-SERL) swaps each `ConvEncoder` for a
`PretrainedEncoder`: one frozen ResNet from the user's `encoder.weights` file, shared by the cameras and by the
target encoder, under a learned spatial pooling and projection per camera, which are all the critic loss trains
(with `encoder.readout`, a frozen linear readout from the same file in their place, and nothing in the encoder
trains). With `encoder.cache_embeddings` (and no shifts) the replay keeps each frame's backbone features instead
of the frame (`robot_rl.observations`).

`update` takes a batch with a leading `optimiser.utd` dimension and returns metrics as tensors: nothing in it reads a
value back to the host, so the learner never waits on the device. `observe` is called once per environment
step (by `robot_rl.observations.ObservationPipeline` where a replay stores the steps): it updates the running
statistics of observations and returns.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from robot_rl.device import bf16_cpu_warning
from robot_rl.fields import help_field as _help
from robot_rl.policies import QEnsemble, TanhGaussianActor
from robot_rl.policies.actor_policy import make_actor
from robot_rl.policies.encoders import ENCODERS, RESNET_BLOCKS, CameraFusion, ResNetBackbone, camera_fusion
from robot_rl.policies.hyper import HyperQEnsemble, project_
from robot_rl.policies.normalize import RunningNorm
from robot_rl.replay import Batch, ReplayBuffer, prior_rows, sample_mixed

NETWORKS = ("mlp", "hyper")
REDUCTIONS = ("min", "mean")


# The agent's keys come in groups. `network` and `encoder` are the deployed policy's part: what an exported actor
# is rebuilt from (`actor_policy_kwargs` reads nothing else); `critic`, `optimiser` and `exploration` belong to
# training only. A key that matters only with another key's value names that key in its help.
@dataclass
class NetworkConfig:
    """The actor's and critics' networks, observation normalisation included (it is a part of them)."""

    kind: str = _help("mlp", "mlp (hidden_dims, LayerNorm options) or hyper (hyperspherical residual nets)")
    hidden_dims: list[int] = _help([256, 256], "kind=mlp: hidden widths of actor and critics")
    actor_layer_norm: bool = _help(False, "kind=mlp: LayerNorm after each hidden layer of the actor")
    critic_layer_norm: bool = _help(True, "kind=mlp: LayerNorm after each hidden layer of the critics")
    actor_width: int = _help(128, "kind=hyper: actor width")
    actor_blocks: int = _help(1, "kind=hyper: residual blocks of the actor")
    critic_width: int = _help(256, "kind=hyper: critic width (its blocks are 4x wider inside)")
    critic_blocks: int = _help(1, "kind=hyper: residual blocks of each critic")
    obs_norm: bool = _help(False, "normalise observations with running statistics (saved with the networks)")
    obs_norm_preserve: bool = _help(
        False, "with obs_norm, kind=mlp and no cameras: when online statistics move, rewrite the first layer of "
               "the actor and critics so their outputs stay the same (RunningNorm.update_preserving): a pretrained "
               "policy changes only with its updates (WSRL's warm-up then holds it exactly)"
    )


@dataclass
class EncoderConfig:
    """Camera tasks only: how each camera's frames become features (state-only agents build none of this)."""

    kind: str = _help("conv", "conv (DrQ's, trained end to end) or pretrained (a frozen ResNet from weights with "
                              "learned pooling, as HIL-SERL)")
    feature_dim: int = _help(50, "features per camera from its encoder (DrQ: 50)")
    channels: int = _help(32, "kind=conv: channels of every conv layer (DrQ: 32)")
    layers: int = _help(4, "kind=conv: 3x3 conv layers, the first with stride 2 (DrQ: 4)")
    image_shift: int = _help(4, "random-shift augmentation of sampled frames, in pixels (0: none)")
    weights: str | None = _help(None, "kind=pretrained: the backbone's local weights file (a torchvision state "
                                      "dict, .pth or .safetensors; nothing is downloaded)")
    backbone: str = _help("resnet10", "kind=pretrained: resnet10 (HIL-SERL's) or resnet18")
    spatial_features: int = _help(8, "kind=pretrained: learned poolings per feature-map channel")
    readout: bool = _help(False, "kind=pretrained: each camera's features are the frozen linear readout stored in "
                                 "weights (readout.<camera>.weight/.bias: a perception head trained with the "
                                 "backbone, e.g. a pose estimator), not a learned pooling; feature_dim = its outputs")
    cache_embeddings: bool = _help(False, "kind=pretrained, image_shift=0: the replay stores each frame's frozen "
                                          "backbone features instead of the frame, so updates never run the backbone")


@dataclass
class CriticConfig:
    """The critic ensemble and the TD target it learns: ensemble, reduction, support, returns."""

    num: int | None = _help(
        None, "critics in the ensemble (RLPD: 10 for state observations); default (null): 2 (clipped double Q) "
              "where episodes can terminate, 1 where they end only at a time limit (dm_control), as SimbaV2")
    num_target: int | None = _help(
        None, "random subset of target critics the TD target reduces over; default (null): min(2, num)")
    target_reduce: str = _help("min", "how the TD target combines the subset: min (clipped double Q) or mean")
    actor_q: str = _help("mean", "what the actor maximises over the ensemble: mean (RLPD) or min")
    num_atoms: int = _help(1, "1: scalar critics (MSE); >1: categorical critics over this many atoms "
                              "(network.kind=hyper)")
    v_max: float = _help(5.0, "num_atoms > 1: categorical support [-v_max, v_max], in scaled-return units")
    gamma: float = _help(0.99, "discount factor")
    n_step: int = _help(1, "n-step returns (RLPD/SERL use 1, 3 or 5)")
    tau: float = _help(0.005, "Polyak rate of the target critics (and a pixel agent's target encoder)")
    reward_scale: bool = _help(False, "divide rewards by a running scale of the discounted return")
    backup_entropy: bool = _help(True, "include the entropy bonus in the TD target")


@dataclass
class OptimiserConfig:
    """How the updates run: learning rates and their schedule, regularisers, batch, update ratio, precision."""

    actor_lr: float = _help(3e-4, "actor learning rate")
    critic_lr: float = _help(3e-4, "critic learning rate")
    temperature_lr: float = _help(3e-4, "temperature learning rate")
    lr_end_fraction: float = _help(
        1.0, "learning rates fall linearly over the run (robot-rl train: over train.steps) to this fraction of "
             "actor_lr, critic_lr and temperature_lr (SimbaV2: 1e-4 to 3e-5, 0.3); 1: constant")
    critic_weight_decay: float = _help(0.0, "AdamW weight decay of the critics")
    bc_weight: float = _help(
        0.0, "with prior data: the actor loss adds bc_weight x mean|Q| x the squared distance between its "
             "deterministic action and the prior data's action, on each batch's prior rows (TD3+BC's scaling; "
             "0: pure RLPD)"
    )
    batch_size: int = _help(256, "transitions per gradient update")
    utd: int = _help(1, "update-to-data ratio: critic updates per environment transition")
    actor_each_update: bool = _help(
        False, "an actor and temperature step after each of the utd critic updates (SimbaV2), not one after the "
               "last: the policy and its temperature move utd times as far per env step, at the cost of utd - 1 "
               "more actor updates")
    compile: bool = _help(False, "torch.compile the actor and critic losses (costs a minute of compilation)")
    bf16: bool = _help(False, "bfloat16 autocast for the networks in the updates (losses stay fp32); on a CPU only with "
                       "AVX512-BF16/AMX (elsewhere its matmuls are emulated, tens of times slower: a warning says so)")


@dataclass
class ExplorationConfig:
    """The entropy temperature and the exploration noise."""

    init_temperature: float = _help(1.0, "initial entropy temperature alpha (RLPD uses 0.01-0.1)")
    target_entropy_scale: float = _help(1.0, "target entropy = -scale * action_dim")
    noise_repeat_max: int = _help(
        1, "1: fresh exploration noise every step; >1: hold each noise sample for 1..this many steps (FlashSAC)"
    )
    noise_repeat_exponent: float = _help(2.0, "noise_repeat_max > 1: P(hold k steps) ~ k^-exponent for k = 1..max")


@dataclass
class SACConfig:
    """SAC with the RLPD options and the sample-efficiency options. Defaults are plain SAC, LayerNorm critics.

    `network` and `encoder`: the deployed policy; `critic`, `optimiser`, `exploration`: training only."""

    network: NetworkConfig = field(default_factory=NetworkConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    optimiser: OptimiserConfig = field(default_factory=OptimiserConfig)
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)

    def validate(self) -> None:
        """Raise ValueError naming the first bad field by its full key (`agent.critic.num`)."""
        net, enc, critic, opt, exp = self.network, self.encoder, self.critic, self.optimiser, self.exploration
        checks = [
            (net.kind in NETWORKS, f"agent.network.kind must be one of {', '.join(NETWORKS)}"),
            (len(net.hidden_dims) >= 1 and all(h > 0 for h in net.hidden_dims),
             "agent.network.hidden_dims must be a non-empty list of positive widths"),
            (min(net.critic_width, net.actor_width) >= 8,
             "agent.network.critic_width and agent.network.actor_width must be >= 8"),
            (min(net.critic_blocks, net.actor_blocks) >= 1,
             "agent.network.critic_blocks and agent.network.actor_blocks must be >= 1"),
            (not net.obs_norm_preserve or (net.obs_norm and net.kind == "mlp"),
             "agent.network.obs_norm_preserve=true needs agent.network.obs_norm=true and agent.network.kind=mlp (the "
             "first layer it rewrites is a plain linear one)"),
            (critic.num is None or 1 <= critic.num <= 20, "agent.critic.num must be between 1 and 20"),
            (critic.num_target is None or 1 <= critic.num_target <= (critic.num or 20),
             "agent.critic.num_target must be between 1 and agent.critic.num"),
            (critic.target_reduce in REDUCTIONS, f"agent.critic.target_reduce must be one of {', '.join(REDUCTIONS)}"),
            (critic.actor_q in REDUCTIONS, f"agent.critic.actor_q must be one of {', '.join(REDUCTIONS)}"),
            (critic.num_atoms == 1 or 3 <= critic.num_atoms <= 1001, "agent.critic.num_atoms must be 1 or in [3, 1001]"),
            (critic.num_atoms == 1 or net.kind == "hyper",
             "agent.critic.num_atoms > 1 needs agent.network.kind=hyper"),
            (critic.v_max > 0, "agent.critic.v_max must be > 0"),
            (0.0 < critic.gamma <= 1.0, "agent.critic.gamma must be in (0, 1]"),
            (critic.n_step >= 1, "agent.critic.n_step must be >= 1"),
            (0.0 < critic.tau <= 1.0, "agent.critic.tau must be in (0, 1]"),
            (opt.utd >= 1, "agent.optimiser.utd must be >= 1"),
            (opt.bc_weight >= 0.0, "agent.optimiser.bc_weight must be >= 0"),
            (opt.batch_size >= 1, "agent.optimiser.batch_size must be >= 1"),
            (0.0 < opt.lr_end_fraction <= 1.0, "agent.optimiser.lr_end_fraction must be in (0, 1]"),
            (exp.init_temperature > 0, "agent.exploration.init_temperature must be > 0"),
            (exp.noise_repeat_max >= 1, "agent.exploration.noise_repeat_max must be >= 1"),
            (exp.noise_repeat_exponent > 0, "agent.exploration.noise_repeat_exponent must be > 0"),
            (enc.kind in ENCODERS, f"agent.encoder.kind must be one of {', '.join(ENCODERS)}"),
            (enc.kind != "pretrained" or bool(enc.weights),
             "agent.encoder.kind=pretrained needs agent.encoder.weights=<local backbone weights file>"),
            (enc.backbone in RESNET_BLOCKS, f"agent.encoder.backbone must be one of {', '.join(RESNET_BLOCKS)}"),
            (enc.spatial_features >= 1, "agent.encoder.spatial_features must be >= 1"),
            (not enc.readout or enc.kind == "pretrained",
             "agent.encoder.readout=true needs agent.encoder.kind=pretrained (the readout lives in encoder.weights)"),
            (not enc.cache_embeddings or (enc.kind == "pretrained" and enc.image_shift == 0),
             "agent.encoder.cache_embeddings=true needs agent.encoder.kind=pretrained and agent.encoder.image_shift=0 "
             "(a shifted frame's features differ from the cached ones)"),
            (enc.feature_dim >= 1, "agent.encoder.feature_dim must be >= 1"),
            (enc.channels >= 1, "agent.encoder.channels must be >= 1"),
            (enc.layers >= 1, "agent.encoder.layers must be >= 1"),
            (enc.image_shift >= 0, "agent.encoder.image_shift must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SACConfig:
        """The config of a saved `agent` section (a checkpoint's, a config.yaml's, a preset's), grouped or with the
        flat keys of the release before the groups: checkpoints written then must still load."""
        defaults = cls()
        return cls(**{group: dataclasses.replace(getattr(defaults, group), **keys)
                      for group, keys in nest_flat_keys(values)[0].items()})


# The flat keys of the release before the groups work until the next release (`robot_rl.config` maps them with a
# one-line notice; then these lines go). Each was its field's name, `encoder_`-prefixed in the encoder, except these.
_OLD_NAMES = {"network.kind": "network", "encoder.kind": "encoder", "encoder.image_shift": "image_shift",
              "encoder.cache_embeddings": "cache_embeddings", "critic.num": "num_critics",
              "critic.num_target": "num_target_critics"}
# Keys added after the groups: they never had a flat name, so none is made up for them.
KEYS_SINCE_GROUPS = frozenset({"optimiser.actor_each_update"})
FLAT_KEYS = {_OLD_NAMES.get(key, key.replace("encoder.", "encoder_").split(".")[-1]): key
             for key in (f"{g.name}.{f.name}" for g in dataclasses.fields(SACConfig)
                         for f in dataclasses.fields(getattr(SACConfig(), g.name)))
             if key not in KEYS_SINCE_GROUPS}


def nest_flat_keys(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """An `agent` section with its old flat keys moved into their groups, and the old keys it had. `network` and
    `encoder` are old keys only with a text value (the mlp/hyper and conv/pretrained choice)."""
    nested = {k: dict(v) if isinstance(v, Mapping) else v for k, v in values.items()}
    old = [k for k in nested if k in FLAT_KEYS and not isinstance(nested[k], Mapping)]
    moves = [(k, nested.pop(k)) for k in old]  # all out first: `network: hyper` leaves room for its group
    for key, value in moves:
        group, leaf = FLAT_KEYS[key].split(".")
        nested.setdefault(group, {})[leaf] = value
    return nested, old


def resolve_critics(cfg: SACConfig, can_terminate: bool = True) -> SACConfig:
    """`cfg` with `critic.num` and `critic.num_target` filled in where they are null (the default).

    SimbaV2's rule: two critics with clipped double Q (the TD target's minimum over both) on tasks whose episodes
    can terminate, one critic without it where episodes end only at a time limit (its DMC runs). Measured here on
    dm_control walker-walk and gymnasium's HalfCheetah (bench/README.md; SimbaV2 keeps two on gymnasium): clipped
    double Q's pessimism slowed learning there, and one critic also halves the critics' cost; on Hopper, which
    terminates, one critic overestimated and learned a third as much (2 seeds). `can_terminate` is
    the env's (`BatchedEnv.can_terminate`; True where the backend cannot tell). Raises ValueError when an explicit
    `critic.num_target` exceeds the critics it resolves to.
    """
    num = cfg.critic.num if cfg.critic.num is not None else (2 if can_terminate else 1)
    target = cfg.critic.num_target if cfg.critic.num_target is not None else min(2, num)
    if target > num:
        source = "agent.critic.num" if cfg.critic.num is not None else f"agent.critic.num resolves to {num}"
        raise ValueError(f"agent.critic.num_target={target} exceeds the {num} critic(s) of this task ({source}); "
                         "set agent.critic.num too")
    return dataclasses.replace(cfg, critic=dataclasses.replace(cfg.critic, num=num, num_target=target))


def random_subset(num: int, k: int, device: torch.device) -> Tensor:
    """k distinct indices out of num, uniformly (argsort of uniform noise: a compile-friendly randperm)."""
    return torch.rand(num, device=device).argsort()[:k]


def min_of_random_subset(q_all: Tensor, k: int) -> Tensor:
    """[E, B] ensemble values -> [B]: the minimum over a random subset of k members (REDQ / RLPD target)."""
    return q_all[random_subset(q_all.shape[0], k, q_all.device)].min(dim=0).values


def categorical_projection(atoms: Tensor, probs: Tensor | None, support: Tensor) -> Tensor:
    """Project the distribution with mass `probs` [B, M] at values `atoms` [B, M] onto `support` [K] -> [B, K].

    Each mass is clamped into the support's range and split between its two neighbouring atoms in proportion
    to the distances (C51's projection); `probs=None` puts all mass on one value per row (`atoms` [B, 1]), the
    "two-hot" encoding of a scalar target. Mass is conserved exactly.
    """
    k = support.shape[0]
    v_min, v_max = support[0], support[-1]
    if probs is None:
        probs = torch.ones_like(atoms)
    pos = (atoms.clamp(v_min, v_max) - v_min) / ((v_max - v_min) / (k - 1))  # fractional atom index in [0, K-1]
    lower = pos.floor().clamp(max=k - 1)
    upper_frac = pos - lower
    lower = lower.long()
    upper = (lower + 1).clamp(max=k - 1)
    out = torch.zeros(atoms.shape[0], k, dtype=probs.dtype, device=probs.device)
    out.scatter_add_(1, lower, probs * (1 - upper_frac))
    out.scatter_add_(1, upper, probs * upper_frac)
    return out


class ReturnScale(torch.nn.Module):
    """The running scale rewards are divided by: max(std(G), max|G| / v_max) over discounted returns G.

    G follows each env's reward stream (G <- gamma * G * (1 - done) + r), as in SimbaV2 and FlashSAC. The
    standard deviation makes the critic's targets unit-scale on any task; the max-bound keeps the largest
    return seen inside a categorical support of half-width v_max. Until any reward is seen the scale is 1.
    """

    running: Tensor
    abs_max: Tensor

    def __init__(self, gamma: float, v_max: float) -> None:
        super().__init__()
        self.gamma, self.v_max = gamma, v_max
        self.returns = RunningNorm(1)
        self.register_buffer("running", torch.zeros(0))
        self.register_buffer("abs_max", torch.zeros(()))

    @torch.no_grad()
    def observe(self, reward: Tensor, done: Tensor, env_ids: Tensor | None = None, num_envs: int = 0) -> None:
        """One reward per env ([N]), or per env in `env_ids` of `num_envs` (loops whose steps cover a subset)."""
        reward, keep = reward.float(), (~done.bool()).float()
        n = reward.shape[0] if env_ids is None else num_envs
        if self.running.shape != (n,):
            self.running = torch.zeros(n, device=reward.device)
        ids = slice(None) if env_ids is None else env_ids
        g = self.gamma * self.running[ids] + reward
        self.returns.update(g.unsqueeze(-1))
        self.abs_max = torch.maximum(self.abs_max, g.abs().max())
        self.running[ids] = g * keep

    @torch.no_grad()
    def observe_returns(self, returns: Tensor) -> None:
        """Statistics from returns of whole trajectories (a dataset's Monte-Carlo returns)."""
        returns = returns.float().reshape(-1)
        self.returns.update(returns.unsqueeze(-1))
        self.abs_max = torch.maximum(self.abs_max, returns.abs().max())

    def scale(self) -> Tensor:
        """Rewards are multiplied by this (a 0-dim tensor; no host sync)."""
        denominator = torch.maximum(self.returns.var[0].sqrt(), self.abs_max / self.v_max)
        return torch.where(denominator > 1e-8, 1.0 / denominator.clamp_min(1e-8), torch.ones_like(denominator))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        # the per-env running return has the shape of the env batch, which a new run may change
        key = prefix + "running"
        if key in state_dict:
            self.running = torch.zeros_like(state_dict[key])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def build_actor(
    obs_dim: int, action_dim: int, cfg: SACConfig, obs_norm: RunningNorm | None = None
) -> TanhGaussianActor:
    """The actor `cfg` describes, untrained: the one constructor for the learner and for every process that only
    acts (robot actors, `deploy`), so an actor's weights always load into the network they came from.

    With `cfg.network.obs_norm` and no `obs_norm` given, the actor gets its own (empty) normaliser, whose
    statistics then come with the weights.
    """
    net = cfg.network
    if obs_norm is None and net.obs_norm:
        obs_norm = RunningNorm(obs_dim)
    return make_actor(obs_dim, action_dim, net.kind, net.hidden_dims, net.actor_layer_norm, net.actor_width,
                      net.actor_blocks, obs_norm)


def actor_policy_kwargs(obs_dim: int, action_dim: int, cfg: SACConfig, action_repeat: int = 1,
                        cameras: dict[str, tuple[int, ...]] | None = None) -> dict:
    """`robot_rl.policies.actor_policy.ActorPolicy` keyword arguments of the actor `cfg` describes: what an
    exported policy directory stores so that `build_actor`'s network is rebuilt without this config: the deployed
    groups only (`network`, and with `cameras`, a pixel agent's group -> (H, W, C), the `encoder` as `SAC.__init__`
    builds it)."""
    net, enc = cfg.network, cfg.encoder
    kwargs = {
        "obs_dim": obs_dim, "action_dim": action_dim, "network": net.kind, "hidden": list(net.hidden_dims),
        "layer_norm": net.actor_layer_norm, "width": net.actor_width, "blocks": net.actor_blocks,
        "obs_norm": net.obs_norm, "action_repeat": action_repeat,
    }
    if cameras:
        kwargs.update(cameras={k: list(shape) for k, shape in cameras.items()},
                      encoder_feature_dim=enc.feature_dim, encoder_channels=enc.channels, encoder_layers=enc.layers)
        if enc.kind != "conv":  # conv policies keep the config they had before pretrained encoders
            kwargs.update(encoder=enc.kind, encoder_backbone=enc.backbone, encoder_spatial_features=enc.spatial_features)
            if enc.readout:
                kwargs.update(encoder_readout=True)
    return kwargs


def policy_state_dict(state: dict) -> dict[str, Tensor]:
    """The `ActorPolicy` weights in an agent's `state_dict()` (a checkpoint's `agent`): the actor, and for a pixel
    agent its encoder and the state's running statistics (which live outside its actor)."""
    weights = {f"actor.{k}": v for k, v in state["actor"].items()}
    if "encoder" in state:
        weights.update({f"encoder.{k}": v for k, v in state["encoder"].items()})
        weights.update({f"state_norm.{k}": v for k, v in state.get("obs_norm", {}).items()})
    return weights


def camera_groups(obs_spec: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, tuple[int, ...]]:
    """The camera groups of an observation spec (`pixels`, `pixels/<camera>`) and their image shapes (H, W, C)."""
    return {k: tuple(shape) for k, (shape, _) in obs_spec.items() if k == "pixels" or k.startswith("pixels/")}


class SAC:
    """Actor, critic ensemble, target ensemble, temperature and their optimisers, on one device.

    `obs_dim` is the size of the `state` group; `cameras` (group -> (H, W, C)) makes it a pixel agent (module
    docstring), whose networks take `state` and the camera features.
    """

    def __init__(self, obs_dim: int, action_dim: int, cfg: SACConfig, device: str | torch.device = "cpu",
                 cameras: dict[str, tuple[int, ...]] | None = None) -> None:
        cfg.validate()
        cfg = resolve_critics(cfg)  # where the caller has not (`trainer.build_agent` does, from the env)
        self.cfg, self.obs_dim, self.action_dim = cfg, obs_dim, action_dim
        self.device = torch.device(device)
        net, enc, critic, opt = cfg.network, cfg.encoder, cfg.critic, cfg.optimiser
        if opt.bf16 and self.device.type == "cpu" and (message := bf16_cpu_warning()):
            warnings.warn(message, stacklevel=2)
        self.obs_norm = RunningNorm(obs_dim).to(self.device) if net.obs_norm else None
        self.encoder: CameraFusion | None = None
        net_dim, net_norm = obs_dim, self.obs_norm
        if cameras:
            self.encoder = camera_fusion(
                cameras, obs_dim, encoder=enc.kind, feature_dim=enc.feature_dim, channels=enc.channels,
                layers=enc.layers, shift_pad=enc.image_shift, backbone=enc.backbone,
                spatial_features=enc.spatial_features, weights=enc.weights, readout=enc.readout,
            ).to(self.device)
            frozen = {id(m): m for m in self.encoder.modules() if isinstance(m, ResNetBackbone)}
            self.encoder_target = copy.deepcopy(self.encoder, memo=frozen).requires_grad_(False)
            # The statistics normalise `state` before the fusion (features of a changing encoder have none).
            net_dim, net_norm = self.encoder.out_dim, None
        self.net_dim = net_dim  # width of what the actor and critics read (`features`)
        # A pixel agent's actor gets no normaliser of its own: `features` has normalised the state already.
        actor_cfg = cfg if self.encoder is None else dataclasses.replace(
            cfg, network=dataclasses.replace(net, obs_norm=False))
        self.actor = build_actor(net_dim, action_dim, actor_cfg, obs_norm=net_norm)
        if net.kind == "hyper":
            self.critic = HyperQEnsemble(
                net_dim, action_dim, critic.num, net.critic_width, net.critic_blocks, critic.num_atoms, critic.v_max,
                obs_norm=net_norm,
            )
        else:
            self.critic = QEnsemble(
                net_dim, action_dim, critic.num, net.hidden_dims, net.critic_layer_norm, obs_norm=net_norm
            )
        self.actor.to(self.device)
        self.critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        if net_norm is not None:
            self.critic_target.obs_norm = self.obs_norm  # one set of statistics for every network
        # agent.network.obs_norm_preserve: the layers that read the normalised state first, rewritten when it moves
        self._preserved_layers: list[torch.nn.Module] = []
        if net.obs_norm_preserve:
            if self.encoder is not None:
                raise ValueError("agent.network.obs_norm_preserve=true works on state agents only: set it to false "
                                 "with cameras")
            self._preserved_layers = [self.actor.trunk[0], self.critic.net.net[0], self.critic_target.net.net[0]]
        self.return_scale = ReturnScale(critic.gamma, critic.v_max).to(self.device) if critic.reward_scale else None
        self._hyper = net.kind == "hyper"
        self.log_alpha = torch.tensor(math.log(cfg.exploration.init_temperature), device=self.device,
                                      requires_grad=True)
        self.target_entropy = -cfg.exploration.target_entropy_scale * action_dim

        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=opt.actor_lr, fused=True)
        # A pixel agent's encoder learns from the critic loss alone: it is in the critic optimiser only.
        critic_params = list(self.critic.parameters())
        if self.encoder is not None:
            critic_params += [p for p in self.encoder.parameters() if p.requires_grad]
        self.critic_opt = torch.optim.AdamW(
            critic_params, lr=opt.critic_lr, weight_decay=opt.critic_weight_decay, fused=True
        )
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=opt.temperature_lr, fused=True)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        if self.encoder is not None:  # the target encoder follows the encoder at the target critics' rate
            # (a frozen backbone is the same in both: averaging its millions of weights would change nothing)
            pairs = [(p, t) for p, t in zip(self.encoder.parameters(), self.encoder_target.parameters(), strict=True)
                     if p.requires_grad]
            self._critic_params += [p for p, _ in pairs]
            self._target_params += [t for _, t in pairs]
        self._actor_features: Tensor | None = None  # a pixel agent's last critic batch, encoded (detached)
        # time-correlated exploration: the held noise and the steps left to hold it, per env (sized on first use)
        self._held_noise: Tensor | None = None
        self._hold_left: Tensor | None = None
        k = torch.arange(1, cfg.exploration.noise_repeat_max + 1, dtype=torch.float32, device=self.device)
        self._hold_probs = k.pow(-cfg.exploration.noise_repeat_exponent)
        # torch.compile fuses the elementwise work around the matmuls of the two losses; backward and the
        # (fused) optimiser steps stay eager. Compilation costs tens of seconds once, so it is opt-in. On CUDA
        # "reduce-overhead" also replays the losses as CUDA graphs; a graph's outputs live in memory that the
        # next replay overwrites, so `update` clones what it returns (see test_sac's CUDA-graph test).
        self._cuda_graphs = opt.compile and self.device.type == "cuda"
        mode = "reduce-overhead" if self._cuda_graphs else None
        self._critic_loss_fn = torch.compile(self._critic_loss, mode=mode) if opt.compile else self._critic_loss
        self._actor_loss_fn = torch.compile(self._actor_loss, mode=mode) if opt.compile else self._actor_loss

    # -- data statistics ------------------------------------------------------------------------------------
    @torch.no_grad()
    def observe(
        self, obs: dict[str, Tensor], reward: Tensor, done: Tensor, env_ids: Tensor | None = None, num_envs: int = 0
    ) -> None:
        """One environment step of every env, as it is collected: running observation and return statistics.

        `obs` is the observation the step started from; `done` = terminated | truncated. Loops whose steps cover
        a subset of their envs (one macro step per finished action chunk) pass `env_ids` and `num_envs`. A
        no-op unless `network.obs_norm` or `critic.reward_scale` is on.
        """
        if self.obs_norm is not None:
            if self._preserved_layers:
                self.obs_norm.update_preserving(obs["state"].to(self.device), self._preserved_layers)
            else:
                self.obs_norm.update(obs["state"].to(self.device))
        if self.return_scale is not None:
            ids = None if env_ids is None else env_ids.to(self.device)
            self.return_scale.observe(reward.to(self.device), done.to(self.device), ids, num_envs)

    @torch.no_grad()
    def observe_dataset(self, obs: Tensor, returns: Tensor) -> None:
        """Running statistics from a dataset (offline pretraining, prior data): its states and MC returns."""
        if self.obs_norm is not None:
            self.obs_norm.update(obs.to(self.device))
        if self.return_scale is not None:
            self.return_scale.observe_returns(returns.to(self.device))

    def reward_scale(self) -> Tensor | float:
        """What rewards (and returns) are multiplied by before they reach the critics: Q is in these units."""
        return 1.0 if self.return_scale is None else self.return_scale.scale()

    # -- acting ---------------------------------------------------------------------------------------------
    def features(self, obs: dict[str, Tensor], augment: bool = False, target: bool = False) -> Tensor:
        """What the networks read: `state`, or for a pixel agent `state` (normalised) fused with the cameras'
        features from the encoder (`target`: the target critics' copy; `augment`: random shifts)."""
        state = obs["state"].to(self.device)
        if self.encoder is None:
            return state
        if self.obs_norm is not None:
            state = self.obs_norm(state)
        encoder = self.encoder_target if target else self.encoder
        return encoder({"state": state, **{k: obs[k].to(self.device) for k in encoder.keys}}, augment)

    @torch.no_grad()
    def act(self, obs: dict[str, Tensor], deterministic: bool = False) -> Tensor:
        """Actions in [-1, 1] for a batch of observations (dict of named groups; SAC reads `state` and, for a
        pixel agent, the camera groups)."""
        state = self.features(obs)
        if deterministic or self.cfg.exploration.noise_repeat_max == 1:
            return self.actor(state, deterministic)[0]
        mean, log_std = self.actor.distribution_params(state)
        return torch.tanh(mean + log_std.exp() * self._correlated_noise(mean))

    def _correlated_noise(self, like: Tensor) -> Tensor:
        """Standard normal noise [N, A], each env's sample held for a random duration (FlashSAC's exploration)."""
        if self._held_noise is None or self._held_noise.shape != like.shape:
            self._held_noise = torch.randn_like(like)
            self._hold_left = torch.zeros(like.shape[0], dtype=torch.long, device=like.device)
        assert self._hold_left is not None
        expired = self._hold_left <= 0
        fresh = torch.randn_like(like)
        self._held_noise = torch.where(expired.unsqueeze(-1), fresh, self._held_noise)
        durations = torch.multinomial(self._hold_probs, like.shape[0], replacement=True) + 1
        self._hold_left = torch.where(expired, durations, self._hold_left) - 1
        return self._held_noise

    @torch.no_grad()
    def zero_actor_mean(self) -> None:
        """Zero the mean half of the actor's output layer: the deterministic action is then exactly 0 (tanh(0)),
        so fine-tuning starts at the policy the action modifies (residual RL's zero correction, DSRL's zero noise).
        """
        weight, bias = self.actor.output_layer()
        weight[: self.action_dim].zero_()
        bias[: self.action_dim].zero_()

    # -- learning -------------------------------------------------------------------------------------------
    def sample(self, online: ReplayBuffer, prior: ReplayBuffer | None = None, prior_fraction: float = 0.0,
               generator: torch.Generator | None = None) -> Batch:
        """One `update`'s data, as this agent's config asks: `utd` minibatches of `batch_size` ([utd, batch_size]),
        each mixing `prior` rows at `prior_fraction` when a prior buffer is given (RLPD; `replay.sample_mixed`)."""
        opt = self.cfg.optimiser
        return sample_mixed(online, prior, opt.batch_size, opt.utd, prior_fraction, generator)

    def learn(self, online: ReplayBuffer, prior: ReplayBuffer | None = None, prior_fraction: float = 0.0,
              actor: bool = True, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """`update` on `sample(...)`: the agent owns its update-to-data ratio and batch size."""
        return self.update(self.sample(online, prior, prior_fraction, generator), actor=actor,
                           prior_rows=prior_rows(prior, self.cfg.optimiser.batch_size, prior_fraction))

    def update(self, batch: Batch, actor: bool = True, prior_rows: int = 0) -> dict[str, Tensor]:
        """`batch` has leading dims [utd, batch_size]: utd critic updates, then one actor/temperature update
        (`optimiser.actor_each_update`: one after each critic update, on its minibatch).

        `actor=False` updates the critics only: the critic warm-up of fine-tuning (ResFiT), which fits Q to the
        starting policy before the actor may follow it. `prior_rows`: how many leading rows of each minibatch
        are prior data (`replay.prior_rows`), which `bc_weight` pulls the actor towards.
        """
        utd, each = batch.action.shape[0], self.cfg.optimiser.actor_each_update
        for i in range(utd):
            if self._cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            minibatch = batch.index(i)
            critic_metrics = self._update_critic(minibatch)
            if actor and (each or i == utd - 1):
                if self._cuda_graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                actor_metrics = self._update_actor(minibatch, prior_rows)
        if not actor:
            return {k: v.clone() for k, v in critic_metrics.items()} if self._cuda_graphs else critic_metrics
        metrics = {**critic_metrics, **actor_metrics}
        return {k: v.clone() for k, v in metrics.items()} if self._cuda_graphs else metrics

    def _update_actor(self, minibatch: Batch, prior_rows: int) -> dict[str, Tensor]:
        """The actor/temperature step on the observations of the critic update just made. A pixel agent's actor
        reads that update's features, detached: no actor gradient reaches the encoder (module docstring)."""
        actor_obs = minibatch.obs["state"] if self.encoder is None else self._actor_features
        bc_action = minibatch.action[:prior_rows] if self.cfg.optimiser.bc_weight > 0 and prior_rows > 0 else None
        return self._update_actor_and_temperature(actor_obs, bc_action)

    @torch.no_grad()
    def td_target(self, reward: Tensor, discount: Tensor, next_obs: Tensor,
                  target_next_obs: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """The soft TD target of (unscaled) rewards, in the critics' units. The actor picks the next action from
        `next_obs`, the target critics value it on `target_next_obs` (a pixel agent's target-encoder features;
        default `next_obs`).

        Returns (values [B, M], probabilities [B, M] or None): a scalar target [B, 1] for scalar critics; for
        categorical critics the support shifted and scaled by the Bellman backup, with the target critic's
        probabilities, which `critic_loss` projects back onto the support.
        """
        cfg = self.cfg.critic
        reward = reward * self.reward_scale()
        target_obs = next_obs if target_next_obs is None else target_next_obs
        with self._autocast():
            next_action, next_log_prob = self.actor(next_obs)
            target_out = self.critic_target.logits(target_obs, next_action) if cfg.num_atoms > 1 else None
            target_q_all = (
                self.critic_target.values(target_out) if target_out is not None
                else self.critic_target(target_obs, next_action)
            ).float()  # [E, B]
        entropy_bonus = -self.log_alpha.exp() * next_log_prob.float() if cfg.backup_entropy else 0.0
        subset = random_subset(target_q_all.shape[0], cfg.num_target, target_q_all.device)
        if target_out is None:
            q_sub = target_q_all[subset]
            next_v = q_sub.min(dim=0).values if cfg.target_reduce == "min" else q_sub.mean(dim=0)
            return (reward + discount * (next_v + entropy_bonus)).unsqueeze(-1), None
        probs = target_out.float().softmax(-1)[subset]  # [k, B, K]
        if cfg.target_reduce == "min":  # the distribution of the member with the lowest expected value
            lowest = target_q_all[subset].argmin(dim=0)  # [B]
            next_probs = probs.gather(0, lowest.view(1, -1, 1).expand(1, *probs.shape[1:])).squeeze(0)
        else:
            next_probs = probs.mean(dim=0)
        atoms = reward.unsqueeze(-1) + discount.unsqueeze(-1) * (self.critic.support + torch.as_tensor(
            entropy_bonus, device=reward.device).reshape(-1, 1))
        return atoms, next_probs

    def critic_loss(
        self, obs: Tensor, action: Tensor, target: Tensor, target_probs: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Loss of every critic against a target from `td_target` (or a scalar target [B, 1] of any origin):
        MSE for scalar critics, cross-entropy against the projected target for categorical ones. Summed over
        critics, averaged over the batch. Returns (loss, Q [E, B])."""
        with self._autocast():
            out = self.critic.logits(obs, action) if self.cfg.critic.num_atoms > 1 else self.critic(obs, action)
        if self.cfg.critic.num_atoms == 1:
            q = out.float()
            return F.mse_loss(q, target[:, 0].unsqueeze(0).expand_as(q), reduction="none").mean(dim=1).sum(), q
        target_dist = categorical_projection(target, target_probs, self.critic.support)
        log_probs = out.float().log_softmax(-1)  # [E, B, K]
        loss = -(target_dist.unsqueeze(0) * log_probs).sum(-1).mean(dim=1).sum()
        return loss, (log_probs.exp() * self.critic.support).sum(-1)

    def _critic_loss(self, obs: Tensor, action: Tensor, reward: Tensor, discount: Tensor, next_obs: Tensor,
                     target_next_obs: Tensor | None = None):
        target, target_probs = self.td_target(reward, discount, next_obs, target_next_obs)
        critic_loss, q = self.critic_loss(obs, action, target, target_probs)
        return critic_loss, q.detach().mean()

    def _actor_loss(self, obs: Tensor, alpha: Tensor, bc_action: Tensor | None = None):
        with self._autocast():
            action, log_prob = self.actor(obs)
            q_all = self.critic(obs, action).float()
        # the actor follows the ensemble mean (RLPD) or its minimum (clipped double Q)
        q = q_all.mean(dim=0) if self.cfg.critic.actor_q == "mean" else q_all.min(dim=0).values
        log_prob = log_prob.float()
        loss = (alpha * log_prob - q).mean()
        if bc_action is not None:  # the first rows are prior data; scaled by |Q| so the weight does not depend on
            with self._autocast():  # the reward scale (TD3+BC)
                mode = self.actor(obs[: bc_action.shape[0]], deterministic=True)[0].float()
            bc = q.abs().mean().detach() * (mode - bc_action).pow(2).sum(-1).mean()
            loss = loss + self.cfg.optimiser.bc_weight * bc
        return loss, log_prob.detach()

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.optimiser.bf16)

    def batch_features(self, b: Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        """(obs, next_obs, target_next_obs) as a critic update reads them: a state agent's states (and None); a pixel
        agent's obs through the encoder with gradients (the critic loss trains it), next_obs through the encoder and
        the target encoder without, both reading one random shift of the next frames (and a frozen backbone's
        features of them, computed once). Offline learners (Cal-QL, IQL) read the same."""
        if self.encoder is None:
            return b.obs["state"], b.next_obs["state"], None
        obs = self.features(b.obs, augment=True)
        with torch.no_grad():
            next_obs = self.encoder.shared_inputs({k: v.to(self.device) for k, v in b.next_obs.items()})
            return obs, self.features(next_obs), self.features(next_obs, target=True)

    def _update_critic(self, b: Batch) -> dict[str, Tensor]:
        obs, next_obs, target_next_obs = self.batch_features(b)
        critic_loss, q_mean = self._critic_loss_fn(obs, b.action, b.reward, b.discount, next_obs, target_next_obs)
        if self.encoder is not None:  # the actor's update reads these, detached (`update`)
            self._actor_features = obs.detach()
        self.step_critic(critic_loss)
        return {"critic_loss": critic_loss.detach(), "q_mean": q_mean}

    def step_critic(self, critic_loss: Tensor) -> None:
        """One optimiser step of the critics on `critic_loss`, then the Polyak update of the targets."""
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        if self._hyper:
            project_(self.critic)
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, self.cfg.critic.tau)

    def step_actor(self, actor_loss: Tensor) -> None:
        """One optimiser step of the actor on `actor_loss` (weights re-projected for hyperspherical nets)."""
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        if self._hyper:
            project_(self.actor)

    def update_actor_and_temperature(self, obs: Tensor) -> dict[str, Tensor]:
        """One actor step against the ensemble and one temperature step (also used by offline learners)."""
        return self._update_actor_and_temperature(obs)

    def _update_actor_and_temperature(self, obs: Tensor, bc_action: Tensor | None = None) -> dict[str, Tensor]:
        alpha = self.log_alpha.exp().detach()
        # The critic is not trained here: freezing it skips its weight gradients.
        self.critic.requires_grad_(False)
        actor_loss, log_prob = self._actor_loss_fn(obs, alpha, bc_action)
        self.step_actor(actor_loss)
        self.critic.requires_grad_(True)

        entropy = -log_prob.mean()
        alpha_loss = self.log_alpha.exp() * (entropy - self.target_entropy)
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        return {
            "actor_loss": actor_loss.detach(),
            "temperature": alpha,
            "temperature_loss": alpha_loss.detach(),
            "entropy": entropy,
        }

    def set_lr_progress(self, fraction: float) -> None:
        """Learning rates at `fraction` (0..1, clipped) of the run: each falls linearly from its config value to
        `lr_end_fraction` of it. Why: late in a run the same step size keeps moving a policy that has found its
        gait, and SimbaV2 decays its rates for that reason. A no-op at `lr_end_fraction=1`; plain floats, so it
        costs no device sync. The caller knows the run's length (`OnlineSAC.advance`); a resumed run calls it
        again before its first update, so the checkpoint's rates never linger."""
        cfg = self.cfg.optimiser
        if cfg.lr_end_fraction == 1.0:
            return
        scale = 1.0 - (1.0 - cfg.lr_end_fraction) * min(max(fraction, 0.0), 1.0)
        for opt, lr in ((self.actor_opt, cfg.actor_lr), (self.critic_opt, cfg.critic_lr),
                        (self.alpha_opt, cfg.temperature_lr)):
            for group in opt.param_groups:
                group["lr"] = lr * scale

    # -- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {
            "actor": self.actor.state_dict(),  # includes the observation statistics (obs_norm)
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
        }
        if self.return_scale is not None:
            state["return_scale"] = self.return_scale.state_dict()
        if self.encoder is not None:
            state["encoder"] = self.encoder.state_dict()
            state["encoder_target"] = self.encoder_target.state_dict()
            if self.obs_norm is not None:  # not inside the actor for a pixel agent: saved on its own
                state["obs_norm"] = self.obs_norm.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        # A loaded optimiser state brings the learning rates it was saved with; this agent's config decides them
        # (fine-tuning from offline.init with agent.optimiser.actor_lr=1e-4 otherwise went on at the pretraining's 3e-4).
        cfg = self.cfg.optimiser
        for opt, lr in ((self.actor_opt, cfg.actor_lr), (self.critic_opt, cfg.critic_lr),
                        (self.alpha_opt, cfg.temperature_lr)):
            for group in opt.param_groups:
                group["lr"] = lr
        for group in self.critic_opt.param_groups:
            group["weight_decay"] = cfg.critic_weight_decay
        if self.return_scale is not None:
            if "return_scale" not in state:
                raise KeyError("return_scale (the checkpoint was written without agent.critic.reward_scale)")
            self.return_scale.load_state_dict(state["return_scale"])
        if self.encoder is not None:
            if "encoder" not in state:
                raise KeyError("encoder (the checkpoint is a state-only agent's; this one learns from cameras)")
            self.encoder.load_state_dict(state["encoder"])
            self.encoder_target.load_state_dict(state["encoder_target"])
            if self.obs_norm is not None:
                self.obs_norm.load_state_dict(state["obs_norm"])
