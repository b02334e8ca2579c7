"""SyncBatchedEnv semantics on a tiny deterministic toy env, independent of any simulator."""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from robot_rl.envs.core import SyncBatchedEnv

from robot_rl import envs


class CountingEnv(gym.Env[np.ndarray, np.ndarray]):
    """Observation [episode index, step]; terminates (with success) after ``term_at`` steps."""

    def __init__(self, term_at: int, report_success: bool = True) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._term_at = term_at
        self._report_success = report_success
        self._episode = -1
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._episode, self._t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._episode += 1
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray):
        self._t += 1
        terminated = self._t >= self._term_at
        info = {"is_success": terminated} if self._report_success else {}
        return self._obs(), float(action[0]) + 1.0, terminated, False, info


def test_same_step_autoreset_and_episode_stats() -> None:
    env = SyncBatchedEnv("toy", [CountingEnv(2), CountingEnv(3)])
    env.reset()
    action = torch.full((2, 1), 0.5)
    _, reward, terminated, truncated, info = env.step(action)
    assert torch.equal(reward, torch.tensor([1.5, 1.5]))
    assert not terminated.any() and torch.equal(info["success"], torch.tensor([False, False]))

    obs, _, terminated, truncated, info = env.step(action)
    assert terminated.tolist() == [True, False] and not truncated.any()
    assert obs["state"][0].tolist() == [1.0, 0.0]  # already the next episode's first observation
    assert info["final_obs"]["state"].tolist() == [[0.0, 2.0], [0.0, 2.0]]
    assert info["episode_length"].tolist() == [2.0, 0.0]
    assert info["episode_return"].tolist() == [3.0, 0.0]
    assert info["success"].tolist() == [True, False]

    _, _, terminated, _, info = env.step(action)
    assert terminated.tolist() == [False, True]
    assert info["episode_length"].tolist() == [0.0, 3.0]


def test_success_only_when_reported_and_time_limit_passthrough() -> None:
    sub = [gym.wrappers.TimeLimit(CountingEnv(2, report_success=False), 2) for _ in range(2)]
    env = SyncBatchedEnv("toy", sub, max_episode_steps=2)
    env.reset()
    env.step(torch.zeros(2, 1))
    _, _, terminated, truncated, info = env.step(torch.zeros(2, 1))
    assert "success" not in info
    # gymnasium reports both flags when termination coincides with the limit; both are passed through.
    assert terminated.all() and truncated.all()


def test_action_checks() -> None:
    env = SyncBatchedEnv("toy", [CountingEnv(5)])
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(1, 1))
    env.reset()
    with pytest.raises(TypeError, match="floating"):
        env.step(torch.zeros(1, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"sub-env\(s\) \[0\]"):
        env.step(torch.tensor([[float("nan")]]))
    _, reward, *_ = env.step(torch.tensor([[4.0]]))
    assert reward.item() == 2.0  # clipped to 1 before reaching the env


def test_returned_tensors_are_not_reused() -> None:
    env = SyncBatchedEnv("toy", [CountingEnv(5)])
    first = env.reset()["state"]
    second, *_ = env.step(torch.zeros(1, 1))
    assert first.tolist() == [[0.0, 0.0]] and second["state"].tolist() == [[0.0, 1.0]]


@pytest.mark.parametrize(
    "spec, repeat, seconds",
    [("gym:Pendulum-v1", 1, 0.05), ("gym:Hopper-v5", 2, 0.016), ("dmc:cartpole-swingup", 2, 0.02),
     ("arm:push", 1, 0.05), ("mujoco:Hopper-v5", 1, 0.008), ("mujoco:cartpole-swingup", 4, 0.04)],
)
def test_control_dt_is_simulated_seconds_per_agent_step(spec: str, repeat: int, seconds: float) -> None:
    """What video frame rates and dataset fps are derived from, on every backend."""
    with envs.make(spec, num_envs=1, action_repeat=repeat) as env:
        assert env.control_dt == pytest.approx(seconds)


@pytest.mark.parametrize(
    "spec, can_terminate",
    [("dmc:walker-walk", False), ("dmc:cartpole-swingup", False), ("dmc:lqr-lqr_2_1", True),
     ("mujoco:cartpole-swingup", False), ("gym:Hopper-v5", True), ("gym:Walker2d-v5", True),
     ("gym:HalfCheetah-v5", False), ("gym:Swimmer-v5", False), ("gym:Pendulum-v1", False),
     ("gym:MountainCarContinuous-v0", True), ("mujoco:HalfCheetah-v5", False), ("mujoco:Hopper-v5", True),
     ("arm:push-sparse", True)],
)
def test_can_terminate_is_false_only_where_the_backend_knows_episodes_end_at_the_time_limit(
    spec: str, can_terminate: bool
) -> None:
    """What the default agent picks its critics by: dm_control tasks without a termination condition (all of the
    suite but LQR), gymnasium's own tasks without one (HalfCheetah, Pendulum, ...) and their twins say so."""
    with envs.make(spec, num_envs=1) as env:
        assert env.can_terminate is can_terminate


def test_a_third_party_gymnasium_task_is_taken_to_terminate_even_under_a_name_gymnasium_uses(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend names only gymnasium's own never-terminating tasks; a lab's env that reuses the name (its own
    entry point) may terminate, so it keeps two critics (True: the backend cannot tell)."""
    from robot_rl.envs import gym_backend

    (tmp_path / "cheetah_lookalike.py").write_text(
        "import gymnasium as gym\n"
        "from gymnasium.envs.classic_control import PendulumEnv\n"
        "class Env(PendulumEnv):\n    pass\n"
        "gym.register('Lab/HalfCheetah-v5', entry_point='cheetah_lookalike:Env')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert gym_backend.can_terminate("HalfCheetah-v5") is False
        assert gym_backend.can_terminate("cheetah_lookalike:Lab/HalfCheetah-v5") is True
        with envs.make("gym:cheetah_lookalike:Lab/HalfCheetah-v5", num_envs=1) as env:
            assert env.can_terminate is True
    finally:  # leave no module or id behind for other tests (test_third_party has a lab_envs of its own)
        gym.registry.pop("Lab/HalfCheetah-v5", None)
        sys.modules.pop("cheetah_lookalike", None)


@pytest.mark.parametrize("env_id, can_terminate", [("HalfCheetah-v5", False), ("Hopper-v5", True)])
def test_from_gymnasium_knows_gymnasiums_own_tasks_as_gym_specs_do(env_id: str, can_terminate: bool) -> None:
    """`envs.from_gymnasium(lambda: gym.make("HalfCheetah-v5"))` must get the critics `gym:HalfCheetah-v5` gets."""
    with envs.from_gymnasium(lambda: gym.make(env_id)) as env:
        assert env.can_terminate is can_terminate
