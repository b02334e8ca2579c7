"""dm_control's cartpole swing-up, in torch: the suite's own MJCF, reset, observation and smooth reward.

Matches ``dmc:cartpole-swingup`` step for step from the same state (``tests/envs/sim`` checks it): the
observation is ``[cart x, cos(pole), sin(pole), cart velocity, pole angular velocity]``, the reward the
product of "upright", "centred", "small control" and "small angular velocity" terms built from dm_control's
``tolerance`` with its default Gaussian sigmoid, the time limit 1000 control steps of 10 ms.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import mujoco
import torch

from ..rng import ResetRNG
from ..task import SimTask


def _suite_dir() -> Path:
    # Found without importing dm_control (slow to import); its XML includes resolve relative to this folder.
    spec = importlib.util.find_spec("dm_control")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("cartpole-swingup uses dm_control's MJCF: pip install dm-control")
    return Path(next(iter(spec.submodule_search_locations))) / "suite"


def _gaussian_tolerance(x: torch.Tensor, margin: float, value_at_margin: float = 0.1) -> torch.Tensor:
    """dm_control ``rewards.tolerance(x, bounds=(0, 0), margin, sigmoid="gaussian")``."""
    scale = math.sqrt(-2.0 * math.log(value_at_margin))
    d = x.abs() / margin
    return torch.where(x == 0, 1.0, torch.exp(-0.5 * (d * scale) ** 2))


class CartpoleSwingup(SimTask):
    """See the module docstring."""

    name = "cartpole-swingup"
    frame_skip = 1
    time_limit = 1000
    obs_dim = 5
    can_terminate = False  # as dmc:cartpole-swingup: an episode ends only at the time limit

    def build_model(self) -> mujoco.MjModel:
        model = mujoco.MjModel.from_xml_path(str(_suite_dir() / "cartpole.xml"))
        # The suite enables energy bookkeeping, which MJX rejects; it feeds nothing in the task or dynamics.
        model.opt.enableflags &= ~int(mujoco.mjtEnableBit.mjENBL_ENERGY)
        return model

    def initial_state(self, rng: ResetRNG) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, dtype, device = self.num_envs, self.dtype, self.device
        # dm_control: slider 0.01 N(0,1), hinge pi + 0.01 N(0,1), both velocities 0.01 N(0,1).
        qpos = 0.01 * rng.normal((2,))
        qpos[:, 1] += math.pi
        qvel = 0.01 * rng.normal((2,))
        ctrl = torch.zeros(n, 1, dtype=dtype, device=device)
        return qpos.to(dtype), qvel.to(dtype), ctrl

    def control(self, action: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        return action  # ctrlrange is [-1, 1]

    def evaluate(
        self, qpos_before: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        upright = (torch.cos(qpos[:, 1]) + 1) / 2
        centered = (1 + _gaussian_tolerance(qpos[:, 0], margin=2.0)) / 2
        u = ctrl[:, 0]
        small_control = (4 + torch.where(u.abs() < 1, 1 - u**2, 0.0)) / 5  # quadratic sigmoid, margin 1
        small_velocity = (1 + _gaussian_tolerance(qvel[:, 1], margin=5.0)) / 2
        reward = upright * small_control * small_velocity * centered
        return reward, torch.zeros_like(reward, dtype=torch.bool), None

    def observe(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        angle = qpos[:, 1]
        return torch.stack(
            [qpos[:, 0], torch.cos(angle), torch.sin(angle), qvel[:, 0], qvel[:, 1]], dim=1
        ).to(torch.float32)
