"""Residual RL on a frozen behaviour-cloning policy (ResFiT mechanics, Ankile et al. 2025).

A frozen base policy (any `ChunkPolicy`, usually action-chunked) proposes an action a_base at every step; a
SAC actor that sees the state (or the base's features, below) and a_base outputs a correction r in [-1, 1]^A,
and the env executes

    a = clip(a_base + scale * r, -1, 1),        scale ~ 0.1-0.2 of the normalised action range.

What makes this work, each a line below:
- the mean half of the actor's last layer starts at zero, so the deterministic correction is exactly 0 and
  training starts at the base policy (`SAC.zero_actor_mean`); exploration noise is scale * tanh(std * eps);
- the first `learning_starts` executed steps only collect (the base with that small noise), then
  `critic_warmup_updates` critic-only updates fit Q to the base policy before the actor may move;
- n-step returns (`agent.critic.n_step`, 3 in the presets) carry the sparse success reward back faster;
- the critic and actor see (features, a_base), where the features are `base.features(obs)`: the state for a
  state base, and for a base that reads cameras its own frozen conditioning (normalised state fused with its
  camera features), so no second image encoder is trained and the replay holds no frames. `next_obs` holds the
  base action at the next observation; where an episode ended that is the base's first action from the final
  observation, computed for those envs only;
- the base's action queues are reset at every episode boundary, online and while the demo buffer is
  filled (`demo_replay`), so a new episode never plays the tail of a chunk planned in the previous one.

Demonstrations (optional) fill a prior buffer sampled 50/50 with online data (RLPD). Each demo transition
stores the executed demo action as the residual (a_demo - a_base) / scale, clipped to [-1, 1], with the
base's prediction on the demo's own observations as a_base. Camera demos go through the base's features first
(`demo_features`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from robot_rl import envs
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.fields import help_field as _help
from robot_rl.finetune.chunks import finished_episodes
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.composed import residual_action
from robot_rl.prior_data import OfflineData
from robot_rl.replay import PRIOR_FRACTION_RANGE, ReplayBuffer, prior_fraction_ok
from robot_rl.runner import MethodDefaults
from robot_rl.transitions import Transitions


@dataclass
class ResidualConfig:
    scale: float = _help(0.1, "bound of the correction: executed = clip(base + scale * residual), residual in [-1, 1]")
    learning_starts: int = _help(1000, "executed env steps of the base policy (plus exploration noise) before updates")
    critic_warmup_updates: int = _help(2000, "critic-only updates after learning_starts before the actor moves")
    base_deterministic: bool = _help(True, "sample the base with zero noise (its mean path), so a_base is a function")
    prior_fraction: float = _help(0.5, "fraction of each batch drawn from the demos when data= is set (0: none)")

    def validate(self) -> None:
        checks = [
            (0.0 < self.scale <= 2.0, "residual.scale must be in (0, 2]"),
            (self.learning_starts >= 0, "residual.learning_starts must be >= 0"),
            (self.critic_warmup_updates >= 0, "residual.critic_warmup_updates must be >= 0"),
            (prior_fraction_ok(self.prior_fraction), f"residual.prior_fraction must be in {PRIOR_FRACTION_RANGE}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@torch.no_grad()
def first_actions(base: ChunkPolicy, features: Tensor, deterministic: bool) -> Tensor:
    """The base's first action of a fresh chunk from `base.features` [M, F] (its action at an episode's end)."""
    return base.chunk_from_features(features, deterministic=deterministic)[:, 0]


@torch.no_grad()
def demo_features(base: ChunkPolicy, data: OfflineData, batch: int = 256) -> OfflineData:
    """`data` with observations replaced by `base.features` (and no frames): itself for a state base. Camera data
    keeps the steps whose next frame it has (`OfflineData.frame_steps`: a truncated episode's last step is dropped
    and the step before it ends the episode); a terminal step's next features are its own (never bootstrapped)."""
    if not base.cameras:
        return data
    t = data.transitions
    missing = sorted(set(base.cameras) - set(t.cameras))
    if missing:
        raise ValueError(f"the demos have no {missing[0]} frames, which the base policy reads; record them in the "
                         "base's -pixels task (and load them with its cameras)")
    kept, last, terminated, truncated = data.frame_steps()
    nxt = torch.where(last[kept], kept, kept + 1)

    def features(state: Tensor, frame_rows: Tensor) -> Tensor:  # state [K, O] with the frames of frame_rows [K]
        return torch.cat([
            base.features({"state": state[i : i + batch],
                           **{g: t.obs[g][frame_rows[i : i + batch]] for g in base.cameras}})
            for i in range(0, frame_rows.numel(), batch)
        ])

    dev, rows = t.action.device, kept.to(t.action.device)
    return OfflineData(
        Transitions({"state": features(t.obs["state"].cpu()[kept], kept).to(dev)}, t.action[rows], t.reward[rows],
                    {"state": features(t.next_obs["state"].cpu()[kept], nxt).to(dev)}, terminated[kept].to(dev),
                    truncated[kept].to(dev)),
        data.mc_return[rows], data.num_episodes, data.success_rate,
        None if data.episode_index is None else data.episode_index[kept],
    )


@torch.no_grad()
def demo_replay(
    base: ChunkPolicy, data: OfflineData, scale: float, deterministic: bool, capacity: int, sac: SACConfig, device
) -> ReplayBuffer:
    """A prior buffer of the demos `data` (`demo_features` of an `OfflineData`) in residual form (module docstring).

    All episodes are replayed as one batch (shorter ones padded with their last frame, rows past their end
    dropped), with the base's queues reset at the start, so each episode's base actions are exactly those the
    base would have played from that episode's first observation.
    """
    t = data.transitions
    starts = torch.ones_like(t.terminated)
    starts[1:] = t.terminated[:-1] | t.truncated[:-1]
    first = starts.nonzero().squeeze(1)
    ends = torch.cat([first[1:], torch.tensor([t.action.shape[0]], device=first.device)])
    lengths = ends - first
    steps = torch.arange(int(lengths.max()), device=first.device)
    rows = first[None, :] + torch.minimum(steps[:, None], lengths[None, :] - 1)  # [T, E]
    base.reset()
    state = t.obs["state"]
    base_action = torch.stack([base.act_from_features(state[step], deterministic) for step in rows])
    base.reset()
    valid = steps[:, None] < lengths[None, :]
    order = rows.T[valid.T]  # dataset order: episode by episode
    base_flat = base_action.transpose(0, 1)[valid.T].to(t.action)
    last = ends - 1
    next_base = torch.roll(base_flat, -1, dims=0)
    next_base[last] = first_actions(base, t.next_obs["state"][last], deterministic).to(next_base)
    obs, next_obs = t.obs["state"][order], t.next_obs["state"][order]
    residual = ((t.action[order] - base_flat) / scale).clamp(-1.0, 1.0)
    dim = obs.shape[1] + base_flat.shape[1]
    buffer = ReplayBuffer(
        max(capacity, len(order)), 1, {"state": ((dim,), torch.float32)}, base_flat.shape[1], device,
        sac.critic.gamma, sac.critic.n_step,
    )
    buffer.extend(
        {"state": torch.cat([obs, base_flat], 1)}, residual, t.reward[order],
        {"state": torch.cat([next_obs, next_base], 1)}, t.terminated[order], t.truncated[order],
    )
    return buffer


class ResidualRL(MethodDefaults):
    """SAC on a residual over a frozen base; `advance()` is one batched env step plus its updates."""

    def __init__(
        self,
        cfg: ResidualConfig,
        sac: SACConfig,
        base: ChunkPolicy,
        env: envs.BatchedEnv,
        capacity: int,
        device: str | torch.device = "cpu",
        demos=None,
    ) -> None:
        cfg.validate()
        self.cfg, self.sac_cfg, self.env = cfg, sac, env
        self.base = base.to(device).eval().requires_grad_(False)
        self.eval_base = copy.deepcopy(self.base)  # its own queues: evaluation must not disturb training episodes
        self.action_dim = env.action_dim
        dim = base.features_dim + self.action_dim
        self.agent = SAC(dim, self.action_dim, sac, device)
        self.agent.zero_actor_mean()
        spec = {"state": ((dim,), torch.float32)}
        self.replay = ReplayBuffer(capacity, env.num_envs, spec, self.action_dim, device, sac.critic.gamma,
                                   sac.critic.n_step, capacity_key="replay_capacity")
        self.prior = (
            None if demos is None
            else demo_replay(self.base, demo_features(self.base, demos), cfg.scale, cfg.base_deterministic, capacity,
                             sac, device)
        )
        self.env_steps = 0
        self.updates = 0
        self._features: Tensor | None = None
        self._base_action: Tensor | None = None

    def start(self, seed: int) -> None:
        """Start fresh episodes (also after a resume: the simulator state is not checkpointed)."""
        self.base.reset()
        self._features = self.base.features(self.env.reset(seed=seed))
        self._base_action = self.base.act_from_features(self._features, self.cfg.base_deterministic)

    def executed(self, base_action: Tensor, residual: Tensor) -> Tensor:
        return residual_action(base_action, residual, self.cfg.scale)

    def advance(self) -> dict[str, Tensor]:
        cfg, env = self.cfg, self.env
        if self._features is None:
            raise RuntimeError("call start(seed) first")
        obs = {"state": torch.cat([self._features, self._base_action], 1)}
        residual = self.agent.act(obs).to(env.device)
        next_obs, reward, terminated, truncated, info = env.step(self.executed(self._base_action, residual))
        done = terminated | truncated
        self.agent.observe(obs, reward, done)
        self.base.reset(done)
        features = self.base.features(next_obs)
        base_action = self.base.act_from_features(features, cfg.base_deterministic)
        final_features, final_base = features, base_action
        if bool(done.any()):
            ids = done.nonzero().squeeze(1)
            final_features, final_base = features.clone(), base_action.clone()
            final_features[ids] = self.base.features({k: v[ids] for k, v in info["final_obs"].items()})
            final_base[ids] = first_actions(self.base, final_features[ids], cfg.base_deterministic)
        self.replay.add(
            obs, residual, reward, {"state": torch.cat([final_features, final_base], 1)}, terminated, truncated
        )
        self._features, self._base_action = features, base_action
        self.env_steps += env.num_envs

        metrics: dict[str, Tensor] = {}
        if self.env_steps >= cfg.learning_starts and len(self.replay) >= self.sac_cfg.optimiser.batch_size:
            for _ in range(env.num_envs):
                metrics = self.agent.learn(self.replay, self.prior, self.cfg.prior_fraction,
                                           actor=self.updates >= cfg.critic_warmup_updates)
                self.updates += 1
        return {**metrics, **finished_episodes(done, info)}

    def eval_policy(self) -> tuple[Callable[[dict[str, Tensor]], Tensor], Callable[[Tensor], None]]:
        """(act, on_done) for `robot_rl.evaluation.evaluate`: base plus deterministic residual."""
        self.eval_base.reset()

        def act(obs: dict[str, Tensor]) -> Tensor:
            features = self.eval_base.features(obs)
            base_action = self.eval_base.act_from_features(features, self.cfg.base_deterministic)
            residual = self.agent.act({"state": torch.cat([features, base_action], 1)}, deterministic=True)
            return self.executed(base_action, residual.to(base_action))

        return act, self.eval_base.reset

    def state_dict(self) -> dict:
        return {"agent": self.agent.state_dict(), "replay": self.replay.state_dict(),
                "env_steps": self.env_steps, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_state_dict(state["agent"])
        self.replay.load_state_dict(state["replay"])
        self.env_steps, self.updates = state["env_steps"], state["updates"]
