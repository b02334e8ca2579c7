"""gymnasium's v5 locomotion tasks (Hopper, Walker2d, HalfCheetah) in torch, for every physics backend.

The task constants are ``robot_rl.envs.locomotion_constants.TASKS`` (gymnasium's defaults, shared with the
native ``mujoco:`` stepper of ``robot_rl.envs.mujoco_backend`` and checked there against gymnasium itself), so
``mjx:Hopper-v5`` and ``warp:Hopper-v5`` are the same MDP as ``mujoco:Hopper-v5`` and ``gym:Hopper-v5``:
gymnasium's MJCF, reset noise, observation (qpos without x, then qvel clipped for Hopper and
Walker), forward reward, health bonus and termination.
"""

from __future__ import annotations

import mujoco
import torch

from ...locomotion_constants import ASSETS, TASKS
from ..rng import CounterRNG
from ..task import SimTask


class Locomotion(SimTask):
    """One gymnasium v5 locomotion task; ``name`` is its gymnasium id, e.g. ``"Hopper-v5"``."""

    time_limit = 1000

    def __init__(self, name: str) -> None:
        self.name = name
        self.spec = TASKS[name]
        self.frame_skip = self.spec.frame_skip

    def build_model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(str(ASSETS / self.spec.xml_file))

    def setup(self, model: mujoco.MjModel, num_envs: int, device: torch.device, dtype: torch.dtype) -> None:
        super().setup(model, num_envs, device, dtype)
        self.obs_dim = model.nq - 1 + model.nv
        self._dt = model.opt.timestep * self.frame_skip
        lo_hi = torch.as_tensor(model.actuator_ctrlrange, dtype=dtype, device=device)
        self._ctrl_low, self._ctrl_high = lo_hi[:, 0], lo_hi[:, 1]

    # obs_dim depends on the model; SimEnv reads it after setup.
    obs_dim = 0

    def initial_state(self, rng: CounterRNG) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.spec.reset_noise_scale
        nq, nv = self.qpos0.shape[0], self.qvel0.shape[0]
        qpos = self.qpos0 + rng.uniform((nq,), -s, s).to(self.dtype)
        if self.spec.qvel_reset_noise == "normal":
            qvel = self.qvel0 + s * rng.normal((nv,)).to(self.dtype)
        else:
            qvel = self.qvel0 + rng.uniform((nv,), -s, s).to(self.dtype)
        ctrl = torch.zeros(self.num_envs, self._ctrl_low.shape[0], dtype=self.dtype, device=self.device)
        return qpos, qvel, ctrl

    def control(self, action: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        center = (self._ctrl_high + self._ctrl_low) / 2
        half = (self._ctrl_high - self._ctrl_low) / 2
        return torch.minimum(torch.maximum(center + action * half, self._ctrl_low), self._ctrl_high)

    def evaluate(
        self, qpos_before: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        t = self.spec
        reward = t.forward_reward_weight * (qpos[:, 0] - qpos_before[:, 0]) / self._dt
        reward = reward - t.ctrl_cost_weight * (ctrl**2).sum(dim=1)
        if t.healthy_z_range is None:
            return reward, torch.zeros_like(reward, dtype=torch.bool), None
        healthy = self._is_healthy(qpos, qvel)
        reward = reward + healthy * t.healthy_reward
        terminated = ~healthy if t.terminate_when_unhealthy else torch.zeros_like(healthy)
        return reward, terminated, None

    def _is_healthy(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        t = self.spec
        assert t.healthy_z_range is not None and t.healthy_angle_range is not None
        z, angle = qpos[:, 1], qpos[:, 2]
        (z_lo, z_hi), (a_lo, a_hi) = t.healthy_z_range, t.healthy_angle_range
        healthy = (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)
        if t.healthy_state_range is not None:
            lo, hi = t.healthy_state_range
            healthy &= ((lo < qpos[:, 2:]) & (qpos[:, 2:] < hi)).all(dim=1)
            healthy &= ((lo < qvel) & (qvel < hi)).all(dim=1)
        return healthy

    def observe(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        clip = self.spec.obs_qvel_clip
        vel = qvel if clip is None else qvel.clamp(-clip, clip)
        return torch.cat([qpos[:, 1:], vel], dim=1).to(torch.float32)
