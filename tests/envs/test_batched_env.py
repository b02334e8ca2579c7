"""``BatchedEnv`` owns the contract: a backend that implements only ``_reset`` and ``_step`` gets action checks,
clipping, the first-reset seed, episode statistics and ``final_obs`` from ``BatchedEnv.reset`` / ``step``."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from robot_rl.envs.core import BackendStep, BatchedEnv, Obs, SyncBatchedEnv


class Minimal(BatchedEnv):
    """Env i's episodes end after ``2 + i`` steps (env 0 terminated, the others truncated); reward 0.1 per
    step as float64, so returns show whether they are summed before the cast to float32."""

    def __init__(self, num_envs: int = 2, seed: int | None = None, action_dtype: torch.dtype | None = None):
        self.num_envs, self.device, self.spec, self.action_dim = num_envs, torch.device("cpu"), "toy:min", 2
        self.observation_spec = {"state": ((1,), torch.float32)}
        self.max_episode_steps = None
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._initial_seed = seed
        if action_dtype is not None:
            self._action_dtype = action_dtype
        self.t = torch.zeros(num_envs, dtype=torch.int64)
        self.seeds: list[int | None] = []
        self.actions: list[torch.Tensor] = []

    def _obs(self) -> Obs:
        return {"state": self.t[:, None].to(torch.float32)}

    def _reset(self, seed: int | None) -> Obs:
        self.seeds.append(seed)
        self.t.zero_()
        return self._obs()

    def _step(self, action: torch.Tensor) -> BackendStep:
        self.actions.append(action)
        self.t += 1
        done = self.t >= 2 + torch.arange(self.num_envs)
        final = None
        if bool(done.any()):
            final = self._obs()
            self.t[done] = 0
        terminated = done & (torch.arange(self.num_envs) == 0)
        reward = torch.full((self.num_envs,), 0.1, dtype=torch.float64)
        return BackendStep(
            self._obs(), reward, terminated, done & ~terminated, final, {"extra": self.t.clone()}
        )

    def render(self, index: int = 0) -> np.ndarray:
        raise RuntimeError("no rendering")

    def close(self) -> None:
        self._closed = True


def test_subclass_with_only_backend_hooks_gets_the_contract() -> None:
    env = Minimal(num_envs=3, seed=7)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(3, 2))
    env.reset()
    env.reset()
    env.reset(seed=3)
    assert env.seeds == [7, None, 3]  # make's seed on the first reset only

    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 2))
    with pytest.raises(TypeError, match="floating"):
        env.step(torch.zeros(3, 2, dtype=torch.int64))
    bad = torch.zeros(3, 2)
    bad[1, 0], bad[2, 1] = float("nan"), float("inf")
    with pytest.raises(ValueError, match=r"sub-env\(s\) \[1, 2\]; refusing to send it to the simulator"):
        env.step(bad)
    assert env.actions == []  # nothing reached the backend

    obs, reward, terminated, truncated, info = env.step(torch.tensor([[5.0, -5.0], [0.5, 0.0], [-2.0, 1.0]]))
    assert env.actions[0].dtype == torch.float32
    assert env.actions[0].tolist() == [[1.0, -1.0], [0.5, 0.0], [-1.0, 1.0]]
    assert reward.dtype == torch.float32 and torch.equal(reward, torch.full((3,), 0.1))
    assert torch.equal(info["final_obs"]["state"], obs["state"])  # None from _step: a copy of obs
    assert info["final_obs"]["state"] is not obs["state"]
    assert list(info) == ["final_obs", "episode_return", "episode_length", "extra"]
    assert info["episode_return"].tolist() == [0.0] * 3 and info["episode_length"].tolist() == [0.0] * 3

    obs, _, terminated, truncated, info = env.step(torch.zeros(3, 2))
    assert terminated.tolist() == [True, False, False] and truncated.tolist() == [False] * 3
    assert info["final_obs"]["state"].tolist() == [[2.0], [2.0], [2.0]] and obs["state"][0].item() == 0.0
    assert info["episode_length"].tolist() == [2.0, 0.0, 0.0]
    assert info["episode_return"].tolist() == [np.float32(0.1 + 0.1), 0.0, 0.0]

    _, _, terminated, truncated, info = env.step(torch.zeros(3, 2))
    assert truncated.tolist() == [False, True, False]
    assert info["episode_length"].tolist() == [0.0, 3.0, 0.0]
    assert info["episode_return"][1].item() == np.float32(0.1 + 0.1 + 0.1)

    env.reset()  # statistics restart with the episodes
    for _ in range(3):
        *_, info = env.step(torch.zeros(3, 2))
    assert info["episode_length"].tolist() == [0.0, 3.0, 0.0]

    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(torch.zeros(3, 2))
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_action_checks_on_the_torch_path() -> None:
    """A dtype numpy has no fast path for (and every non-CPU device) is checked and clipped in torch."""
    env = Minimal(action_dtype=torch.float16)
    env.reset()
    with pytest.raises(ValueError, match=r"sub-env\(s\) \[0\]; refusing to send it to the simulator"):
        env.step(torch.tensor([[float("-inf"), 0.0], [0.0, 0.0]]))
    env.step(torch.tensor([[3.0, 0.25], [-1e300, 0.5]], dtype=torch.float64))
    assert env.actions[0].dtype == torch.float16 and env.actions[0].tolist() == [[1.0, 0.25], [-1.0, 0.5]]


def test_host_and_device_bookkeeping_agree() -> None:
    """``step`` keeps statistics in numpy views on the host and in torch on other devices; same numbers."""
    host, device = Minimal(num_envs=4), Minimal(num_envs=4)
    host.reset(), device.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        reward = torch.rand(4, generator=gen, dtype=torch.float64) * 100
        done = torch.rand(4, generator=gen) < 0.3
        out = BackendStep(host._obs(), reward, done & (reward > 50), done & (reward <= 50))
        a = host._episode_stats_host(out)
        b = device._episode_stats_device(out)
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype == torch.float32 and torch.equal(x, y)


def test_backends_do_not_reimplement_the_contract() -> None:
    from robot_rl.envs.isaaclab_backend import IsaacLabEnv
    from robot_rl.envs.mujoco_backend import GymnasiumTwinEnv
    from robot_rl.envs.sim import SimEnv

    for cls in (SyncBatchedEnv, GymnasiumTwinEnv, SimEnv, IsaacLabEnv):
        for name in ("step", "reset", "_check_action"):
            assert getattr(cls, name) is getattr(BatchedEnv, name), f"{cls.__name__}.{name}"


def test_sim_locomotion_does_not_import_the_native_mujoco_backend() -> None:
    """The gymnasium task constants live in envs.locomotion_constants: envs.sim and envs.mujoco_backend do
    not import each other's private names (the sim task used to import mujoco_backend's table)."""
    code = (
        "import sys\n"
        "from robot_rl.envs.sim.tasks.locomotion import Locomotion\n"
        "Locomotion('Hopper-v5').build_model()\n"
        "assert 'robot_rl.envs.mujoco_backend' not in sys.modules, 'mujoco_backend imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
