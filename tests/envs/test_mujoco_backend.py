"""``mujoco:<gymnasium v5 id>`` (``GymnasiumTwinEnv``: envs.sim's Locomotion task on CPU MuJoCo with gymnasium's
reset noise) against gymnasium's own v5 tasks, bit for bit.

Two independent references: (1) ``gym:<id>`` through ``robot_rl.envs.make`` with the same seed and actions, which also
covers seeding, reset noise, autoreset, time limits and action repeat; (2) the raw, unwrapped gymnasium env
started from the same copied state and driven with the same controls, which checks the task definitions
without any of our wrappers. Kept short (a few envs, ~100-200 steps) for the 2-core test machine.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from robot_rl.envs.core import EnvOptions
from robot_rl.envs.mujoco_backend import TASKS, GymnasiumTwinEnv
from robot_rl.envs.sim import SimEnv
from robot_rl.envs.sim.physics import CpuPhysics
from robot_rl.envs.sim.tasks.locomotion import Locomotion

from robot_rl import envs

# The twin promises bit-identical numbers (same model, same complete simulation state, gymnasium's arithmetic
# in gymnasium's order and dtypes, gymnasium's reset-noise generators), so every comparison is exact.
EXACT = {"rtol": 0.0, "atol": 0.0}


def actions(steps: int, num_envs: int, dim: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(steps, num_envs, dim, generator=gen) * 2 - 1) * scale


def test_tasks_listed() -> None:
    assert {"HalfCheetah-v5", "Hopper-v5"} <= set(TASKS)


def test_twin_is_sim_env_with_gymnasium_reset_noise() -> None:
    """One definition of the tasks: the twin steps, resets and renders as envs.sim's SimEnv does."""
    for name in ("_step", "_reset", "_reset_where", "render", "close"):
        assert getattr(GymnasiumTwinEnv, name) is getattr(SimEnv, name), name
    env = GymnasiumTwinEnv("Hopper-v5", 2, seed=0)
    assert isinstance(env.task, Locomotion) and isinstance(env.physics, CpuPhysics)
    env.close()


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_constants_are_gymnasium_defaults(name: str) -> None:
    """Every constant we copied equals the default of gymnasium's constructor (a drift shows up by name)."""
    entry_point = gym.spec(name).entry_point
    assert isinstance(entry_point, str)
    module, cls = entry_point.split(":")
    params = inspect.signature(getattr(importlib.import_module(module), cls).__init__).parameters
    task = TASKS[name]
    for field in dataclasses.fields(task):
        if field.name in params:
            assert getattr(task, field.name) == params[field.name].default, field.name
    for absent in ("healthy_reward", "healthy_z_range", "healthy_angle_range", "healthy_state_range"):
        if absent not in params:
            assert getattr(task, absent) in (None, 0.0), absent


@pytest.mark.parametrize("name", sorted(TASKS))
def test_matches_gym_backend_step_for_step(make, name: str) -> None:
    n, steps = 3, 150
    # A short time limit puts truncations (and, for Hopper/Walker, terminations) into the window.
    ours = make(f"mujoco:{name}", num_envs=n, seed=11, max_episode_steps=25)
    ref = make(f"gym:{name}", num_envs=n, seed=11, max_episode_steps=25)
    assert ours.observation_spec == ref.observation_spec and ours.action_dim == ref.action_dim
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.max_episode_steps == ref.max_episode_steps == 25
    torch.testing.assert_close(ours.reset()["state"], ref.reset()["state"], **EXACT)

    terminations = truncations = 0
    # Slightly out-of-range actions also exercise the clipping.
    for action in actions(steps, n, ours.action_dim, seed=5, scale=1.1):
        obs, reward, terminated, truncated, info = ours.step(action)
        r_obs, r_reward, r_terminated, r_truncated, r_info = ref.step(action)
        torch.testing.assert_close(obs["state"], r_obs["state"], **EXACT)
        torch.testing.assert_close(reward, r_reward, **EXACT)
        assert torch.equal(terminated, r_terminated) and torch.equal(truncated, r_truncated)
        torch.testing.assert_close(info["final_obs"]["state"], r_info["final_obs"]["state"], **EXACT)
        torch.testing.assert_close(info["episode_return"], r_info["episode_return"], **EXACT)
        assert torch.equal(info["episode_length"], r_info["episode_length"])
        terminations += int(terminated.sum())
        truncations += int(truncated.sum())
    assert truncations >= 1  # and terminations, where the task has them:
    if TASKS[name].terminate_when_unhealthy:
        assert terminations >= 1, "random actions should make the robot fall within the window"


@pytest.mark.parametrize(("name", "terminates"), [("HalfCheetah-v5", False), ("Hopper-v5", True)])
def test_matches_raw_gymnasium_from_copied_state(name: str, terminates: bool) -> None:
    raw = gym.make(name).unwrapped  # no wrappers: gymnasium's task definition itself
    raw.reset(seed=3)
    ours = GymnasiumTwinEnv(name, 1, seed=0)
    ours.reset()
    # Both envs are fresh after a reset (zero warmstart, time, controls); give them the same joint state.
    rng = np.random.default_rng(1)
    qpos = raw.init_qpos + rng.uniform(-0.05, 0.05, raw.model.nq)
    qvel = raw.init_qvel + rng.uniform(-0.05, 0.05, raw.model.nv)
    raw.set_state(qpos, qvel)
    obs = ours.set_state(qpos[None], qvel[None])
    np.testing.assert_array_equal(obs["state"][0].numpy(), raw._get_obs().astype(np.float32))

    # The actuators of both tasks span [-1, 1], so the normalised action is the control itself.
    assert np.all(raw.model.actuator_ctrlrange == [-1.0, 1.0])
    ended = False
    for t, action in enumerate(actions(200, 1, ours.action_dim, seed=7)):
        r_obs, r_reward, r_terminated, _, _ = raw.step(action[0].numpy())
        obs, reward, terminated, _, info = ours.step(action)
        assert bool(terminated[0]) == r_terminated, f"step {t}"
        # ours autoreset: the true last observation is in final_obs (equal to obs unless it terminated)
        np.testing.assert_array_equal(info["final_obs"]["state"][0].numpy(), r_obs.astype(np.float32))
        assert reward[0].item() == np.float32(r_reward), f"step {t}"
        if r_terminated:
            ended = True
            break
        if t == 100 and not terminates:
            break
    assert ended == terminates
    raw.close()
    ours.close()


def test_action_repeat_stops_at_termination_like_gym_backend(make) -> None:
    ours = make("mujoco:Hopper-v5", num_envs=4, seed=2, action_repeat=3)
    ref = make("gym:Hopper-v5", num_envs=4, seed=2, action_repeat=3)
    assert ours.max_episode_steps == ref.max_episode_steps == 334
    ours.reset(), ref.reset()
    terminations = 0
    for action in actions(60, 4, 3, seed=9):
        obs, reward, terminated, _, info = ours.step(action)
        r_obs, r_reward, r_terminated, _, r_info = ref.step(action)
        torch.testing.assert_close(obs["state"], r_obs["state"], **EXACT)
        torch.testing.assert_close(reward, r_reward, **EXACT)
        assert torch.equal(terminated, r_terminated)
        torch.testing.assert_close(info["final_obs"]["state"], r_info["final_obs"]["state"], **EXACT)
        terminations += int(terminated.sum())
    assert terminations >= 1


def test_thread_counts_and_gym_backend_agree_exactly(make) -> None:
    """``mujoco.batch`` is bit-identical to one MjData per env (gymnasium's, in ``gym:``) at any thread count."""
    trajectories = []
    for nthread in (1, 2, None):
        if nthread is None:
            env = make("gym:Hopper-v5", num_envs=5, seed=4, action_repeat=2)
        else:
            env = GymnasiumTwinEnv(
                "Hopper-v5", 5, seed=4, options=EnvOptions(action_repeat=2), nthread=nthread
            )
            assert env.physics.nthread == nthread
        rows = [env.reset()["state"].flatten()]
        for action in actions(60, 5, 3, seed=1):
            obs, reward, terminated, truncated, info = env.step(action)
            rows.append(
                torch.cat(
                    [obs["state"].flatten(), reward, terminated.float(), info["final_obs"]["state"].flatten()]
                )
            )
        trajectories.append(torch.cat(rows))
        env.close()
    assert all(torch.equal(trajectories[0], t) for t in trajectories[1:])


def test_returned_tensors_are_not_reused(make) -> None:
    env = make("mujoco:HalfCheetah-v5", num_envs=2, seed=0)
    first = env.reset()["state"]
    kept = first.clone()
    obs, *_ = env.step(torch.zeros(2, env.action_dim))
    env.step(torch.ones(2, env.action_dim))
    assert torch.equal(first, kept) and not torch.equal(obs["state"], first)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="nthread"):
        GymnasiumTwinEnv("Hopper-v5", 1, nthread=0)
    with pytest.raises(ValueError, match="camera_id"):
        envs.make("mujoco:Hopper-v5", camera_id=7)
    env = GymnasiumTwinEnv("Hopper-v5", 2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="shapes"):
        env.set_state(np.zeros((1, 6)), np.zeros((1, 6)))
    with pytest.raises(RuntimeError, match="render=True"):
        env.render()
    env.close()


def test_mujoco_without_batch_is_a_clear_error(monkeypatch) -> None:
    """``mujoco.batch`` arrived in MuJoCo 3.17; older releases get one line saying what to install."""
    monkeypatch.setitem(sys.modules, "mujoco.batch", None)  # makes ``from mujoco import batch`` fail
    monkeypatch.delattr("mujoco.batch", raising=False)
    with pytest.raises(ImportError, match=r"MuJoCo >= 3\.17.*pip install -c constraints\.txt") as err:
        envs.make("mujoco:Hopper-v5")
    assert "\n" not in str(err.value)
