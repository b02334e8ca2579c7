"""Isaac Lab backend: ``isaaclab:<task id>``, e.g. ``isaaclab:Isaac-Cartpole-v0``, as a ``BatchedEnv``.

Isaac Lab environments (``isaaclab.envs.ManagerBasedRLEnv`` / ``DirectRLEnv``) are already batched on the
simulation device, so the adapter here adds no Python loop over sub-envs; it translates Isaac Lab's step
contract into ours (``robot_rl.envs.core.BatchedEnv``) with a handful of batched torch ops per step:

* observations: ``{"state": obs[obs_group]}``, flattened to float32 [N, D]; ``obs_group`` defaults to
  ``"policy"``. Other groups (e.g. an asymmetric ``"critic"``) are not returned; pick one with ``obs_group``.
* actions: our [-1, 1] actions (clipped; NaN/inf rejected before anything reaches the simulator) are mapped
  affinely onto dimensions where Isaac Lab's ``single_action_space`` is bounded. Isaac Lab's action spaces are
  usually unbounded ``Box(-inf, inf)`` and the task's action terms scale raw actions themselves (their
  ``scale`` setting), so unbounded dimensions get ``a * action_scale`` (default 1.0: passed through as is).
* ``terminated`` / ``truncated``: Isaac Lab's ``terminated`` and ``time_outs`` step outputs, copied.
* autoreset: Isaac Lab resets finished envs inside ``step`` and returns the new episode's first observation,
  which is our contract too. The true last observation (``info["final_obs"]``) is only available where the
  env offers it: recent Isaac Lab versions have an opt-in ``compute_final_obs`` cfg flag that stores the
  pre-reset observation in ``extras["final_obs"]``; the factory here switches it on where the cfg has it.
  Without it (older Isaac Lab, or a custom env) Isaac Lab's documented behaviour is that the pre-reset
  observation is lost, and ``final_obs`` rows of finished envs are the returned (reset) observation: then
  bootstrapping a truncated episode from ``final_obs`` is an approximation. ``IsaacLabEnv.final_obs_source``
  says which case holds (``"env"`` or ``"reset_obs"``).
* episode statistics are accumulated by ``BatchedEnv.step`` in torch on the device; a step makes no host sync
  apart from the one that checks actions for NaN/inf (the contract requires raising before stepping).

Limits (Isaac Lab's, documented): one simulation per process (a second env raises until the first is
closed), seeding is global (``reset(seed=s)`` reseeds torch/numpy/random for the whole process via Isaac
Lab's ``seed``; our per-sub-env ``s + i`` streams do not exist), ``max_episode_steps`` must be set through
the task's ``episode_length_s``, and ``render`` shows Isaac Lab's viewer camera (``env.cfg.viewer``).

Isaac Lab is imported lazily, inside ``make_batched``: it needs Isaac Sim, an NVIDIA RTX GPU and its own
Python (3.11 for Isaac Lab 2.x, 3.12 for 3.x), so it is never a dependency of ``import envs``. See
docs/isaaclab.md. This adapter has only been run against a fake env that follows Isaac Lab's documented
semantics (tests/envs/test_isaaclab_backend.py), never against a real Isaac Lab install.
"""

from __future__ import annotations

import difflib
import math
import sys
import weakref
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .core import BackendStep, BatchedEnv, EnvOptions, Obs, UnknownEnvError

PREFIX = "isaaclab:"

INSTALL_HINT = (
    "the 'isaaclab:' backend needs Isaac Lab and Isaac Sim, which are not installed in this Python "
    "environment. They need Linux with an NVIDIA RTX GPU and a matching Python (3.11 for Isaac Lab 2.x / "
    "Isaac Sim 5.x, 3.12 for Isaac Lab 3.x / Isaac Sim 6.x). In such a virtual environment run: "
    'pip install "isaaclab[isaacsim,all]==2.3.0" --extra-index-url https://pypi.nvidia.com '
    "and then install robot-rl into the same environment (pip install -e . from the repository). "
    "See docs/isaaclab.md and Isaac Lab's installation guide "
    "(https://isaac-sim.github.io/IsaacLab, 'Installation using Isaac Lab Pip Packages')."
)

FINAL_OBS_FROM_ENV = "env"
FINAL_OBS_FROM_RESET = "reset_obs"


def make_env(name: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
    """Isaac Lab tasks exist only as batches; ``robot_rl.envs.make_single`` cannot build one."""
    raise ValueError(
        f"Isaac Lab envs are batched only: use envs.make('{PREFIX}{name}', num_envs=N) "
        f"(a single env is envs.make('{PREFIX}{name}', num_envs=1)); envs.make_single is not supported"
    )


def make_batched(
    spec: str, name: str, num_envs: int, device: str | torch.device, seed: int | None, options: EnvOptions
) -> IsaacLabEnv:
    """Entry point used by ``robot_rl.envs.make`` for ``isaaclab:`` specs: start Isaac Sim, build the task, wrap it.

    Options are checked before Isaac Sim starts (it takes a while), so a bad option fails fast.
    """
    if options.max_episode_steps is not None:
        raise ValueError(
            f"max_episode_steps is not supported for {spec}: Isaac Lab ends episodes itself; set the time "
            "limit in the Isaac Lab env cfg (episode_length_s) instead"
        )
    if options.camera_id is not None:
        raise ValueError(
            f"camera_id is not supported for {spec}: Isaac Lab renders its viewer camera; configure it "
            "through the env cfg's viewer settings"
        )
    _check_no_live_env(spec)
    sim_device = torch.device(device)
    if sim_device.type == "cuda" and sim_device.index is None:
        sim_device = torch.device("cuda", 0)  # Isaac Lab names devices with their index ("cuda:0")
    env = create_isaaclab_env(
        name,
        num_envs,
        str(sim_device),
        seed,
        render=options.render,
        render_size=options.render_size,
    )
    try:
        adapter = IsaacLabEnv(
            env,
            spec=spec,
            seed=seed,
            action_repeat=options.action_repeat,
            render=options.render,
        )  # outputs stay on the env's device: the requested one, as Isaac Lab names it (e.g. "cuda:0")
    except BaseException:
        env.close()
        raise
    _LIVE_ENVS.add(adapter)
    return adapter


# -- Isaac Sim / Isaac Lab process state ---------------------------------------------------------------------
# Isaac Sim runs one app (``isaaclab.app.AppLauncher``) and one ``SimulationContext`` per process, so both are
# process-wide here: the app is started once and kept until ``close_app`` (or process exit).
_APP_LAUNCHER: Any = None
_APP_CAMERAS = False
_LIVE_ENVS: weakref.WeakSet[IsaacLabEnv] = weakref.WeakSet()


def _check_no_live_env(spec: str) -> None:
    if any(not env.closed for env in _LIVE_ENVS):
        raise RuntimeError(
            f"cannot make {spec}: an Isaac Lab env is already open in this process, and Isaac Lab runs one "
            "simulation per process (a second SimulationContext is refused); close the first env, or use one "
            "env with more num_envs"
        )


def launch_app(device: str | torch.device = "cuda:0", enable_cameras: bool = False) -> Any:
    """Start Isaac Sim headless once per process (``AppLauncher``) and return its ``SimulationApp``.

    Isaac Lab modules other than ``isaaclab.app`` may only be imported after this. If a Kit app is already
    running in this process (a script that started ``AppLauncher`` itself, e.g. to pass its own flags), it is
    reused and ``None`` is returned.
    """
    global _APP_LAUNCHER, _APP_CAMERAS
    if _APP_LAUNCHER is not None:
        if enable_cameras and not _APP_CAMERAS:
            raise RuntimeError(
                "Isaac Sim was started without cameras in this process; rendering needs enable_cameras at "
                "launch: make the render=True env first, or render in a separate process"
            )
        return _APP_LAUNCHER.app
    if "omni.kit.app" in sys.modules:  # Kit's modules exist only once an app runs: started by the caller
        return None
    try:
        from isaaclab.app import AppLauncher
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    _APP_LAUNCHER = AppLauncher({"headless": True, "device": str(device), "enable_cameras": enable_cameras})
    _APP_CAMERAS = enable_cameras
    return _APP_LAUNCHER.app


def close_app() -> None:
    """Close the Isaac Sim app this module started (``SimulationApp.close``), e.g. at the end of a script.

    Not done by ``IsaacLabEnv.close``: Isaac Sim cannot be restarted in the same process, and its ``close``
    may end the process (fast shutdown) or hang on some versions (Isaac Lab issues #3288, #3782), which must
    not happen in the middle of a run that still has results to write.
    """
    global _APP_LAUNCHER
    launcher, _APP_LAUNCHER = _APP_LAUNCHER, None
    if launcher is not None:
        launcher.app.close()


def create_isaaclab_env(
    task_id: str,
    num_envs: int,
    device: str | torch.device,
    seed: int | None,
    *,
    render: bool = False,
    render_size: tuple[int, int] = (240, 320),
) -> Any:
    """Build Isaac Lab's own env for ``task_id`` (a gymnasium id registered by ``isaaclab_tasks``).

    Follows Isaac Lab's documented recipe: start the app, ``parse_env_cfg(task_id, device=..., num_envs=...)``,
    then ``gymnasium.make(task_id, cfg=env_cfg)``. The cfg's ``seed`` is set (deterministic scene creation),
    ``compute_final_obs`` is switched on where the Isaac Lab version has it, and with ``render`` the viewer
    resolution is ``render_size`` and the env renders ``rgb_array`` frames.
    """
    launch_app(device, enable_cameras=render)
    try:
        import isaaclab_tasks  # noqa: F401  (registers the Isaac-* gymnasium ids)
        from isaaclab_tasks.utils import parse_env_cfg
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e

    if task_id not in gym.registry:
        known = sorted(i for i in gym.registry if i.startswith("Isaac-"))
        close = difflib.get_close_matches(task_id, known, n=3, cutoff=0.6)
        hint = (
            f"close matches: {', '.join(PREFIX + c for c in close)}"
            if close
            else f"{len(known)} Isaac-* tasks"
        )
        raise UnknownEnvError(
            f"unknown env spec {PREFIX + task_id!r}: not a registered Isaac Lab task ({hint})"
        )
    env_cfg = parse_env_cfg(task_id, device=str(device), num_envs=num_envs)
    env_cfg.seed = seed
    if hasattr(env_cfg, "compute_final_obs"):
        env_cfg.compute_final_obs = True
    if render:
        height, width = render_size
        env_cfg.viewer.resolution = (width, height)
    return gym.make(task_id, cfg=env_cfg, render_mode="rgb_array" if render else None)


# -- the adapter ---------------------------------------------------------------------------------------------
class IsaacLabEnv(BatchedEnv):
    """``BatchedEnv`` over an already created Isaac Lab env (see the module docstring for the mapping).

    ``env`` is duck-typed: anything with Isaac Lab's ``reset(seed=) -> (obs, extras)``,
    ``step(action) -> (obs, reward, terminated, time_outs, extras)``, ``close()`` and an ``unwrapped`` with
    ``num_envs``, ``device``, ``single_observation_space`` (a Dict of groups), ``single_action_space`` and
    optionally ``max_episode_length``, ``cfg.compute_final_obs`` and ``render()``.

    Args:
        spec: name shown in messages and ``repr``.
        seed: applied to the first ``reset()`` that gets no seed of its own.
        action_repeat: each action is sent ``k`` times. Isaac Lab steps every sub-env on every call and
            resets finished ones itself, so an env whose episode ends during the repeat keeps the rest of the
            repeat in its next episode; its ``final_obs``, flags and reward (summed up to the end) are those
            of the finished episode, and rewards earned after the end within that agent step are dropped so
            that ``episode_return`` is the sum of the rewards the learner saw.
        render: allow ``render()`` (the env must render ``rgb_array`` frames).
        obs_group: Isaac Lab observation group returned as ``"state"``.
        action_scale: factor for action dimensions without finite bounds.
        device: where outputs live; default (None) the env's own device.
    """

    def __init__(
        self,
        env: Any,
        *,
        spec: str = "isaaclab:<env>",
        seed: int | None = None,
        action_repeat: int = 1,
        render: bool = False,
        obs_group: str = "policy",
        action_scale: float = 1.0,
        device: str | torch.device | None = None,
    ) -> None:
        if isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1:
            raise ValueError(f"action_repeat must be an int >= 1, got {action_repeat!r}")
        if not (isinstance(action_scale, (int, float)) and math.isfinite(action_scale) and action_scale > 0):
            raise ValueError(f"action_scale must be a finite number > 0, got {action_scale!r}")
        base = getattr(env, "unwrapped", env)
        self._env = env
        self._base = base
        self.spec = spec
        self.num_envs = int(base.num_envs)
        self._env_device = torch.device(str(base.device))
        self.device = self._env_device if device is None else torch.device(device)

        obs_spaces = base.single_observation_space
        groups = list(obs_spaces.spaces) if isinstance(obs_spaces, gym.spaces.Dict) else []
        if obs_group not in groups:
            raise ValueError(f"{spec} has no observation group {obs_group!r}; its groups are {groups}")
        self.obs_group = obs_group
        obs_dim = _flat_dim(obs_spaces[obs_group])
        self.observation_spec = {"state": ((obs_dim,), torch.float32)}
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)

        act_space = base.single_action_space
        if not isinstance(act_space, gym.spaces.Box):
            raise ValueError(f"{spec} needs a Box action space, got {act_space}")
        self.action_dim = int(np.prod(act_space.shape))
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        low = np.broadcast_to(np.asarray(act_space.low, np.float64), act_space.shape).reshape(-1)
        high = np.broadcast_to(np.asarray(act_space.high, np.float64), act_space.shape).reshape(-1)
        bounded = np.isfinite(low) & np.isfinite(high)
        low, high = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)  # no inf arithmetic below
        center = np.where(bounded, (high + low) / 2.0, 0.0)
        half = np.where(bounded, (high - low) / 2.0, float(action_scale))
        self._action_is_identity = bool(np.all(center == 0.0) and np.all(half == 1.0))
        self._act_center = torch.as_tensor(center, dtype=torch.float32, device=self._env_device)
        self._act_half = torch.as_tensor(half, dtype=torch.float32, device=self._env_device)
        self._action_device = self._env_device  # BatchedEnv checks actions there, as float32

        limit = getattr(base, "max_episode_length", None)
        self.max_episode_steps = None if limit is None else math.ceil(int(limit) / action_repeat)
        self._action_repeat = action_repeat
        cfg = getattr(base, "cfg", None)
        exact = bool(getattr(cfg, "compute_final_obs", False))
        self.final_obs_source = FINAL_OBS_FROM_ENV if exact else FINAL_OBS_FROM_RESET

        self._render = render
        self._initial_seed = seed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def final_obs_exact(self) -> bool:
        """Whether ``info["final_obs"]`` holds the true pre-reset observation (else the reset observation)."""
        return self.final_obs_source == FINAL_OBS_FROM_ENV

    @property
    def unwrapped(self) -> Any:
        """The Isaac Lab env itself (e.g. for ``cfg``, ``scene`` or ``extras``)."""
        return self._base

    # -- contract (BatchedEnv.reset / step call these) -------------------------------------------------------
    def _reset(self, seed: int | None) -> Obs:
        """The seed goes to Isaac Lab's ``reset(seed=...)``, which seeds the process-wide RNGs once (not one
        stream per sub-env); ``reset()`` without a seed resets without reseeding."""
        obs, _extras = self._env.reset(seed=seed)
        return {"state": self._flat_obs(obs)}

    def _step(self, action: torch.Tensor) -> BackendStep:
        """Send one action row per sub-env (``action_repeat`` times); see the class doc."""
        env_action = self._to_env_action(action)

        n, device = self.num_envs, self.device
        reward = torch.zeros(n, dtype=torch.float32, device=device)
        terminated = torch.zeros(n, dtype=torch.bool, device=device)
        truncated = torch.zeros(n, dtype=torch.bool, device=device)
        ended = torch.zeros(n, dtype=torch.bool, device=device)  # an episode ended within this agent step
        final: torch.Tensor | None = None
        log: Any = None
        for _ in range(self._action_repeat):
            obs_raw, rew, term, time_out, extras = self._env.step(env_action)
            obs = self._flat_obs(obs_raw)
            rew = self._vector(rew, torch.float32)
            term = self._vector(term, torch.bool)
            time_out = self._vector(time_out, torch.bool)
            live = ~ended
            reward += torch.where(live, rew, 0.0)
            now_ended = (term | time_out) & live
            terminated |= term & live
            truncated |= time_out & live
            sub_final = self._final_obs(obs, term | time_out, extras)
            final = sub_final if final is None else torch.where(now_ended[:, None], sub_final, final)
            ended |= now_ended
            if isinstance(extras, Mapping) and "log" in extras:
                log = extras["log"]
        assert final is not None
        if self._action_repeat > 1:  # rows of envs that did not finish: the observation returned now
            final = torch.where(ended[:, None], final, obs)
        # Isaac Lab's extras["log"] as is (refreshed on steps where envs reset)
        info = None if log is None else {"log": log}
        return BackendStep({"state": obs}, reward, terminated, truncated, {"state": final}, info)

    # -- public API ------------------------------------------------------------------------------------------

    def render(self, index: int = 0) -> np.ndarray:
        """Isaac Lab's ``render()`` frame (its viewer camera) as uint8 (H, W, 3); only index 0."""
        self._check_render(index)
        if index != 0:
            raise ValueError(
                f"{self.spec} renders one view (Isaac Lab's viewer camera, env.cfg.viewer), requested as index 0"
            )
        render = getattr(self._env, "render", None)
        frame = render() if render is not None else None
        if frame is None:
            raise RuntimeError(
                f"{self.spec} returned no frame: the Isaac Lab env must be made with render_mode='rgb_array' "
                "and Isaac Sim started with enable_cameras (envs.make(..., render=True) does both)"
            )
        if isinstance(frame, torch.Tensor):
            frame = frame.detach().cpu().numpy()
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] not in (3, 4):
            raise RuntimeError(f"{self.spec} rendered an array of shape {frame.shape}, expected (H, W, 3)")
        return np.ascontiguousarray(frame[..., :3], dtype=np.uint8)

    def close(self) -> None:
        """Close the Isaac Lab env (idempotent). The Isaac Sim app stays up: see ``close_app``."""
        if self._closed:
            return
        self._closed = True
        self._env.close()

    # -- internals -------------------------------------------------------------------------------------------
    def _to_env_action(self, action: torch.Tensor) -> torch.Tensor:
        if self._action_is_identity:
            return action
        return torch.addcmul(self._act_center, action, self._act_half)

    def _flat_obs(self, obs: Any) -> torch.Tensor:
        """The ``obs_group`` of an Isaac Lab observation dict as a fresh float32 [N, D] tensor on ``device``.

        A copy: Isaac Lab may reuse its buffers on the next step. A group without concatenated terms is a
        dict of term tensors, concatenated here in their order.
        """
        group = obs[self.obs_group]
        if not isinstance(group, torch.Tensor):
            group = torch.cat([torch.as_tensor(t).reshape(self.num_envs, -1) for t in group.values()], dim=1)
        return group.reshape(self.num_envs, -1).to(device=self.device, dtype=torch.float32, copy=True)

    def _final_obs(self, obs: torch.Tensor, done: torch.Tensor, extras: Any) -> torch.Tensor:
        """Pre-reset observations for ``done`` rows where the env provides them, else ``obs``.

        Isaac Lab refreshes ``extras["final_obs"]`` on steps where some env resets and may leave it in its
        persistent ``extras`` dict afterwards; selecting only ``done`` rows makes a stale entry harmless.
        """
        if self.final_obs_source != FINAL_OBS_FROM_ENV or not isinstance(extras, Mapping):
            return obs
        final_raw = extras.get("final_obs")
        if final_raw is None:
            return obs
        return torch.where(done[:, None], self._flat_obs(final_raw), obs)

    def _vector(self, x: Any, dtype: torch.dtype) -> torch.Tensor:
        """A copy of an Isaac Lab [N] output (its reward/done buffers are updated in place on every step)."""
        return torch.as_tensor(x).reshape(self.num_envs).to(device=self.device, dtype=dtype, copy=True)


def _flat_dim(space: gym.spaces.Space) -> int:
    """Per-env size of an observation group: a Box, or a Dict of Boxes (a group of unconcatenated terms)."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict):
        return sum(_flat_dim(sub) for sub in space.spaces.values())
    raise ValueError(f"observation group space must be a Box or a Dict of Boxes, got {space}")
