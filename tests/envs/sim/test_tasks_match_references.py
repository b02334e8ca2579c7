"""The torch tasks of envs.sim against the implementations they port, step for step from the same state.

cartpole-swingup against dm_control's suite task, Hopper-v5 against ``mujoco:Hopper-v5`` (itself checked
against gymnasium in tests/envs/test_mujoco_backend.py). The arm tasks are checked against envs.arm in
test_arm_task.py. All on CPU MuJoCo in float64, so agreement is to rounding.
"""

from __future__ import annotations

import numpy as np
import torch
from robot_rl.envs.sim import SimEnv, make_task

from robot_rl import envs


def _actions(steps: int, num_envs: int, dim: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(steps, num_envs, dim, generator=gen) * 2 - 1


def test_cartpole_swingup_matches_dm_control() -> None:
    from dm_control import suite

    ref = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
    step = ref.reset()
    env = SimEnv(make_task("cartpole-swingup"), "cpu", 1, seed=0)
    env.reset()
    physics = ref.physics
    qpos = torch.as_tensor(physics.data.qpos.copy())[None]
    qvel = torch.as_tensor(physics.data.qvel.copy())[None]
    env.physics.reset(torch.ones(1, dtype=torch.bool), qpos, qvel, torch.zeros(1, 1, dtype=torch.float64))

    def flat(observation) -> torch.Tensor:
        return torch.as_tensor(
            np.concatenate([observation["position"], observation["velocity"]]), dtype=torch.float32
        )

    rewards = []
    obs = env.task.observe(*env.physics.state())
    for noise in _actions(300, 1, 1):
        # Energy pumping (push along the pole's swing) brings the pole up, so the reward's terms all vary.
        action = (-torch.sign(obs[:, 4:5] * obs[:, 1:2]) + 0.3 * noise).clamp(-1, 1)
        obs, reward, terminated, truncated, _ = env.step(action)
        step = ref.step(action[0].numpy())
        obs = obs["state"]
        torch.testing.assert_close(obs[0], flat(step.observation), atol=1e-6, rtol=0)
        torch.testing.assert_close(
            reward[0], torch.tensor(step.reward, dtype=torch.float32), atol=1e-6, rtol=0
        )
        assert not terminated.any() and not truncated.any()
        rewards.append(step.reward)
    # The pole swung up high, so every term of the reward was exercised.
    assert max(rewards) > 0.3


def test_hopper_matches_native_mujoco_backend() -> None:
    native = envs.make("mujoco:Hopper-v5", num_envs=3, seed=0)
    env = SimEnv(make_task("Hopper-v5"), "cpu", 3, seed=0)
    env.reset()
    qpos, qvel = env.physics.state()
    native.reset()
    native.set_state(qpos.numpy(), qvel.numpy())
    steps_compared = 0
    for action in _actions(200, 3, env.action_dim, seed=1):
        obs, reward, terminated, truncated, info = env.step(action)
        ref_obs, ref_reward, ref_term, ref_trunc, ref_info = native.step(action)
        torch.testing.assert_close(
            info["final_obs"]["state"], ref_info["final_obs"]["state"], atol=1e-6, rtol=0
        )
        torch.testing.assert_close(reward, ref_reward, atol=1e-5, rtol=0)
        assert torch.equal(terminated, ref_term) and torch.equal(truncated, ref_trunc)
        steps_compared += 1
        if (terminated | truncated).any():
            break  # the two backends draw reset noise from different generators
    assert steps_compared >= 10
    assert terminated.any()  # random actions make the hopper fall: termination was compared too
    native.close()
    env.close()
