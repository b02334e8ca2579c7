"""Physics backends for ``SimEnv``: N copies of one MuJoCo model, spoken to in torch tensors.

A backend only integrates: it takes controls, steps, and exposes joint positions and velocities; everything
task-specific lives in ``robot_rl.envs.sim.task``. Three implementations share this interface:

* ``CpuPhysics`` (here): ``mujoco.batch.Batch`` (MuJoCo >= 3.17) stepping all states on a thread pool, in
  float64; its qpos/qvel arrays are shared with torch without a copy.
* ``MjxPhysics`` (``robot_rl.envs.sim.mjx_physics``): MJX under ``jit(vmap(...))``, arrays exchanged with torch through
  DLPack.
* ``WarpPhysics`` (``robot_rl.envs.sim.warp_physics``): MuJoCo Warp, arrays shared through Warp's torch interop.
"""

from __future__ import annotations

import os
from typing import Protocol

import mujoco
import numpy as np
import torch

BACKENDS = ("cpu", "mjx", "warp")


class Physics(Protocol):
    """What ``SimEnv`` needs from a simulator (see the module docstring)."""

    model: mujoco.MjModel
    num_envs: int
    device: torch.device
    dtype: torch.dtype

    def state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(qpos [N, nq], qvel [N, nv])``; valid until the next ``step`` or ``reset``; do not modify."""
        ...

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        """Set the controls ``[N, nu]`` and advance every env ``nstep`` physics steps."""
        ...

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        """For envs in ``mask``: reset all simulation state (``mj_resetData``), then set qpos, qvel and ctrl."""
        ...

    def get_data(self, index: int, data: mujoco.MjData) -> None:
        """Copy env ``index``'s qpos/qvel/ctrl into ``data`` (for rendering)."""
        ...

    def close(self) -> None: ...


def make_physics(
    kind: str,
    model: mujoco.MjModel,
    num_envs: int,
    device: torch.device,
    contact_capacity: tuple[int, int] | None = None,
    nthread: int | None = None,
) -> Physics:
    """The ``kind`` backend ("cpu", "mjx" or "warp") for ``num_envs`` copies of ``model`` on ``device``.

    ``contact_capacity`` is (contacts, constraint rows) per env for backends that preallocate them (Warp);
    ``nthread`` the CPU backend's thread count.
    """
    if nthread is not None and kind != "cpu":
        raise ValueError(f"nthread applies to the cpu physics backend only, not {kind!r}")
    if kind == "cpu":
        return CpuPhysics(model, num_envs, device, nthread)
    if kind == "mjx":
        from .mjx_physics import MjxPhysics

        return MjxPhysics(model, num_envs, device)
    if kind == "warp":
        from .warp_physics import WarpPhysics

        return WarpPhysics(model, num_envs, device, contact_capacity)
    raise ValueError(f"unknown physics backend {kind!r}; choose one of {BACKENDS}")


class CpuPhysics:
    """``mujoco.batch.Batch`` in float64 on the host; see the module docstring.

    ``mujoco.batch`` keeps each state row complete (qpos, qvel, act, warmstart, ctrl, time), so every row steps
    bit-identically to a single ``MjData`` (gymnasium's), at any thread count. ``nthread`` defaults to
    ``min(os.cpu_count(), num_envs)``.
    """

    dtype = torch.float64

    def __init__(
        self, model: mujoco.MjModel, num_envs: int, device: torch.device, nthread: int | None = None
    ):
        try:
            from mujoco import batch
        except ImportError as err:
            raise ImportError(
                f"mujoco: and CPU physics need mujoco.batch from MuJoCo >= 3.17, not mujoco {mujoco.__version__}"
                ' (pip install -c constraints.txt "mujoco>=3.17")'
            ) from err
        if nthread is not None and (isinstance(nthread, bool) or not isinstance(nthread, int) or nthread < 1):
            raise ValueError(f"nthread must be None or an int >= 1, got {nthread!r}")
        self.model, self.num_envs, self.device = model, num_envs, torch.device(device)
        self.nthread = nthread or max(1, min(os.cpu_count() or 1, num_envs))
        self._batch = batch.Batch(model, num_envs, self.nthread)
        self._qpos = self._batch.bind("qpos")  # live views of the state rows
        self._qvel = self._batch.bind("qvel")
        self._ctrl = self._batch.bind("ctrl")
        self._batch.reset(None, stage=mujoco.mjtStage.mjSTAGE_NONE)
        self._on_host = self.device.type == "cpu"
        self._state: tuple[torch.Tensor, torch.Tensor] | None = None  # until the state changes

    def state(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Copies: the views change in place at the next step, and callers keep qpos_before across it.
        if self._state is None:
            qpos, qvel = torch.from_numpy(self._qpos.copy()), torch.from_numpy(self._qvel.copy())
            if not self._on_host:
                qpos, qvel = qpos.to(self.device), qvel.to(self.device)
            self._state = qpos, qvel
        return self._state

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        self._ctrl[:] = ctrl.numpy(force=True)  # to the host if needed; float64 on assignment
        self._batch.step(None, nstep)
        self._state = None

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        ids = np.flatnonzero(mask.cpu().numpy()).astype(np.int32)
        if ids.size == 0:
            return
        self._batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        rows = torch.from_numpy(ids.astype(np.int64))
        if not self._on_host:
            rows = rows.to(self.device)
        self._qpos[ids] = qpos[rows].cpu().numpy()
        self._qvel[ids] = qvel[rows].cpu().numpy()
        self._ctrl[ids] = ctrl[rows].cpu().numpy()
        self._state = None

    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Overwrite every env's qpos/qvel, keeping the rest of its state (warmstart, time, ctrl)."""
        self._qpos[:] = qpos.cpu().numpy()
        self._qvel[:] = qvel.cpu().numpy()
        self._state = None

    def get_data(self, index: int, data: mujoco.MjData) -> None:
        self._batch.get_data(index, data)

    def close(self) -> None:
        self._batch = None
