"""MuJoCo Warp physics for ``SimEnv`` (``warp:<task>``): N worlds in one ``mujoco_warp`` Data.

Warp arrays and torch tensors share memory through ``wp.to_torch`` (no copies); on a GPU the Warp kernels run
on torch's current CUDA stream, so the two never race. Each ``step`` of ``nstep`` physics steps is captured
once as a CUDA graph and replayed (kernel launch overhead dominates small models otherwise); on the CPU the
kernels are launched one by one. MuJoCo Warp computes in float32. The first env of a process compiles
MuJoCo Warp's kernels (cached on disk by Warp afterwards; about a minute on a CPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mujoco
import numpy as np
import torch

try:
    import warp as wp

    # Before mujoco_warp initialises Warp: no banner, no line per loaded kernel module (warp-lang >= 1.10).
    wp.config.log_level = getattr(wp, "LOG_WARNING", 30)
    import mujoco_warp as mjw
except ImportError as err:  # pragma: no cover - depends on the extra being installed
    raise ImportError("the warp: backend needs MuJoCo Warp: pip install 'robot-rl[warp]'") from err


class WarpPhysics:
    """N worlds of ``model``; see the module docstring."""

    dtype = torch.float32

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        device: torch.device,
        contact_capacity: tuple[int, int] | None = None,
    ) -> None:
        self.model, self.num_envs, self.device = model, num_envs, torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"the warp backend supports cpu and cuda devices, not {self.device}")
        wp.init()
        self._wdev = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        with wp.ScopedDevice(self._wdev):
            self._m = mjw.put_model(model)
            nconmax, njmax = contact_capacity or (None, None)
            self._d = mjw.make_data(model, nworld=num_envs, nconmax=nconmax, njmax=njmax)
            self._mask = wp.zeros(num_envs, dtype=bool)
        self._qpos = wp.to_torch(self._d.qpos)  # views: writes go straight into the simulator
        self._qvel = wp.to_torch(self._d.qvel)
        self._ctrl = wp.to_torch(self._d.ctrl)
        self._mask_t = wp.to_torch(self._mask)
        self._graphs: dict[int, object] = {}

    @contextlib.contextmanager
    def _on_torch_stream(self) -> Iterator[None]:
        with wp.ScopedDevice(self._wdev):
            if self.device.type == "cuda":
                with wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.device))):
                    yield
            else:
                yield

    def state(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Clones: the views change in place at the next step, and callers keep qpos_before across it.
        return self._qpos.clone(), self._qvel.clone()

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        self._ctrl.copy_(ctrl)
        with self._on_torch_stream():
            if self.device.type == "cuda":
                graph = self._graphs.get(nstep)
                if graph is None:
                    graph = self._graphs[nstep] = self._capture(nstep)
                wp.capture_launch(graph)
            else:
                for _ in range(nstep):
                    mjw.step(self._m, self._d)

    def _capture(self, nstep: int) -> object:
        # A first eager step compiles every kernel; capture then records only launches.
        mjw.step(self._m, self._d)
        with wp.ScopedCapture() as capture:
            for _ in range(nstep):
                mjw.step(self._m, self._d)
        return capture.graph

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        self._mask_t.copy_(mask)
        with self._on_torch_stream():
            mjw.reset_data(self._m, self._d, reset=self._mask)
        rows = mask[:, None]
        self._qpos.copy_(torch.where(rows, qpos.to(self._qpos.dtype), self._qpos))
        self._qvel.copy_(torch.where(rows, qvel.to(self._qvel.dtype), self._qvel))
        self._ctrl.copy_(torch.where(rows, ctrl.to(self._ctrl.dtype), self._ctrl))

    def get_data(self, index: int, data: mujoco.MjData) -> None:
        data.qpos[:] = self._qpos[index].cpu().numpy().astype(np.float64)
        data.qvel[:] = self._qvel[index].cpu().numpy().astype(np.float64)
        data.ctrl[:] = self._ctrl[index].cpu().numpy().astype(np.float64)

    def close(self) -> None:
        self._graphs.clear()
