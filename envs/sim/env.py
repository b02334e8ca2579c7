"""``SimEnv``: a ``SimTask`` on a ``Physics`` backend, as a ``BatchedEnv`` that never leaves the device.

Everything per step is a fixed sequence of tensor operations on ``env.device``: no per-env Python, and one
host synchronisation only, ``BatchedEnv``'s finiteness check that keeps NaN actions out of the simulator (the
contract requires a ``ValueError`` before anything is sent). Finished envs are reset in the same step under a mask:
the task draws fresh starts for every env from per-env counter-based streams (``robot_rl.envs.sim.rng``; a
subclass may set ``rng_type``, as ``mujoco:``'s gymnasium twin does), and the physics applies them only where the
mask is set, so no ``nonzero`` or branching on device values is needed.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import mujoco
import numpy as np
import torch

from ..core import BackendStep, BatchedEnv, EnvOptions, Obs, Reflection
from ..wrappers import default_time_limit
from .physics import make_physics
from .render import close_renderer, open_renderer
from .rng import CounterRNG, ResetRNG
from .task import SimTask


class SimEnv(BatchedEnv):
    """``num_envs`` copies of ``task`` simulated by the ``physics`` backend ("cpu", "mjx" or "warp").

    Semantics are ``BatchedEnv``'s: actions in [-1, 1] (clipped; NaN/inf raise ``ValueError``), same-step
    autoreset with ``info["final_obs"]``, ``terminated`` apart from ``truncated``, episode statistics,
    ``info["success"]`` for tasks that report it, ``reset(seed=s)`` seeding sub-env i with s + i. With action
    repeat, an env that terminates during the repeat stops accumulating reward and keeps the observation it
    terminated in as its final observation (the physics of all envs still steps, which keeps the batch whole).
    ``nthread``: CPU physics threads (default ``min(os.cpu_count(), num_envs)``).
    """

    #: Where reset noise comes from (``robot_rl.envs.sim.rng.ResetRNG``); made as ``rng_type(num_envs, device)``.
    rng_type: Callable[[int, torch.device], ResetRNG] = CounterRNG

    def __init__(
        self,
        task: SimTask,
        physics: str = "cpu",
        num_envs: int = 1,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        options: EnvOptions | None = None,
        spec: str | None = None,
        nthread: int | None = None,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        options = options or EnvOptions()
        self.task = task
        self.can_terminate = task.can_terminate
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.spec = spec or f"{physics}:{task.name}"
        model = task.build_model()
        height, width = options.render_size
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        if options.camera_id is not None and not -1 <= options.camera_id < model.ncam:
            raise ValueError(
                f"camera_id {options.camera_id} out of range for {task.name} (-1..{model.ncam - 1})"
            )
        self._model = model
        self.physics = make_physics(physics, model, num_envs, self.device, task.contact_capacity, nthread)
        self.backend = physics
        task.setup(model, num_envs, self.device, self.physics.dtype)
        self.action_dim = task.action_dim
        self.observation_spec = {"state": ((task.obs_dim,), torch.float32)}
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (task.obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        limit = options.max_episode_steps
        if limit is None:
            limit = default_time_limit(task.time_limit, options.action_repeat)
        self.max_episode_steps = limit
        self._action_repeat = options.action_repeat
        self.control_dt = float(model.opt.timestep) * task.frame_skip * options.action_repeat
        self._action_dtype = self.physics.dtype  # BatchedEnv checks actions on ``device``, in this dtype

        self._rng = self.rng_type(num_envs, self.device)
        self._initial_seed = seed
        self._render = options.render
        self._render_size = options.render_size
        self._camera_id = options.camera_id
        self._renderer: mujoco.Renderer | None = None
        self._render_data: mujoco.MjData | None = None
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._all = torch.ones(num_envs, dtype=torch.bool, device=self.device)

    # -- contract (BatchedEnv.reset / step call these) -------------------------------------------------------
    def _reset(self, seed: int | None) -> Obs:
        if seed is not None:
            self._rng.seed(seed)
        self._reset_where(self._all)
        self._elapsed.zero_()
        return {"state": self.task.observe(*self.physics.state())}

    def _step(self, action: torch.Tensor) -> BackendStep:
        task, physics = self.task, self.physics
        qpos, qvel = physics.state()
        reward = terminated = success = final = None
        for k in range(self._action_repeat):
            ctrl = task.control(action, qpos, qvel)
            physics.step(ctrl, task.frame_skip)
            qpos_before, (qpos, qvel) = qpos, physics.state()
            r, term, succ = task.evaluate(qpos_before, qpos, qvel, ctrl)
            if r.dtype != torch.float64:
                r = r.to(torch.float64)
            if k == 0:
                reward, terminated, success = r, term, succ
                if self._action_repeat > 1:
                    final = task.observe(qpos, qvel)
                continue
            # Envs that already terminated in this repeat keep their reward, flag and final observation.
            alive = ~terminated
            reward = reward + torch.where(alive, r, 0.0)
            obs_k = task.observe(qpos, qvel)
            final = torch.where(alive[:, None], obs_k, final)
            if success is not None and succ is not None:
                success = torch.where(alive, succ, success)
            terminated = terminated | term
        if final is None:
            final = task.observe(qpos, qvel)

        truncated, done = self._count_steps(terminated)
        if self._reset_where(done):
            obs = torch.where(done[:, None], task.observe(*physics.state()), final)
            final_obs: Obs | None = {"state": final}
        else:  # nothing reset (known on the host only): obs is final, BatchedEnv copies it
            obs, final_obs = final, None
        info = None
        if task.reports_success:
            assert success is not None
            info = {"success": success}
        # reward stays float64: BatchedEnv sums episode returns before casting to float32.
        return BackendStep({"state": obs}, reward, terminated, truncated, final_obs, info)

    # -- public API ------------------------------------------------------------------------------------------
    def reflection(self) -> Reflection | None:
        """``BatchedEnv.reflection``: the task's (``SimTask.reflection``; ``ArmTask`` declares one)."""
        signs = self.task.reflection()
        return None if signs is None else Reflection.from_signs(*signs)

    def render(self, index: int = 0) -> np.ndarray:
        """Frame (H, W, 3) uint8 of sub-env ``index``; only when made with ``render=True``."""
        self._check_render(index)
        if self._renderer is None:
            height, width = self._render_size
            self._renderer = open_renderer(self._model, height, width)
            self._render_data = mujoco.MjData(self._model)
        data = self._render_data
        assert data is not None
        self.physics.get_data(index, data)
        mocap = self.task.mocap_pos(index)
        if mocap is not None:
            data.mocap_pos[:] = mocap
        mujoco.mj_forward(self._model, data)
        camera = self._camera_id
        if camera is None or camera < 0:
            camera = self.task.default_camera(data)
        self._renderer.update_scene(data, camera=camera)
        return np.ascontiguousarray(self._renderer.render(), dtype=np.uint8)

    def close(self) -> None:
        """Release the simulator and the renderer (idempotent)."""
        if self._closed:
            return
        self._closed = True
        close_renderer(self._renderer)
        self._renderer = None
        self.physics.close()

    def __del__(self) -> None:
        # an env dropped without close() must not free another renderer's GL objects (envs/sim/render.py)
        close_renderer(getattr(self, "_renderer", None))

    # -- internals -------------------------------------------------------------------------------------------
    def _count_steps(self, terminated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance the episode step counters: ``(truncated, done)``, counters of done envs back to 0. On the host
        in numpy views of the tensors, as ``BatchedEnv._episode_stats_host`` (tiny tensors: torch's per-op
        dispatch would cost several times the arithmetic)."""
        if self.device.type == "cpu":
            elapsed = self._elapsed.numpy()
            elapsed += 1
            truncated = elapsed >= self.max_episode_steps
            done = terminated.numpy() | truncated
            elapsed[done] = 0
            return torch.from_numpy(truncated), torch.from_numpy(done)
        self._elapsed += 1
        truncated_t = self._elapsed >= self.max_episode_steps
        done_t = terminated | truncated_t
        self._elapsed.masked_fill_(done_t, 0)
        return truncated_t, done_t

    def _reset_where(self, mask: torch.Tensor) -> bool:
        """Reset the envs in ``mask``; False when it is known that none was (on the host)."""
        # On the host, asking whether anything ended costs nothing and saves drawing N fresh starts and an
        # observation per step; on a GPU it would be a synchronisation, so the masked reset always runs there.
        if self.device.type == "cpu" and not mask.numpy().any():
            return False
        qpos, qvel, ctrl = self.task.initial_state(self._rng)
        self.physics.reset(mask, qpos, qvel, ctrl)
        self.task.commit_reset(mask)
        self._rng.advance(mask)
        return True
