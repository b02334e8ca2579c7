"""Native batched CPU MuJoCo backend: ``mujoco:<gymnasium v5 id>``, e.g. ``mujoco:HalfCheetah-v5``.

The ``gym:`` backend steps N gymnasium envs one after another, paying Python and wrapper overhead per env and
per step. Here the same task (gymnasium's own MJCF asset, gymnasium v5's reward, termination, observation and
reset definitions with default kwargs) is one ``MjModel`` plus N simulation states that are stepped together:

* physics: ``mujoco.batch.Batch`` (in the pinned MuJoCo 3.17, absent from older releases), which steps all N
  states on a thread pool (``nthread``, default ``os.cpu_count()``) and keeps each state row *complete*
  (qpos, qvel, act, warmstart, ctrl, time), so results are bit-identical to gymnasium's single ``MjData``.
  ``mujoco.rollout`` was measured as well: it is no faster here and cannot hand back the solver warmstart,
  so trajectories drift from gymnasium's at solver tolerance (1e-9 in qpos after 100 HalfCheetah steps).
  On older MuJoCo a tight ``mj_step`` loop over persistent ``MjData`` is the fallback.
* everything else (action mapping, observations, rewards, health checks, time limits, episode statistics)
  is vectorised numpy over the batch; the only per-env Python is drawing reset noise for envs that reset,
  from per-env generators seeded exactly as gymnasium seeds its envs (so ``mujoco:X`` and ``gym:X`` with the
  same seed and actions produce the same trajectories).

``make_single`` for a ``mujoco:`` spec returns the equivalent gymnasium env (built by the ``gym:`` backend),
for tools that need the single-env gymnasium API.
"""

from __future__ import annotations

import difflib
import os
from typing import Protocol

import gymnasium as gym
import mujoco
import numpy as np
import torch
from gymnasium.utils import seeding

from . import gym_backend
from .core import BackendStep, BatchedEnv, EnvOptions, Obs, UnknownEnvError
from .locomotion_constants import ASSETS, TASKS, Task
from .wrappers import default_time_limit

try:  # recent MuJoCo only (present in 3.17)
    from mujoco import batch as _mj_batch
except ImportError:  # pragma: no cover - depends on the installed mujoco
    _mj_batch = None

PREFIX = "mujoco:"


def lookup(name: str) -> Task:
    """The task for ``name`` or ``UnknownEnvError`` naming the supported tasks (or the close matches)."""
    if name in TASKS:
        return TASKS[name]
    known = [*TASKS, *(t for t in _sim_task_names() if t not in TASKS)]
    by_lower = {t.lower(): t for t in known}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]
    choices = ", ".join(PREFIX + t for t in (close or known))
    hint = f"close matches: {choices}" if close else f"valid choices: {choices}"
    if not close and name in gym.registry:
        hint += f" (use 'gym:{name}' for the gymnasium env)"
    raise UnknownEnvError(f"unknown env spec {PREFIX + name!r}: no native batched MuJoCo task; {hint}")


def _sim_task_names() -> list[str]:
    from .sim import task_names  # the tasks defined once for CPU MuJoCo, MJX and Warp (envs.sim)

    return task_names()


def make_env(name: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
    """The single-env form of a ``mujoco:`` task: gymnasium's own env, normalised like ``gym:`` envs."""
    if name not in TASKS and name in _sim_task_names():
        from .sim.backend import cpu

        return cpu.make_env(name, options)
    lookup(name)
    return gym_backend.make_env(name, options)


def make_batched(
    spec: str, name: str, num_envs: int, device: str | torch.device, seed: int | None, options: EnvOptions
) -> BatchedEnv:
    """Entry point used by ``robot_rl.envs.make`` for ``mujoco:`` specs.

    gymnasium's locomotion tasks get the native stepper of this module (bit-identical to gymnasium); the other
    tasks of ``robot_rl.envs.sim`` (cartpole-swingup, the arm tasks) run there on CPU MuJoCo, as on MJX and Warp.
    """
    if name not in TASKS and name in _sim_task_names():
        from .sim.backend import cpu

        return cpu.make_batched(spec, name, num_envs, device, seed, options)
    return MujocoBatchedEnv(name, num_envs, device=device, seed=seed, options=options, spec=spec)


# -- simulators: N MuJoCo states behind one small interface --------------------------------------------------
class _Sim(Protocol):
    qpos: np.ndarray  # (N, nq), current state; writable rows
    qvel: np.ndarray  # (N, nv)

    def step(self, ctrl: np.ndarray, ids: np.ndarray | None, nstep: int) -> None: ...

    def reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None: ...

    def set_state(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None: ...

    def get_data(self, index: int, data: mujoco.MjData) -> None: ...

    def close(self) -> None: ...


class _BatchSim:
    """``mujoco.batch.Batch``: state rows stepped on a thread pool; qpos/qvel are live views of the rows."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, nthread: int) -> None:
        assert _mj_batch is not None
        self._batch = _mj_batch.Batch(model, num_envs, nthread)
        self.qpos = self._batch.bind("qpos")
        self.qvel = self._batch.bind("qvel")
        self._ctrl = self._batch.bind("ctrl")

    def step(self, ctrl: np.ndarray, ids: np.ndarray | None, nstep: int) -> None:
        if ids is None:
            self._ctrl[:] = ctrl
        else:
            self._ctrl[ids] = ctrl
        self._batch.step(ids, nstep)

    def reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        # mj_resetData (time, warmstart, ctrl, act back to defaults) as gymnasium's reset does; no forward
        # pass, since mj_step recomputes everything from the state and nothing derived is read here.
        self._batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        self.set_state(ids, qpos, qvel)

    def set_state(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        self.qpos[ids] = qpos
        self.qvel[ids] = qvel

    def get_data(self, index: int, data: mujoco.MjData) -> None:
        self._batch.get_data(index, data)

    def close(self) -> None:
        self._batch = None


class _LoopSim:
    """Fallback for MuJoCo without ``mujoco.batch``: ``mj_step`` over a persistent list of ``MjData``."""

    def __init__(self, model: mujoco.MjModel, num_envs: int) -> None:
        self._model = model
        self._datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self.qpos = np.stack([d.qpos for d in self._datas])
        self.qvel = np.stack([d.qvel for d in self._datas])

    def step(self, ctrl: np.ndarray, ids: np.ndarray | None, nstep: int) -> None:
        model, datas, qpos, qvel = self._model, self._datas, self.qpos, self.qvel
        rows = range(len(datas)) if ids is None else ids.tolist()
        for j, i in enumerate(rows):
            d = datas[i]
            d.ctrl[:] = ctrl[j]
            mujoco.mj_step(model, d, nstep)
            qpos[i] = d.qpos
            qvel[i] = d.qvel

    def reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        for i in ids.tolist():
            mujoco.mj_resetData(self._model, self._datas[i])
        self.set_state(ids, qpos, qvel)

    def set_state(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        for j, i in enumerate(ids.tolist()):
            d = self._datas[i]
            d.qpos[:] = qpos[j]
            d.qvel[:] = qvel[j]
        self.qpos[ids] = qpos
        self.qvel[ids] = qvel

    def get_data(self, index: int, data: mujoco.MjData) -> None:
        mujoco.mj_copyData(data, self._model, self._datas[index])

    def close(self) -> None:
        self._datas = []


def _default_nthread(num_envs: int) -> int:
    return max(1, min(os.cpu_count() or 1, num_envs))


# -- the batched env -----------------------------------------------------------------------------------------
class MujocoBatchedEnv(BatchedEnv):
    """``num_envs`` copies of a gymnasium v5 MuJoCo task stepped as one batch (see the module docstring).

    Semantics are those of ``BatchedEnv`` and match ``robot_rl.envs.make("gym:<name>")`` step for step: actions in
    [-1, 1] mapped affinely to the actuator ctrlrange (clipped; NaN/inf rejected), same-step autoreset with
    ``info["final_obs"]``, episode statistics, action repeat that stops at termination, a time limit in agent
    steps, ``reset(seed=s)`` seeding sub-env i with s + i.

    Args beyond ``robot_rl.envs.make``'s: ``nthread`` (physics threads; default ``min(os.cpu_count(), num_envs)``) and
    ``stepper`` ("batch" = ``mujoco.batch``, "loop" = ``mj_step`` loop; default "batch" where available).
    """

    _action_device = torch.device("cpu")  # actions are checked on the host, where the physics runs

    def __init__(
        self,
        name: str,
        num_envs: int = 1,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        options: EnvOptions | None = None,
        spec: str | None = None,
        nthread: int | None = None,
        stepper: str | None = None,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        options = options or EnvOptions()
        self.task = task = lookup(name)
        model = mujoco.MjModel.from_xml_path(str(ASSETS / task.xml_file))
        # As gymnasium does: grow the offscreen buffer to the requested frame (no effect on physics).
        height, width = options.render_size
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        if options.camera_id is not None and not -1 <= options.camera_id < model.ncam:
            raise ValueError(f"camera_id {options.camera_id} out of range for {name} (-1..{model.ncam - 1})")
        self._model = model

        if stepper is None:
            stepper = "batch" if _mj_batch is not None else "loop"
        if stepper == "batch":
            if _mj_batch is None:
                raise ValueError(
                    f"stepper='batch' needs mujoco.batch, which mujoco {mujoco.__version__} lacks"
                )
            threads = _default_nthread(num_envs) if nthread is None else int(nthread)
            if threads < 1:
                raise ValueError(f"nthread must be >= 1, got {nthread!r}")
            self._sim: _Sim = _BatchSim(model, num_envs, threads)
        elif stepper == "loop":
            threads = 1
            self._sim = _LoopSim(model, num_envs)
        else:
            raise ValueError(f"stepper must be 'batch' or 'loop', got {stepper!r}")
        self.stepper, self.nthread = stepper, threads

        self.num_envs = num_envs
        self.device = torch.device(device)
        self.spec = spec or PREFIX + name
        nq, nv = model.nq, model.nv
        obs_dim = nq - 1 + nv  # qpos without the x position, then qvel
        self.observation_spec = {"state": ((obs_dim,), torch.float32)}
        self.action_dim = int(model.nu)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        limit = options.max_episode_steps
        if limit is None:
            limit = default_time_limit(gym.spec(name).max_episode_steps, options.action_repeat)
        self.max_episode_steps = limit
        self._action_repeat = options.action_repeat

        # gymnasium's action space is the float32 ctrlrange; NormalizedAction maps [-1, 1] onto it in float64
        # and casts back to float32. The same arithmetic here keeps controls (and ctrl costs) bit-identical.
        bounds = model.actuator_ctrlrange.astype(np.float32).astype(np.float64)
        self._ctrl_low, self._ctrl_high = bounds[:, 0], bounds[:, 1]
        self._ctrl_center = (self._ctrl_high + self._ctrl_low) / 2.0
        self._ctrl_half = (self._ctrl_high - self._ctrl_low) / 2.0
        self._ctrl_is_action = bool(np.all(self._ctrl_low == -1.0) and np.all(self._ctrl_high == 1.0))
        self._obs_dim = obs_dim
        self._on_cpu = self.device.type == "cpu"
        self._dt = model.opt.timestep * task.frame_skip
        data = mujoco.MjData(model)
        self._init_qpos, self._init_qvel = data.qpos.copy(), data.qvel.copy()

        self._render = options.render
        self._render_size = options.render_size
        self._camera_id = options.camera_id
        self._renderer: mujoco.Renderer | None = None
        self._render_data: mujoco.MjData | None = None
        self._camera: mujoco.MjvCamera | None = None

        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._initial_seed = seed
        self._elapsed = np.zeros(num_envs, dtype=np.int64)

    # -- contract (BatchedEnv.reset / step call these) -------------------------------------------------------
    def _reset(self, seed: int | None) -> Obs:
        if seed is not None:
            # seeding.np_random is what gymnasium's Env.reset(seed=...) uses, hence identical noise.
            self._rngs = [seeding.np_random(seed + i)[0] for i in range(self.num_envs)]
        ids = np.arange(self.num_envs, dtype=np.int32)
        self._reset_envs(ids)
        self._elapsed[:] = 0
        return {"state": self._to_torch(self._observe(self._sim.qpos, self._sim.qvel))}

    def _step(self, action: torch.Tensor) -> BackendStep:
        ctrl = self._to_ctrl(action.numpy())
        task, sim, n = self.task, self._sim, self.num_envs
        # gymnasium's ctrl cost is computed on the float32 action, so it is a float32 number there too.
        ctrl_cost = task.ctrl_cost_weight * np.square(ctrl).sum(axis=1)

        if self._action_repeat == 1:  # the common case: the whole batch, no index bookkeeping
            x_before = sim.qpos[:, 0].copy()
            sim.step(ctrl, None, task.frame_skip)
            reward, terminated = self._reward_and_termination(x_before, sim.qpos, sim.qvel, ctrl_cost)
        else:
            reward = np.zeros(n, dtype=np.float64)
            terminated = np.zeros(n, dtype=bool)
            ids: np.ndarray | None = None  # None = all envs, else those not yet terminated in this repeat
            for k in range(self._action_repeat):
                if k > 0 and terminated.any():
                    ids = np.flatnonzero(~terminated).astype(np.int32)
                    if ids.size == 0:
                        break
                rows = slice(None) if ids is None else ids
                x_before = sim.qpos[rows, 0].copy()
                sim.step(ctrl[rows], ids, task.frame_skip)
                r, term = self._reward_and_termination(
                    x_before, sim.qpos[rows], sim.qvel[rows], ctrl_cost[rows]
                )
                reward[rows] += r  # 0.0 + r == r: the same sum as wrappers.ActionRepeat
                terminated[rows] = term

        self._elapsed += 1
        if self.max_episode_steps is None:
            truncated = np.zeros(n, dtype=bool)
        else:
            truncated = self._elapsed >= self.max_episode_steps

        obs = self._observe(sim.qpos, sim.qvel)
        final = obs.copy()
        done = terminated | truncated
        if done.any():
            ended = np.flatnonzero(done).astype(np.int32)
            self._elapsed[ended] = 0
            self._reset_envs(ended)
            obs[ended] = self._observe(sim.qpos[ended], sim.qvel[ended])

        to_torch = self._to_torch
        return BackendStep(
            {"state": to_torch(obs)},
            to_torch(reward),  # float64: BatchedEnv sums episode returns before casting to float32
            to_torch(terminated),
            to_torch(truncated),
            {"state": to_torch(final)},
        )

    # -- public API ------------------------------------------------------------------------------------------
    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> Obs:
        """Overwrite every sub-env's joint positions/velocities (as gymnasium's ``MujocoEnv.set_state``).

        Other state (warmstart, time, episode counters) is kept. Returns the new observation.
        """
        self._check_open()
        qpos = np.asarray(qpos, dtype=np.float64)
        qvel = np.asarray(qvel, dtype=np.float64)
        if qpos.shape != self._sim.qpos.shape or qvel.shape != self._sim.qvel.shape:
            raise ValueError(
                f"qpos/qvel must have shapes {self._sim.qpos.shape}/{self._sim.qvel.shape}, "
                f"got {qpos.shape}/{qvel.shape}"
            )
        self._sim.set_state(np.arange(self.num_envs, dtype=np.int32), qpos, qvel)
        return {"state": self._to_torch(self._observe(self._sim.qpos, self._sim.qvel))}

    def render(self, index: int = 0) -> np.ndarray:
        """Frame (H, W, 3) uint8 of sub-env ``index``; only when made with ``render=True``."""
        self._check_render(index)
        if self._renderer is None:
            height, width = self._render_size
            self._renderer = mujoco.Renderer(self._model, height, width)
            self._render_data = mujoco.MjData(self._model)
        data = self._render_data
        assert data is not None
        self._sim.get_data(index, data)
        mujoco.mj_forward(self._model, data)  # derived positions for the scene
        camera: int | mujoco.MjvCamera
        if self._camera_id is not None and self._camera_id >= 0:
            camera = self._camera_id
        else:
            camera = self._default_camera(data)
        self._renderer.update_scene(data, camera=camera)
        return np.ascontiguousarray(self._renderer.render(), dtype=np.uint8)

    def close(self) -> None:
        """Release the simulator and the renderer (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._sim.close()

    # -- internals -------------------------------------------------------------------------------------------
    def _reward_and_termination(
        self, x_before: np.ndarray, qpos: np.ndarray, qvel: np.ndarray, ctrl_cost: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """gymnasium v5's reward and ``terminated`` for a block of envs, in gymnasium's operation order."""
        task = self.task
        reward = (qpos[:, 0] - x_before) / self._dt  # x velocity
        if task.forward_reward_weight != 1.0:  # multiplying by 1.0 is exact, so skipping it changes no bit
            reward = task.forward_reward_weight * reward
        if task.healthy_z_range is None:
            return reward - ctrl_cost, np.zeros(len(qpos), dtype=bool)
        healthy = self._is_healthy(qpos, qvel)
        reward = (reward + healthy * task.healthy_reward) - ctrl_cost
        terminated = ~healthy if task.terminate_when_unhealthy else np.zeros(len(qpos), dtype=bool)
        return reward, terminated

    def _is_healthy(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        task = self.task
        assert task.healthy_z_range is not None and task.healthy_angle_range is not None
        z, angle = qpos[:, 1], qpos[:, 2]
        (z_lo, z_hi), (a_lo, a_hi) = task.healthy_z_range, task.healthy_angle_range
        healthy = (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)
        if task.healthy_state_range is not None:
            lo, hi = task.healthy_state_range
            # state_vector()[2:] is qpos[2:] followed by qvel; strict bounds (NaN = unhealthy).
            healthy &= ((lo < qpos[:, 2:]) & (qpos[:, 2:] < hi)).all(axis=1)
            healthy &= ((lo < qvel) & (qvel < hi)).all(axis=1)
        return healthy

    def _observe(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """qpos without x, then qvel (clipped for Hopper/Walker), as float32; a fresh array every call."""
        obs = np.empty((len(qpos), self._obs_dim), dtype=np.float32)
        split = qpos.shape[1] - 1
        obs[:, :split] = qpos[:, 1:]  # float64 -> float32 on assignment, the same rounding as astype
        clip = self.task.obs_qvel_clip
        # minimum/maximum are np.clip's arithmetic without its Python-level overhead.
        obs[:, split:] = qvel if clip is None else np.minimum(np.maximum(qvel, -clip), clip)
        return obs

    def _reset_envs(self, ids: np.ndarray) -> None:
        """gymnasium's ``reset_model`` for the envs ``ids``: init state plus noise from each env's stream."""
        task, nq, nv = self.task, self._model.nq, self._model.nv
        s = task.reset_noise_scale
        qpos = np.empty((len(ids), nq))
        qvel = np.empty((len(ids), nv))
        for j, i in enumerate(ids.tolist()):
            rng = self._rngs[i]
            if rng is None:  # never seeded: fresh entropy, as gymnasium does
                rng = self._rngs[i] = seeding.np_random()[0]
            # Draw order and expressions as in gymnasium (qpos noise first), so seeded streams agree.
            qpos[j] = self._init_qpos + rng.uniform(low=-s, high=s, size=nq)
            if task.qvel_reset_noise == "normal":
                qvel[j] = self._init_qvel + s * rng.standard_normal(nv)
            else:
                qvel[j] = self._init_qvel + rng.uniform(low=-s, high=s, size=nv)
        self._sim.reset(ids, qpos, qvel)

    def _default_camera(self, data: mujoco.MjData) -> mujoco.MjvCamera:
        """gymnasium's default view: a free camera set up at the first render, then the task's config."""
        if self._camera is None:
            cam = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            cam.fixedcamid = -1
            cam.lookat[:] = np.median(data.geom_xpos, axis=0)
            cam.distance = self._model.stat.extent
            for key, value in self.task.camera.items():
                if isinstance(value, tuple):
                    getattr(cam, key)[:] = value
                else:
                    setattr(cam, key, value)
            self._camera = cam
        return self._camera

    def _to_ctrl(self, action: np.ndarray) -> np.ndarray:
        """[-1, 1] float32 actions -> float32 controls, computed exactly as ``wrappers.NormalizedAction``."""
        if self._ctrl_is_action:
            # ctrlrange [-1, 1]: 0 + a * 1 == a exactly and a is in range, so the mapping is the identity.
            return action
        a = action.astype(np.float64)
        ctrl = np.minimum(
            np.maximum(self._ctrl_center + a * self._ctrl_half, self._ctrl_low), self._ctrl_high
        )
        return ctrl.astype(np.float32)

    def _to_torch(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)  # arrays are fresh every step, so sharing their memory is safe
        return tensor if self._on_cpu else tensor.to(self.device)
