"""``SimTask``: a task defined once (MJCF plus torch reward, termination, observation and reset) for every
physics backend.

A task never touches a simulator: it reads joint positions and velocities as torch tensors, returns the
controls to apply and the initial states to reset to, and keeps its own per-env state (a reach target, a
commanded hand position) as tensors. ``robot_rl.envs.sim.SimEnv`` pairs it with a ``Physics`` (CPU MuJoCo, MJX or
MuJoCo Warp), so the same task runs on all three and the backends can be compared step for step.

Tensors are ``[N, ...]`` on the env's device in the physics' float dtype (float64 on CPU MuJoCo, float32 on
MJX and Warp); observations are returned as float32.
"""

from __future__ import annotations

import abc

import mujoco
import numpy as np
import torch

from .rng import ResetRNG


class SimTask(abc.ABC):
    """One task, one instance per env (it may hold per-env state). See the module docstring.

    Subclasses set ``name``, ``frame_skip`` (physics steps per control step), ``time_limit`` (control steps)
    and ``obs_dim``; ``action_dim`` defaults to the model's actuator count and ``reports_success`` to False.
    """

    name: str
    frame_skip: int
    time_limit: int
    obs_dim: int
    action_dim: int
    reports_success: bool = False
    # BatchedEnv.can_terminate: False only for tasks that follow the dm_control suite (no termination condition);
    # the locomotion twins of gymnasium's tasks report True, as the gym: backend does (gymnasium declares nothing)
    can_terminate: bool = True
    # (contacts, constraint rows) per env that MuJoCo Warp preallocates; None keeps its defaults, which are
    # too small for scenes with several simultaneous contacts (it then drops constraints and warns).
    contact_capacity: tuple[int, int] | None = None

    num_envs: int
    device: torch.device
    dtype: torch.dtype

    @abc.abstractmethod
    def build_model(self) -> mujoco.MjModel:
        """The compiled MJCF; called once per env."""

    def setup(self, model: mujoco.MjModel, num_envs: int, device: torch.device, dtype: torch.dtype) -> None:
        """Remember sizes and allocate per-env state; subclasses extend it."""
        self.num_envs, self.device, self.dtype = num_envs, device, dtype
        if not hasattr(self, "action_dim"):
            self.action_dim = int(model.nu)
        self.qpos0 = torch.as_tensor(model.qpos0, dtype=dtype, device=device)
        self.qvel0 = torch.zeros(model.nv, dtype=dtype, device=device)

    @abc.abstractmethod
    def initial_state(self, rng: ResetRNG) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh starts ``(qpos [N, nq], qvel [N, nv], ctrl [N, nu])`` for every env.

        Only the rows of envs that reset are used (see ``commit_reset``); drawing for all keeps the step free
        of host synchronisation.
        """

    def commit_reset(self, mask: torch.Tensor) -> None:
        """Envs in ``mask`` were reset to the last ``initial_state``; update per-env task state. Default: none."""
        return None

    @abc.abstractmethod
    def control(self, action: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Controls ``[N, nu]`` for actions in [-1, 1] (already checked and clipped)."""

    @abc.abstractmethod
    def evaluate(
        self, qpos_before: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """After one control step: ``(reward [N], terminated [N] bool, success [N] bool or None)``."""

    @abc.abstractmethod
    def observe(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Observation ``[N, obs_dim]`` float32."""

    def default_camera(self, data: mujoco.MjData) -> int | mujoco.MjvCamera:
        """The view rendered when no ``camera_id`` (or -1) is asked for; ``data`` is the scene to render.

        Default: the model's free camera (-1)."""
        return -1

    def reflection(self) -> tuple[np.ndarray, np.ndarray] | None:
        """A mirror symmetry as (state signs, action signs), for ``BatchedEnv.reflection``; None: none declared."""
        return None

    def mocap_pos(self, index: int) -> np.ndarray | None:
        """Mocap body positions of env ``index`` for rendering (e.g. a target marker); None if there are none."""
        return None
