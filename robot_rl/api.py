"""The Python API: train, load and act, in the shape Stable-Baselines3 users expect.

    from robot_rl import api
    agent = api.train("gym:Pendulum-v1", steps=5_000, run_dir="runs/pendulum")  # robot-rl train, from Python
    agent = api.Agent.load("runs/pendulum")        # a run, a checkpoint (.pt) or a policy directory
    env = gymnasium.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    action = agent.predict(obs)                     # in the env's own units (Pendulum: torque in [-2, 2])

Actions come back in the units of the environment the policy was trained on: robot_rl learns in [-1, 1]
(`robot_rl.envs.wrappers.NormalizedAction`), and `predict` maps back with the bounds of the run's env spec, or
of the `action_space` given to `load` (needed for a policy directory, which records no env). Observations go in
as the env gives them: a flat vector, a batch of them, or a dict with a `state` entry; a policy that learned from
cameras (`agent.cameras`: group -> [H, W, C]) takes the dict with `state` and its camera groups' uint8 images
(`arm:<task>-pixels`: `pixels/front`, `pixels/wrist`). Observation normalisation travels inside the checkpoint or
policy directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

__all__ = ["Agent", "train"]


class Agent:
    """A trained policy outside training: `predict(obs) -> action` in the environment's own units."""

    def __init__(
        self,
        act: Callable[[dict[str, torch.Tensor], bool], torch.Tensor],
        obs_dim: int,
        action_dim: int,
        action_space: gym.spaces.Box | None = None,
        spec: str | None = None,
        reset: Callable[[], None] | None = None,
        cameras: dict[str, list[int]] | None = None,
        delay: dict[str, Any] | None = None,
    ) -> None:
        self._act, self._reset = act, reset
        # The observation-to-action delay it was trained under (`robot_rl.envs.delay.DelayedEnv.metadata`), or None;
        # a delay-aware policy reads the actions in flight after the state (`robot_rl.envs.delay.InFlightActions`).
        self.delay = delay
        self.obs_dim, self.action_dim, self.spec = obs_dim, action_dim, spec
        self.cameras = dict(cameras or {})  # camera group -> [H, W, C] the policy reads besides `state`
        self.action_space = action_space
        if action_space is not None:
            if action_space.shape != (action_dim,):
                raise ValueError(f"action_space {action_space} does not fit the policy's {action_dim} actions")
            self._low = np.asarray(action_space.low, np.float64)
            self._high = np.asarray(action_space.high, np.float64)

    @classmethod
    def load(cls, path: str | Path, action_space: gym.spaces.Box | None = None, device: str = "cpu") -> Agent:
        """A run directory (its `checkpoints/best.pt`, else `latest.pt`), a checkpoint file (`robot-rl train` /
        `finetune` checkpoints, residual RL and DSRL included, `hil-train` checkpoints, a Ray learner's
        `learner.pt`), or a policy directory (`robot-rl bc`, ReinFlow, DPPO, `robot-rl export`). `action_space`: the
        env's, for actions in its units where the saved run names no env."""
        from robot_rl import checkpoint

        path = Path(path)
        for policy_dir in (path, path / "policy"):  # a policy directory, or a run directory holding one
            if (policy_dir / "config.json").is_file():
                return cls._from_policy_dir(policy_dir, action_space, device)
        if path.is_dir():
            ckpts = path / "checkpoints"
            path = ckpts / "best.pt" if (ckpts / "best.pt").is_file() else ckpts / "latest.pt"
        state = checkpoint.load(path)
        return cls._from_checkpoint(path, state, action_space, device)

    @classmethod
    def _from_checkpoint(cls, path: Path, state: dict, action_space: gym.spaces.Box | None, device: str) -> Agent:
        """The policy `robot-rl export` would write from this checkpoint: a SAC actor, or a residual/DSRL
        policy around its base, or a ReinFlow/DPPO chain's policy."""
        from robot_rl.export import policy_from_checkpoint

        policy, meta = policy_from_checkpoint(path, state, device)
        spec = meta.get("env_spec")
        if action_space is None and spec:
            action_space = _native_action_space(spec)
        return cls._from_policy(policy, action_space, device, spec, meta.get("delay"))

    @classmethod
    def _from_policy_dir(cls, path: Path, action_space: gym.spaces.Box | None, device: str) -> Agent:
        from robot_rl.policies.io import load_policy, read_metadata

        delay = read_metadata(path).get("delay")
        return cls._from_policy(load_policy(path, device=device), action_space, device, delay=delay)

    @classmethod
    def _from_policy(
        cls, policy: Any, action_space: gym.spaces.Box | None, device: str, spec: str | None = None,
        delay: dict[str, Any] | None = None,
    ) -> Agent:
        """An agent over any saved-policy kind (`robot_rl.policies.io.POLICY_CLASSES`)."""

        def act(obs: dict[str, torch.Tensor], deterministic: bool) -> torch.Tensor:
            return policy.act({k: v.to(device) for k, v in obs.items()}, deterministic=deterministic)

        return cls(act, policy.obs_dim, policy.action_dim, action_space, spec, reset=policy.reset,
                   cameras=getattr(policy, "cameras", None), delay=delay)

    @torch.no_grad()
    def predict(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Action(s) for one observation or a batch: float64 in the env's units where its bounds are known,
        else float32 in [-1, 1]. A camera policy takes a dict with `state` and each camera group (uint8 images,
        [H, W, C] for one observation, [N, H, W, C] for a batch)."""
        groups = obs if isinstance(obs, dict) else {"state": obs}
        x = torch.as_tensor(np.asarray(groups["state"]), dtype=torch.float32)
        single = x.dim() == 1
        if x.shape[-1] != self.obs_dim:
            if self.delay and self.delay.get("aware"):
                raise ValueError(f"observation of size {x.shape[-1]}; this policy takes {self.obs_dim}: it was trained "
                                 f"delay-aware ({delay_text(self.delay)}) and reads the actions in flight after the "
                                 "state (robot_rl.envs.delay.InFlightActions builds them)")
            raise ValueError(f"observation of size {x.shape[-1]}; this policy takes {self.obs_dim}")
        batch = {"state": x[None] if single else x}
        for group, shape in self.cameras.items():
            if group not in groups:
                raise ValueError(f"observation has no camera group {group!r}; this policy reads it as uint8 "
                                 f"{list(shape)} images besides 'state' (got {sorted(groups)})")
            image = torch.tensor(np.asarray(groups[group]))  # a copy: decoded frames may be read-only arrays
            batch[group] = image[None] if single else image
        action = self._act(batch, deterministic).cpu().numpy()
        if self.action_space is not None:
            action = self._low + (action.astype(np.float64) + 1.0) * 0.5 * (self._high - self._low)
        return action[0] if single else action

    def reset(self) -> None:
        """Start a new episode (clears a chunked policy's queued actions)."""
        if self._reset is not None:
            self._reset()


def delay_text(delay: dict[str, Any]) -> str:
    """A trained delay in words: `5 steps (250 ms)`, or `2-6 steps, drawn per episode`."""
    choices = sorted(int(v) for v in delay.get("choices") or [0])
    dt = delay.get("control_dt")
    if len(set(choices)) > 1:
        return f"{choices[0]}-{choices[-1]} steps, drawn per episode"
    return f"{choices[0]} steps" + (f" ({choices[0] * dt * 1000:.0f} ms)" if dt else "")


def train(env_spec: str, steps: int, run_dir: str | Path | None = None, **overrides: Any) -> Agent:
    """`robot-rl train env.spec=<env_spec> train.steps=<steps> [key=value ...]` from Python; returns the
    run's best agent. `overrides` are train's keys with `__` for dots: `agent__optimiser__utd=2`,
    `experiment="hopper"`."""
    from datetime import datetime

    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    keys = [f"{k.replace('__', '.')}={v}" for k, v in overrides.items()]
    cfg = compose_train_config([f"env.spec={env_spec}", f"train.steps={steps}", *keys])
    run = Path(run_dir) if run_dir is not None else Path(f"runs/{datetime.now():%Y-%m-%d_%H-%M-%S}_api")
    Trainer(cfg, run).run()
    return Agent.load(run)


def _native_action_space(spec: str) -> gym.spaces.Box | None:
    """The action space of `spec`'s env before robot_rl normalised it to [-1, 1] (None where there is none)."""
    from robot_rl import envs

    try:
        env = envs.make_single(spec)
    except Exception:  # batched-only backends (mjx:, warp:, isaaclab:): actions stay in [-1, 1]
        return None
    try:
        space = env.unwrapped.action_space
        return space if isinstance(space, gym.spaces.Box) else None
    finally:
        env.close()
