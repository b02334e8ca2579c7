"""Executing action chunks on a batch of environments, one decision per executed chunk.

DSRL, ReinFlow and DPPO choose a whole action chunk at once (a noise vector for DSRL, a denoising chain for
ReinFlow and DPPO); the env then plays its first `execute` actions. From the learner's side one decision is
one "macro" transition: the observation it decided on, what it chose, the discounted reward of the executed
actions, and where it ended up.

With N envs these decisions cannot be made in lockstep: an episode that ends in the middle of a chunk must
start its next episode with a fresh decision on that episode's first observation, while the other envs are
still playing their chunks, and a batched simulator cannot pause one env. So every env has its own queue,
exactly like `robot_rl.policies.chunking.ActionChunker`, and `ChunkRunner` tells the learner which envs need a decision
before each executed step (`need`). Deciding only for those envs is what makes "denoise once per executed
chunk" true, and counting executed actions (`env_steps`), not decisions, is what makes sample costs
comparable with per-step methods.

A chunk's macro transition is complete when its `execute` actions are played or its episode ends: reward is
sum_j gamma^j r_j over the k executed actions, the bootstrap discount is gamma^k (0 after termination), and
`next_obs` is the true next observation (`final_obs` when the episode ended, so time limits bootstrap).

What the learner decides on is `features(obs)`, by default the `state` group; DSRL on a camera policy passes the
base's own `ChunkPolicy.features` (its frozen conditioning), so decisions and stored transitions hold features
rather than frames. Features are computed only for the envs whose chunk completed at a step — of the final
observation (the transition's `next_obs`) and of the new one (the next decision's) —, so a camera base's encoder
runs twice per decision rather than on every executed step. `state` rows of envs still playing a chunk are stale
until their chunk completes; nothing reads them before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from robot_rl import envs


def finished_episodes(done: Tensor, info: dict) -> dict[str, Tensor]:
    """`episode_return` (and `success`) of the episodes that ended at a step, one entry each: what the
    fine-tuning loop averages into `train_return_mean` and `train_success_rate`."""
    out = {"episode_return": info["episode_return"][done]}
    if "success" in info:
        out["success"] = info["success"][done].float()
    return out


@dataclass
class MacroStep:
    """The chunks completed at one executed step, one row per env that completed one (M rows)."""

    env_ids: Tensor  # [M] long
    obs: Tensor  # [M, F] features of the observation the decision was made on
    reward: Tensor  # [M] sum_j gamma^j r_j over the executed actions
    discount: Tensor  # [M] gamma^k, or 0 when the episode terminated
    next_obs: Tensor  # [M, F] features of the true next observation (the final one when the episode ended)
    terminated: Tensor  # [M] bool
    truncated: Tensor  # [M] bool
    length: Tensor  # [M] long, executed actions k (1..execute)
    payload: dict[str, Tensor]  # the rows the learner stored with its decision (noise, chain, log-probs...)


@dataclass
class StepResult:
    """One executed step: the completed chunks (None if none) and the episodes that ended."""

    macro: MacroStep | None
    done: Tensor  # [N] bool, episodes that ended at this step
    episode_return: Tensor  # [N] undiscounted return of the episodes that ended (where done)
    success: Tensor | None  # [N] bool where the task reports success, else None
    finished: dict[str, Tensor]  # `finished_episodes` of this step: one entry per episode that ended


class ChunkRunner:
    """Per-env chunk queues over a `BatchedEnv` with a `state` observation group (see the module docstring).

    `features`: observation dict -> [N, F] float, what decisions are made on (default: the state).

    Use::

        state = runner.reset(seed)
        while ...:
            ids = runner.need_ids()
            if ids.numel():
                chunk, payload = decide(runner.state[ids])   # [M, >= execute, A], dict of [M, ...] tensors
                runner.plan(ids, chunk, payload)
            result = runner.step()                            # one action per env
    """

    def __init__(
        self, env: envs.BatchedEnv, execute: int, gamma: float,
        features: Callable[[dict[str, Tensor]], Tensor] | None = None,
    ) -> None:
        if "state" not in env.observation_spec:
            raise ValueError("chunked fine-tuning needs a 'state' observation group")
        if execute < 1 or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"need execute >= 1 and gamma in [0, 1], got {execute}, {gamma}")
        self.env, self.execute, self.gamma = env, int(execute), float(gamma)
        self.features = features or (lambda obs: obs["state"].float())
        n, dev = env.num_envs, env.device
        self.num_envs = n
        self.queue = torch.zeros(n, self.execute, env.action_dim, device=dev)
        self.pos = torch.full((n,), self.execute, dtype=torch.long, device=dev)  # == execute: needs a chunk
        self.start_obs = torch.zeros(n, *env.observation_spec["state"][0], device=dev)
        self.reward = torch.zeros(n, device=dev)
        self.payload: dict[str, Tensor] = {}
        self.state = self.start_obs.clone()
        self.env_steps = 0  # executed actions, summed over envs
        self.decisions = 0  # chunks planned

    def reset(self, seed: int | None = None) -> Tensor:
        """Reset every env and empty every queue; returns the features batch [N, F]."""
        self.state = self.features(self.env.reset(seed=seed)).clone()  # rows are written in place by step()
        if self.start_obs.shape != self.state.shape:
            self.start_obs = torch.zeros_like(self.state)
        self.pos.fill_(self.execute)
        self.reward.zero_()
        return self.state

    @property
    def need(self) -> Tensor:
        """[N] bool: envs whose queue is empty and that must be given a chunk before `step`."""
        return self.pos >= self.execute

    def need_ids(self) -> Tensor:
        return self.need.nonzero().squeeze(1)

    def plan(self, env_ids: Tensor, chunk: Tensor, payload: dict[str, Tensor] | None = None) -> None:
        """Give envs `env_ids` [M] new chunks [M, >= execute, A]; `payload` rows come back with the macro step."""
        m = env_ids.numel()
        if chunk.dim() != 3 or chunk.shape[0] != m or chunk.shape[1] < self.execute:
            raise ValueError(f"chunk must be [{m}, >= {self.execute}, A], got {tuple(chunk.shape)}")
        if not bool(self.need[env_ids].all()):
            raise ValueError("plan() for an env that is still playing its chunk")
        self.queue[env_ids] = chunk[:, : self.execute].to(self.queue)
        self.pos[env_ids] = 0
        self.start_obs[env_ids] = self.state[env_ids]
        self.reward[env_ids] = 0.0
        for k, v in (payload or {}).items():
            if k not in self.payload:
                self.payload[k] = torch.zeros(self.num_envs, *v.shape[1:], dtype=v.dtype, device=v.device)
            self.payload[k][env_ids] = v
        self.decisions += m

    def step(self) -> StepResult:
        """Play one action in every env; complete the chunks that are used up or whose episode ended."""
        if bool(self.need.any()):
            raise RuntimeError("some envs have no chunk: plan() for need_ids() before step()")
        n = self.num_envs
        rows = torch.arange(n, device=self.pos.device)
        obs, reward, terminated, truncated, info = self.env.step(self.queue[rows, self.pos])
        self.reward += self.gamma ** self.pos.float() * reward
        self.pos += 1
        self.env_steps += n
        done = terminated | truncated
        complete = done | (self.pos >= self.execute)
        macro = None
        if bool(complete.any()):
            ids = complete.nonzero().squeeze(1)
            final = {k: v[ids] for k, v in info["final_obs"].items()}
            length = self.pos[ids].clone()
            discount = torch.where(terminated[ids], 0.0, self.gamma ** length.float())
            macro = MacroStep(
                env_ids=ids,
                obs=self.start_obs[ids].clone(),
                reward=self.reward[ids].clone(),
                discount=discount,
                next_obs=self.features(final),
                terminated=terminated[ids],
                truncated=truncated[ids],
                length=length,
                payload={k: v[ids].clone() for k, v in self.payload.items()},
            )
            self.pos[ids] = self.execute
            self.state[ids] = self.features({k: v[ids] for k, v in obs.items()}).to(self.state)
        success = info["success"].bool() if "success" in info else None
        return StepResult(macro, done, info["episode_return"], success, finished_episodes(done, info))
