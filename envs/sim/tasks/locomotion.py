"""gymnasium's v5 locomotion tasks (Hopper, Walker2d, HalfCheetah) in torch, for every physics backend.

The one definition of these tasks: ``mujoco:<id>`` (CPU MuJoCo, the bit-exact twin of ``gym:<id>``, see
``robot_rl.envs.mujoco_backend``), ``mjx:<id>`` and ``warp:<id>`` all run it. The constants are gymnasium's
defaults (``robot_rl.envs.locomotion_constants.TASKS``); MJCF, reset noise, observation (qpos without x, then
qvel clipped for Hopper and Walker), forward reward, health bonus, control cost and termination are
gymnasium's, computed in gymnasium's order and dtypes, so that on CPU MuJoCo (float64) every number equals
gymnasium's bit for bit (``tests/envs/test_mujoco_backend.py``).
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from ...locomotion_constants import ASSETS, TASKS
from ..rng import ResetRNG
from ..task import SimTask


class Locomotion(SimTask):
    """One gymnasium v5 locomotion task; ``name`` is its gymnasium id, e.g. ``"Hopper-v5"``."""

    time_limit = 1000
    # obs_dim depends on the model; SimEnv reads it after setup.
    obs_dim = 0

    def __init__(self, name: str) -> None:
        self.name = name
        self.spec = TASKS[name]
        # HalfCheetah has no health check, so its episodes end only at the time limit (as gym:HalfCheetah-v5's).
        self.can_terminate = self.spec.healthy_z_range is not None and self.spec.terminate_when_unhealthy
        self.frame_skip = self.spec.frame_skip
        self._camera: mujoco.MjvCamera | None = None

    def build_model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(str(ASSETS / self.spec.xml_file))

    def setup(self, model: mujoco.MjModel, num_envs: int, device: torch.device, dtype: torch.dtype) -> None:
        super().setup(model, num_envs, device, dtype)
        self.obs_dim = model.nq - 1 + model.nv
        self._dt = model.opt.timestep * self.frame_skip
        self._extent = float(model.stat.extent)
        lo_hi = torch.as_tensor(model.actuator_ctrlrange, dtype=dtype, device=device)
        self._ctrl_low, self._ctrl_high = lo_hi[:, 0], lo_hi[:, 1]
        self._ctrl_center = (self._ctrl_high + self._ctrl_low) / 2
        self._ctrl_half = (self._ctrl_high - self._ctrl_low) / 2
        # The three tasks' ctrlrange is [-1, 1]: 0 + a * 1 is a exactly, the float32 action gymnasium gets.
        self._ctrl_is_action = bool(((lo_hi[:, 0] == -1) & (lo_hi[:, 1] == 1)).all())

    def initial_state(self, rng: ResetRNG) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # gymnasium's reset_model: qpos noise drawn first, then qvel noise, from the env's stream.
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
        if self._ctrl_is_action:  # actions are already clipped to [-1, 1]
            return action
        ctrl = self._ctrl_center + action * self._ctrl_half
        return torch.minimum(torch.maximum(ctrl, self._ctrl_low), self._ctrl_high)

    def evaluate(
        self, qpos_before: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        t = self.spec
        x_velocity = (qpos - qpos_before)[:, 0] / self._dt
        # gymnasium's weight is 1.0, and multiplying by 1.0 is exact: skipping it changes no bit.
        forward_reward = x_velocity if t.forward_reward_weight == 1.0 else t.forward_reward_weight * x_velocity
        ctrl_cost = _ctrl_cost(t.ctrl_cost_weight, ctrl)
        if t.healthy_z_range is None:
            return forward_reward - ctrl_cost, torch.zeros_like(x_velocity, dtype=torch.bool), None
        healthy = self._is_healthy(qpos, qvel)
        reward = (forward_reward + healthy * t.healthy_reward) - ctrl_cost
        terminated = ~healthy if t.terminate_when_unhealthy else torch.zeros_like(healthy)
        return reward, terminated, None

    def _is_healthy(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        t = self.spec
        assert t.healthy_z_range is not None and t.healthy_angle_range is not None
        z, angle = qpos[:, 1], qpos[:, 2]
        (z_lo, z_hi), (a_lo, a_hi) = t.healthy_z_range, t.healthy_angle_range
        healthy = (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)
        if t.healthy_state_range is not None:
            # state_vector()[2:] is qpos[2:] followed by qvel; strict bounds (NaN = unhealthy).
            lo, hi = t.healthy_state_range
            healthy &= ((lo < qpos[:, 2:]) & (qpos[:, 2:] < hi)).all(dim=1)
            healthy &= ((lo < qvel) & (qvel < hi)).all(dim=1)
        return healthy

    def observe(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        clip = self.spec.obs_qvel_clip
        vel = qvel if clip is None else qvel.clamp(-clip, clip)
        return torch.cat([qpos[:, 1:], vel], dim=1).to(torch.float32)

    def default_camera(self, data: mujoco.MjData) -> mujoco.MjvCamera:
        """gymnasium's default view: a free camera set up at the first render, then the task's config."""
        if self._camera is None:
            cam = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            cam.fixedcamid = -1
            cam.lookat[:] = np.median(data.geom_xpos, axis=0)
            cam.distance = self._extent
            for key, value in self.spec.camera.items():
                if isinstance(value, tuple):
                    getattr(cam, key)[:] = value
                else:
                    setattr(cam, key, value)
            self._camera = cam
        return self._camera


def _ctrl_cost(weight: float, ctrl: torch.Tensor) -> torch.Tensor:
    """gymnasium's control cost, ``weight * np.sum(np.square(action))`` on the float32 action: a float32 number,
    its squares added left to right (numpy's order for fewer than 9 terms; ``torch.sum`` may pair them otherwise
    and change the last bit). On the host numpy computes it (the same numbers, in a fraction of the time of
    torch's per-op dispatch on tiny tensors)."""
    if ctrl.device.type == "cpu":
        return torch.from_numpy(weight * np.square(ctrl.numpy().astype(np.float32)).sum(axis=1))
    return _ctrl_cost_torch(weight, ctrl)


def _ctrl_cost_torch(weight: float, ctrl: torch.Tensor) -> torch.Tensor:
    squares = ctrl.to(torch.float32).square()
    total, *rest = squares.unbind(1)
    for term in rest:
        total = total + term
    return weight * total
