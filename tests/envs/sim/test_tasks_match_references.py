"""The torch tasks of envs.sim against the implementations they port, step for step from the same state.

cartpole-swingup against dm_control's suite task (to rounding), Hopper-v5 against gymnasium's env (exactly;
``mujoco:``'s gymnasium twin, the same task with gymnasium's reset noise, is checked against gymnasium in
tests/envs/test_mujoco_backend.py). The arm tasks are checked against envs.arm in test_arm_task.py. All on CPU
MuJoCo in float64.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from robot_rl.envs.sim import SimEnv, make_task


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


def test_hopper_matches_gymnasium_from_the_same_state() -> None:
    """SimEnv's Hopper (CounterRNG reset noise, unlike mujoco:'s gymnasium twin) is gymnasium's MDP exactly."""
    env = SimEnv(make_task("Hopper-v5"), "cpu", 3, seed=0)
    env.reset()
    qpos, qvel = env.physics.state()
    raws = [gym.make("Hopper-v5").unwrapped for _ in range(3)]
    for i, raw in enumerate(raws):
        raw.reset(seed=i)  # fresh simulation state (zero warmstart, time, controls), then SimEnv's start
        raw.set_state(qpos[i].numpy(), qvel[i].numpy())
    steps_compared = 0
    for action in _actions(200, 3, env.action_dim, seed=1):
        obs, reward, terminated, truncated, info = env.step(action)
        refs = [raw.step(a.numpy()) for raw, a in zip(raws, action, strict=True)]
        ref_obs = torch.as_tensor(np.stack([r[0] for r in refs]), dtype=torch.float32)
        torch.testing.assert_close(info["final_obs"]["state"], ref_obs, atol=0, rtol=0)
        ref_reward = torch.tensor([r[1] for r in refs], dtype=torch.float32)
        torch.testing.assert_close(reward, ref_reward, atol=0, rtol=0)
        assert terminated.tolist() == [r[2] for r in refs] and not truncated.any()
        steps_compared += 1
        if terminated.any():
            break  # SimEnv resets from its own streams from here on
    assert steps_compared >= 10
    assert terminated.any()  # random actions make the hopper fall: termination was compared too
    for raw in raws:
        raw.close()
    env.close()


def test_locomotion_ctrl_cost_is_gymnasiums_on_every_device() -> None:
    """The float32 control cost: numpy on the host, a left-to-right torch sum elsewhere; both are gymnasium's."""
    from robot_rl.envs.sim.tasks.locomotion import _ctrl_cost, _ctrl_cost_torch

    gen = torch.Generator().manual_seed(0)
    for nu in (3, 6):
        ctrl = (torch.rand(4096, nu, generator=gen, dtype=torch.float64) * 2 - 1).float().double()
        expected = [0.1 * np.sum(np.square(row.astype(np.float32))) for row in ctrl.numpy()]
        host, device_path = _ctrl_cost(0.1, ctrl), _ctrl_cost_torch(0.1, ctrl)
        assert host.dtype == device_path.dtype == torch.float32
        assert torch.equal(host, torch.tensor(np.array(expected)))
        assert torch.equal(device_path, host)
