"""The same task with the same actions gives the same trajectory on CPU MuJoCo, MJX and MuJoCo Warp.

All three run on the CPU here (MJX through JAX's CPU backend, Warp through its LLVM CPU backend): slowly, but
with the same kernels a GPU would run. CPU MuJoCo computes in float64 and the other two in float32, and MJX
and Warp resolve contacts with their own algorithms, so the comparison is within tolerances:

* smooth phases agree to about 1e-5 (float32 rounding, amplified a little by the dynamics);
* where contacts start or break (a cube settling on the table, a finger at its joint limit), the solvers
  differ by up to a few millimetres per second for a step or two before converging again;
* chaotic contact events (a hand tumbling a cube) eventually separate the trajectories, as they would between
  two CPU MuJoCo builds; the horizons below stop before that, and the measured divergence is reported in
  docs/gpu.md.

Marked ``slow`` (MJX compiles each model's step for minutes on a CPU the first time; the compiled code is
cached on disk, see envs.sim.mjx_physics) and run by ``make test``.
"""

from __future__ import annotations

import pytest
import torch
from robot_rl.envs.sim import SimEnv, make_task

N = 2
# task: (steps, absolute tolerance on every observation entry, on rewards). The arm's cube rests on the table
# from the first step, and each engine settles that contact its own way: its velocity differs by up to 3.3e-3
# m/s at step 1 and 5e-4 at step 2 (measured), then agrees to 1e-5; SETTLE covers those first steps. On MJX a
# finger driven into its joint limit gives similar short transients in the gripper opening (up to 1.5e-3 m,
# decaying within 3 steps; Warp follows CPU MuJoCo there to 5e-6), hence reach's 3e-3.
CASES = {
    "cartpole-swingup": (100, 1e-4, 1e-5),
    "Hopper-v5": (30, 1e-4, 1e-4),
    "reach": (40, 3e-3, 1e-3),
    "push": (25, 1e-2, 1e-3),
}
SETTLE_STEPS, SETTLE_TOLERANCE = 3, 1e-2


def rollout(task: str, physics: str, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    env = SimEnv(make_task(task), physics, N, seed=0)
    gen = torch.Generator().manual_seed(1)
    observations, rewards, dones = [env.reset()["state"]], [], []
    try:
        for _ in range(steps):
            action = torch.rand(N, env.action_dim, generator=gen) * 2 - 1
            _, reward, terminated, truncated, info = env.step(action)
            observations.append(info["final_obs"]["state"])
            rewards.append(reward)
            dones.append(terminated | truncated)
    finally:
        env.close()
    return torch.stack(observations), torch.stack(rewards), torch.stack(dones)


@pytest.fixture(scope="module")
def cpu_reference() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    return {task: rollout(task, "cpu", steps) for task, (steps, _, _) in CASES.items()}


@pytest.mark.slow
@pytest.mark.parametrize("physics", ["mjx", "warp"])
@pytest.mark.parametrize("task", list(CASES))
def test_same_trajectory_as_cpu_mujoco(task: str, physics: str, cpu_reference) -> None:
    steps, obs_tol, reward_tol = CASES[task]
    ref_obs, ref_rew, ref_done = cpu_reference[task]
    obs, rew, done = rollout(task, physics, steps)
    torch.testing.assert_close(obs[0], ref_obs[0], atol=1e-6, rtol=0)  # identical starts (shared reset RNG)
    worst = (obs - ref_obs).abs().amax(dim=(1, 2))
    assert worst[:SETTLE_STEPS].max() <= SETTLE_TOLERANCE, f"observation error per step: {worst.tolist()}"
    assert worst[SETTLE_STEPS:].max() <= obs_tol, f"observation error per step: {worst.tolist()}"
    torch.testing.assert_close(rew, ref_rew, atol=reward_tol, rtol=0)
    assert torch.equal(done, ref_done)
    # The trajectory moved: the comparison is not one of two resting states.
    assert ref_obs.std(dim=0).max() > 0.01
