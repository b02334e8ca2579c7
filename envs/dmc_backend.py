"""dm_control suite backend: ``dmc:<domain>-<task>`` specs, e.g. ``dmc:walker-walk``.

``DmcEnv`` adapts a dm_control environment to ``gymnasium.Env``. The suite's own time limit is disabled and
re-applied by a gymnasium TimeLimit (see ``robot_rl.envs.wrappers``) so it counts agent steps under action repeat and
can be overridden; dm_control's ``LAST`` step then only signals true termination.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

import gymnasium as gym
import numpy as np
from dm_control import suite
from dm_control.rl import control

from .core import EnvOptions, UnknownEnvError
from .wrappers import finish_single_env

PREFIX = "dmc:"


def _all_names() -> list[str]:
    return sorted(f"{domain}-{task}" for domain, task in suite.ALL_TASKS)


def parse(name: str) -> tuple[str, str]:
    """Split ``domain-task`` on the first '-' (domains may contain '_') and check the suite has it."""
    domain, _, task = name.partition("-")
    if (domain, task) in suite.ALL_TASKS:
        return domain, task
    names = _all_names()
    close = difflib.get_close_matches(name.lower(), names, n=5, cutoff=0.6)
    if close:
        hint = "close matches: " + ", ".join(PREFIX + c for c in close)
    else:
        hint = "valid choices: " + ", ".join(PREFIX + n for n in names)
    raise UnknownEnvError(f"unknown env spec {PREFIX + name!r}: no such dm_control suite task; {hint}")


def _task_time_limit(domain: str, task: str) -> float:
    """The task's default time limit in seconds, read from its factory's signature (inf for LQR)."""
    factory = getattr(suite, domain).SUITE[task]
    default = inspect.signature(factory).parameters["time_limit"].default
    return float(default)


class DmcEnv(gym.Env[np.ndarray, np.ndarray]):
    """A dm_control suite task as a gymnasium env with a flat float32 observation.

    Observation entries are concatenated in the order of the task's observation spec, which dm_control keeps
    fixed. The action space is the native actuator range (``NormalizedAction`` maps to [-1, 1] on top).
    ``LAST`` with discount 0 means terminated; ``LAST`` with a non-zero discount means truncated.
    The env runs without a time limit; ``default_max_steps`` is the suite's own limit in control steps.
    ``can_terminate``: whether the task has a termination condition of its own (in the suite only the LQR tasks
    do; every other episode ends at the time limit).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        domain: str,
        task: str,
        *,
        render_mode: str | None = None,
        render_size: tuple[int, int] = (240, 320),
        camera_id: int = 0,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r}; only 'rgb_array'")
        self._env = suite.load(domain, task, task_kwargs={"time_limit": float("inf")})
        self._closed = False
        self.can_terminate = type(self._env.task).get_termination is not control.Task.get_termination
        control_dt = self._env.control_timestep()
        time_limit = _task_time_limit(domain, task)
        self.default_max_steps: int | None = (
            None if not np.isfinite(time_limit) else int(round(time_limit / control_dt))
        )
        obs_spec = self._env.observation_spec()
        self._obs_keys = tuple(obs_spec.keys())
        dim = sum(int(np.prod(spec.shape)) for spec in obs_spec.values())
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        act_spec = self._env.action_spec()
        low = np.broadcast_to(act_spec.minimum, act_spec.shape).astype(np.float32)
        high = np.broadcast_to(act_spec.maximum, act_spec.shape).astype(np.float32)
        self.action_space = gym.spaces.Box(low, high, act_spec.shape, np.float32)
        self.render_mode = render_mode
        self._render_size = render_size
        self._camera_id = camera_id
        self.metadata = {**self.metadata, "render_fps": int(round(1.0 / control_dt))}
        self.dt = float(control_dt)  # simulated seconds per step, as gymnasium's own envs name it

    def _flatten(self, observation: dict[str, Any]) -> np.ndarray:
        return np.concatenate([np.asarray(observation[k], dtype=np.float32).ravel() for k in self._obs_keys])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            # The task samples initial states from its own RandomState; reseed it in place.
            self._env.task.random.seed(np.random.SeedSequence(seed).generate_state(4))
        timestep = self._env.reset()
        return self._flatten(timestep.observation), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        timestep = self._env.step(np.asarray(action, dtype=np.float64))
        reward = 0.0 if timestep.reward is None else float(timestep.reward)
        last = timestep.last()
        terminated = bool(last and float(timestep.discount) == 0.0)
        truncated = bool(last and not terminated)
        return self._flatten(timestep.observation), reward, terminated, truncated, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        height, width = self._render_size
        return self._env.physics.render(height=height, width=width, camera_id=self._camera_id)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.physics.free()


def make_env(name: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
    """Build one normalised dm_control env; returns it and its time limit in agent steps."""
    domain, task = parse(name)
    env = DmcEnv(
        domain,
        task,
        render_mode="rgb_array" if options.render else None,
        render_size=options.render_size,
        camera_id=0 if options.camera_id is None else options.camera_id,
    )
    return finish_single_env(env, options, env.default_max_steps)
