"""``robot_rl.envs.make`` entry points for the sim backends: ``mjx:<task>`` and ``warp:<task>`` (and, through
``robot_rl.envs.mujoco_backend``, ``mujoco:<task>`` for the tasks other than gymnasium's)."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import torch

from ..core import EnvOptions
from . import make_batched as _make_batched
from . import make_task
from .env import SimEnv


@dataclass(frozen=True)
class SimBackend:
    """The ``envs`` backend interface for one physics engine, e.g. ``mjx`` for ``mjx:`` specs."""

    prefix: str
    physics: str

    def make_batched(
        self,
        spec: str,
        name: str,
        num_envs: int,
        device: str | torch.device,
        seed: int | None,
        options: EnvOptions,
    ) -> SimEnv:
        """A ``SimEnv`` for ``spec`` on this backend's physics."""
        return _make_batched(spec, name, num_envs, device, seed, options, self.physics)

    def make_env(self, name: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
        """Sim-backend tasks are batched only; say what to use instead of a single gymnasium env."""
        make_task(name, prefix=self.prefix)  # unknown names get the usual error first
        raise ValueError(
            f"{self.prefix + name!r} has no single-env gymnasium form; use "
            f"envs.make({self.prefix + name!r}, num_envs=1), or the gymnasium env of the same task where one "
            "exists (gym:Hopper-v5, dmc:cartpole-swingup, arm:reach)"
        )


mjx = SimBackend("mjx:", "mjx")
warp = SimBackend("warp:", "warp")
cpu = SimBackend("mujoco:", "cpu")
