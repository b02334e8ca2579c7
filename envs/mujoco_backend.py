"""CPU MuJoCo backend: ``mujoco:<task>``, e.g. ``mujoco:HalfCheetah-v5`` or ``mujoco:cartpole-swingup``.

A thin adapter over ``robot_rl.envs.sim``: every ``mujoco:`` task is a ``SimTask`` run by ``SimEnv`` on
``CpuPhysics`` (``mujoco.batch``, MuJoCo >= 3.17: one ``MjModel`` and N complete simulation states stepped on a
thread pool, ``nthread``, in float64). The tasks are defined once there, for CPU MuJoCo, MJX and Warp alike.

gymnasium's v5 locomotion tasks (``TASKS``: HalfCheetah, Hopper, Walker2d) run as ``GymnasiumTwinEnv``, the
bit-exact twin of ``gym:<id>``: ``mujoco:X`` and ``gym:X`` with the same seed and actions produce the same
trajectories (observations, rewards, terminations). The task (``robot_rl.envs.sim.tasks.locomotion``) computes
gymnasium's numbers in gymnasium's order and ``mujoco.batch`` steps each state as gymnasium's single ``MjData``;
what the twin adds is where reset noise comes from: per-env numpy generators seeded exactly as gymnasium seeds
its envs (``reset(seed=s)`` seeds sub-env i with s + i), instead of ``SimEnv``'s ``CounterRNG``.

``make_single`` for a locomotion task returns the equivalent gymnasium env (built by the ``gym:`` backend), for
tools that need the single-env gymnasium API.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium.utils import seeding

from . import gym_backend
from .core import BatchedEnv, EnvOptions, Obs, UnknownEnvError
from .locomotion_constants import TASKS, Task
from .sim import SimEnv, task_names
from .sim.backend import cpu
from .sim.tasks.locomotion import Locomotion

PREFIX = "mujoco:"


def lookup(name: str) -> Task:
    """The task for ``name`` or ``UnknownEnvError`` naming the supported tasks (or the close matches)."""
    if name in TASKS:
        return TASKS[name]
    known = [*TASKS, *(t for t in task_names() if t not in TASKS)]
    by_lower = {t.lower(): t for t in known}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]
    choices = ", ".join(PREFIX + t for t in (close or known))
    hint = f"close matches: {choices}" if close else f"valid choices: {choices}"
    if not close and name in gym.registry:
        hint += f" (use 'gym:{name}' for the gymnasium env)"
    raise UnknownEnvError(f"unknown env spec {PREFIX + name!r}: no native batched MuJoCo task; {hint}")


def make_env(name: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
    """The single-env form of a ``mujoco:`` task: gymnasium's own env, normalised like ``gym:`` envs."""
    if name not in TASKS and name in task_names():
        return cpu.make_env(name, options)
    lookup(name)
    return gym_backend.make_env(name, options)


def make_batched(
    spec: str, name: str, num_envs: int, device: str | torch.device, seed: int | None, options: EnvOptions
) -> BatchedEnv:
    """Entry point used by ``robot_rl.envs.make`` for ``mujoco:`` specs (see the module docstring)."""
    if name not in TASKS and name in task_names():
        return cpu.make_batched(spec, name, num_envs, device, seed, options)
    return GymnasiumTwinEnv(name, num_envs, device=device, seed=seed, options=options, spec=spec)


class GymnasiumRNG:
    """Reset noise from one numpy generator per env, seeded and drawn as gymnasium's envs do.

    ``ResetRNG``'s protocol: draws between two ``advance`` calls are each env's draws for its next reset. An
    env's draws are taken from its generator once and kept until it resets (``advance``), so every generator
    yields exactly the sequence gymnasium's ``reset_model`` draws from the env's ``np_random``.
    """

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.num_envs, self.device = num_envs, device
        self._generators: list[np.random.Generator | None] = [None] * num_envs  # None: fresh entropy
        self._draws: list[np.ndarray] = []  # per draw index: [N, *shape], valid where _kept
        self._kept: list[np.ndarray] = []
        self._index = 0

    def seed(self, seed: int) -> None:
        # seeding.np_random is what gymnasium's Env.reset(seed=...) uses, hence identical noise.
        self._generators = [seeding.np_random(seed + i)[0] for i in range(self.num_envs)]
        self._draws, self._kept, self._index = [], [], 0

    def advance(self, mask: torch.Tensor | None = None) -> None:
        used = slice(None) if mask is None else mask.cpu().numpy()
        for kept in self._kept:
            kept[used] = False
        self._index = 0

    def uniform(self, shape: tuple[int, ...], low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return self._draw(shape, lambda gen: gen.uniform(low=low, high=high, size=shape))

    def normal(self, shape: tuple[int, ...]) -> torch.Tensor:
        return self._draw(shape, lambda gen: gen.standard_normal(shape))

    def _draw(
        self, shape: tuple[int, ...], draw: Callable[[np.random.Generator], np.ndarray]
    ) -> torch.Tensor:
        k, self._index = self._index, self._index + 1
        if k == len(self._draws):
            self._draws.append(np.zeros((self.num_envs, *shape)))
            self._kept.append(np.zeros(self.num_envs, dtype=bool))
        values, kept = self._draws[k], self._kept[k]
        assert values.shape[1:] == shape, "the draws of a reset must come in the same order every time"
        for i in np.flatnonzero(~kept).tolist():
            gen = self._generators[i]
            if gen is None:  # never seeded: fresh entropy, as gymnasium does
                gen = self._generators[i] = seeding.np_random()[0]
            values[i] = draw(gen)
        kept[:] = True
        return torch.from_numpy(values.copy()).to(self.device)


class GymnasiumTwinEnv(SimEnv):
    """A gymnasium v5 locomotion task (``Locomotion``) on CPU MuJoCo that reproduces ``gym:<name>`` exactly.

    ``SimEnv`` with gymnasium's reset noise (``GymnasiumRNG``), plus ``set_state``. Semantics are
    ``BatchedEnv``'s, as for ``robot_rl.envs.make("gym:<name>")``: actions in [-1, 1] (clipped; NaN/inf
    rejected), same-step autoreset with ``info["final_obs"]``, episode statistics, action repeat that stops at
    termination, a time limit in agent steps, ``reset(seed=s)`` seeding sub-env i with s + i.
    ``nthread``: physics threads (default ``min(os.cpu_count(), num_envs)``).
    """

    rng_type = GymnasiumRNG

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
    ) -> None:
        lookup(name)
        task, spec = Locomotion(name), spec or PREFIX + name
        super().__init__(
            task, "cpu", num_envs, device=device, seed=seed, options=options, spec=spec, nthread=nthread
        )

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> Obs:
        """Overwrite every sub-env's joint positions/velocities (as gymnasium's ``MujocoEnv.set_state``).

        Other state (warmstart, time, episode counters) is kept. Returns the new observation.
        """
        self._check_open()
        qpos_t = torch.as_tensor(np.asarray(qpos, dtype=np.float64))
        qvel_t = torch.as_tensor(np.asarray(qvel, dtype=np.float64))
        now = self.physics.state()
        if qpos_t.shape != now[0].shape or qvel_t.shape != now[1].shape:
            raise ValueError(
                f"qpos/qvel must have shapes {tuple(now[0].shape)}/{tuple(now[1].shape)}, "
                f"got {tuple(qpos_t.shape)}/{tuple(qvel_t.shape)}"
            )
        self.physics.set_state(qpos_t, qvel_t)
        return {"state": self.task.observe(*self.physics.state())}
