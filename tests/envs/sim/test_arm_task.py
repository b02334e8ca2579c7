"""The torch port of the tabletop arm tasks (``robot_rl.envs.sim.tasks.arm``) against its reference, ``robot_rl.envs.arm.ArmEnv``.

Kinematics against MuJoCo itself, the IK iteration against ``ArmEnv._solve_ik``, then whole episodes: a
``SimEnv`` on CPU physics (float64) is put in exactly the state of one ``ArmEnv`` per sub-env and both get the
same actions; observations, rewards, termination and success must agree at every step. Small batches and short
horizons keep the module at a few seconds.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from robot_rl.envs.arm.experts import ScriptedExpert
from robot_rl.envs.arm.model import ARM_JOINTS, CUBE_HALF, FINGER_RANGE, build_model
from robot_rl.envs.arm.tasks import (
    STATE_LAYOUT,
    TIME_LIMITS,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
    ArmEnv,
    _analytic_ik,
)
from robot_rl.envs.sim import SimEnv, make_task
from robot_rl.envs.sim.rng import CounterRNG
from robot_rl.envs.sim.tasks.arm import (
    ArmTask,
    analytic_ik,
    grip_position,
    hand_matrix,
    hand_quat,
    ik_step,
    jacobian,
)

L = STATE_LAYOUT


def _joint_samples(model: mujoco.MjModel, n: int, seed: int) -> np.ndarray:
    ranges = model.jnt_range[[model.joint(j).id for j in ARM_JOINTS]]
    return np.random.default_rng(seed).uniform(ranges[:, 0], ranges[:, 1], (n, len(ARM_JOINTS)))


def test_forward_kinematics_and_jacobian_match_mujoco() -> None:
    m = build_model()
    d = mujoco.MjData(m)
    grip = m.site("grip").id
    arm_qpos = [m.joint(j).qposadr[0] for j in ARM_JOINTS]
    arm_dof = [m.joint(j).dofadr[0] for j in ARM_JOINTS]
    qs = _joint_samples(m, 64, seed=0)
    q = torch.from_numpy(qs)
    pos, mat, quat, jac = grip_position(q), hand_matrix(q), hand_quat(q), jacobian(q)
    jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    ref_quat = np.empty(4)
    for i, qi in enumerate(qs):
        d.qpos[arm_qpos] = qi
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        np.testing.assert_allclose(pos[i].numpy(), d.site_xpos[grip], rtol=0, atol=1e-12)
        np.testing.assert_allclose(mat[i].numpy().ravel(), d.site_xmat[grip], rtol=0, atol=1e-12)
        mujoco.mju_mat2Quat(ref_quat, d.site_xmat[grip])
        sign = np.sign(ref_quat @ quat[i].numpy())  # a quaternion and its negative are the same rotation
        np.testing.assert_allclose(sign * quat[i].numpy(), ref_quat, rtol=0, atol=1e-12)
        mujoco.mj_jacSite(m, d, jacp, jacr, grip)
        np.testing.assert_allclose(jac[i].numpy(), np.vstack([jacp, jacr])[:, arm_dof], rtol=0, atol=1e-12)


def test_analytic_ik_matches_reference() -> None:
    points = np.random.default_rng(1).uniform(WORKSPACE_LOW, WORKSPACE_HIGH, (32, 3))
    ours = analytic_ik(torch.from_numpy(points)).numpy()
    np.testing.assert_allclose(ours, np.stack([_analytic_ik(p) for p in points]), rtol=0, atol=1e-12)


def test_ik_step_matches_arm_env() -> None:
    env = ArmEnv("push")
    m = env.model
    rng = np.random.default_rng(2)
    ranges = m.jnt_range[[m.joint(j).id for j in ARM_JOINTS]]
    low, high = torch.from_numpy(ranges[:, 0]), torch.from_numpy(ranges[:, 1])
    n = 64
    x_des = rng.uniform(WORKSPACE_LOW, WORKSPACE_HIGH, (n, 3))
    # Anywhere in the joint box (large errors: step limit and range clipping), and near the IK's working
    # point (hand about pointing down, small steps: the unclipped least-squares solution).
    near = np.stack([_analytic_ik(p) for p in rng.uniform(WORKSPACE_LOW, WORKSPACE_HIGH, (n, 3))])
    near = np.clip(near + rng.normal(0.0, 0.05, near.shape), ranges[:, 0], ranges[:, 1])
    for q0 in (_joint_samples(m, n, seed=3), near):
        ours = ik_step(torch.from_numpy(q0), torch.from_numpy(x_des), low, high).numpy()
        ref = np.stack([env._solve_ik(q0[i], x_des[i], iters=1) for i in range(n)])
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)
    env.close()


def _copy_state(env: SimEnv, arms: list[ArmEnv]) -> None:
    """Put every sub-env of ``env`` (physics and task state) in the state of the matching ``ArmEnv``."""
    task = env.task
    assert isinstance(task, ArmTask)

    def stack(get) -> torch.Tensor:
        return torch.from_numpy(np.stack([np.array(get(a), dtype=np.float64) for a in arms]))

    env.physics.reset(
        torch.ones(env.num_envs, dtype=torch.bool),
        stack(lambda a: a.data.qpos),
        stack(lambda a: a.data.qvel),
        stack(lambda a: a.data.ctrl),
    )
    task.target, task.x_des = stack(lambda a: a._target), stack(lambda a: a._x_des)
    task.q_cmd, task.prev_ee = stack(lambda a: a._q_cmd), stack(lambda a: a._prev_ee)
    task.ee_vel = stack(lambda a: a._ee_vel)


CASES = [("reach", "dense"), ("push", "dense"), ("pick_place", "dense"), ("pick_place", "sparse")]


@pytest.mark.parametrize("policy", ["random", "expert"])
@pytest.mark.parametrize(("task_name", "reward"), CASES)
def test_steps_match_arm_env(task_name: str, reward: str, policy: str) -> None:
    """Step for step against ArmEnv from the same state, until each sub-env terminates (or 30 steps).

    "random" actions are uniform in [-1, 1]; "expert" actions come from the scripted expert with noise 0.3,
    which pushes, grasps and lifts the cube (contacts) and solves tasks (termination, success, the sparse
    reward). Both sides run the same MuJoCo step in float64 and contact dynamics do not make them drift: the
    observations agree bit for bit over the whole horizon (the tolerance only allows for float32 rounding), and
    rewards differ by SimEnv's float32 cast of the reward (~1e-8).
    """
    n, horizon = 2, 30
    env = SimEnv(ArmTask(task_name, reward), "cpu", num_envs=n, seed=0)
    arms = [ArmEnv(task_name, reward) for _ in range(n)]
    try:
        arm_obs = np.stack([a.reset(seed=10 + i)[0] for i, a in enumerate(arms)])
        env.reset()
        _copy_state(env, arms)
        obs = env.task.observe(*env.physics.state())
        np.testing.assert_allclose(obs.numpy(), arm_obs, rtol=0, atol=1e-6)

        expert = ScriptedExpert(task_name, n, noise=0.3, seed=0)
        gen = torch.Generator().manual_seed(0)
        alive = np.ones(n, dtype=bool)
        successes = 0
        for t in range(horizon):
            if policy == "expert":
                action = expert.act(torch.from_numpy(arm_obs))
            else:
                action = torch.rand(n, 4, generator=gen) * 2 - 1
            obs, reward, terminated, truncated, info = env.step(action)
            results = [a.step(action[i].numpy()) for i, a in enumerate(arms)]
            arm_obs = np.stack([r[0] for r in results])
            final = info["final_obs"]["state"].numpy()
            for i in np.flatnonzero(alive):
                a_obs, a_reward, a_term, _, a_info = results[i]
                where = f"{task_name}-{reward} {policy}: env {i}, step {t}"
                np.testing.assert_allclose(final[i], a_obs, rtol=0, atol=1e-6, err_msg=where)
                assert reward[i].item() == pytest.approx(a_reward, abs=1e-6), where
                assert bool(terminated[i]) == a_term, where
                assert bool(info["success"][i]) == a_info["success"], where
                assert not bool(truncated[i]), where
                if a_term:
                    alive[i] = False
                    successes += 1
                    # The same step reset the sub-env: a fresh start with zero hand velocity.
                    assert np.all(obs["state"][i, L["ee_vel"]].numpy() == 0.0), where
            if not alive.any():
                break
        # The seeds are such that termination, success and the sparse reward are exercised.
        if policy == "expert":
            assert successes > 0, "the expert solved nothing: the termination path went untested"
    finally:
        env.close()
        for a in arms:
            a.close()


@pytest.mark.parametrize("task_name", ["reach", "push", "pick_place"])
def test_reset_distribution(task_name: str) -> None:
    """Starts follow ArmEnv.reset's rules; the task state agrees with the reset physics state."""
    n = 64
    env = SimEnv(ArmTask(task_name), "cpu", num_envs=n, seed=3)
    try:
        obs = env.reset().get("state")
        task = env.task
        assert isinstance(task, ArmTask)
        assert obs.shape == (n, 29) and obs.dtype == torch.float32
        qpos, qvel = env.physics.state()
        assert torch.all(qvel == 0)
        ee = obs[:, L["ee_pos"]].double()
        assert torch.all(ee >= torch.tensor([0.3, -0.12, 0.1]) - 1e-6)
        assert torch.all(ee <= torch.tensor([0.42, 0.12, 0.2]) + 1e-6)
        torch.testing.assert_close(task.x_des, grip_position(qpos[:, :5]), rtol=0, atol=0)
        torch.testing.assert_close(task.q_cmd, qpos[:, :5], rtol=0, atol=0)
        assert torch.all(obs[:, L["ee_vel"]] == 0)
        torch.testing.assert_close(obs[:, L["gripper"]], torch.full((n, 1), 2 * FINGER_RANGE[1]))
        cube, target = obs[:, L["cube_pos"]].double(), task.target
        torch.testing.assert_close(obs[:, L["target_pos"]], target.float())
        assert torch.all(cube[:, 2] == torch.tensor(CUBE_HALF, dtype=torch.float32).double())
        if task_name == "reach":
            assert torch.all((target - ee).norm(dim=1) >= 0.1 - 1e-6)
            assert torch.all(obs[:, L["cube_quat"]] == torch.tensor([1.0, 0.0, 0.0, 0.0]))
        else:
            assert torch.all((target[:, :2] - cube[:, :2]).norm(dim=1) >= 0.1 - 1e-6)
            yaw = 2 * torch.atan2(obs[:, 13], obs[:, 10])
            assert torch.all(yaw.abs() <= np.pi / 4 + 1e-6) and yaw.std() > 0.1
            heights = target[:, 2]
            if task_name == "push":
                assert torch.all(heights == CUBE_HALF)
            else:
                assert torch.all((heights >= CUBE_HALF + 0.05) & (heights <= CUBE_HALF + 0.2))
        np.testing.assert_array_equal(task.mocap_pos(5), target[5:6].numpy())
    finally:
        env.close()


def test_masked_reset_and_float32() -> None:
    """commit_reset touches only masked envs; the task runs in float32 (the MJX/Warp dtype) as well."""
    model = ArmTask().build_model()
    results = {}
    for dtype in (torch.float64, torch.float32):
        task = ArmTask("pick_place")
        task.setup(model, 4, torch.device("cpu"), dtype)
        rng = CounterRNG(4, torch.device("cpu"))
        rng.seed(0)
        qpos, qvel, ctrl = task.initial_state(rng)
        assert qpos.dtype == qvel.dtype == ctrl.dtype == dtype
        task.commit_reset(torch.ones(4, dtype=torch.bool))
        rng.advance()
        before = {k: getattr(task, k).clone() for k in ("target", "q_cmd", "x_des", "prev_ee", "ee_vel")}
        task.initial_state(rng)
        mask = torch.tensor([True, False, True, False])
        task.commit_reset(mask)
        for k, old in before.items():
            assert torch.equal(getattr(task, k)[~mask], old[~mask]), k
        assert not torch.equal(task.target[mask], before["target"][mask])
        action = torch.tensor([[0.5, -0.3, -1.0, 1.0]], dtype=dtype).expand(4, 4)
        new_ctrl = task.control(action, qpos, qvel)
        reward, terminated, success = task.evaluate(qpos, qpos, qvel, new_ctrl)
        obs = task.observe(qpos, qvel)
        assert new_ctrl.dtype == reward.dtype == dtype and obs.dtype == torch.float32
        assert terminated.dtype == success.dtype == torch.bool
        assert torch.all(new_ctrl[:, 5:] == 0.0)  # action[3] = 1: fingers closed
        results[dtype] = (new_ctrl.double(), obs.double())
    for a, b in zip(results[torch.float64], results[torch.float32], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_registry_names_and_spaces() -> None:
    for name, task_name, limit in (("push", "push", 100), ("reach-sparse", "reach", 50)):
        task = make_task(name)
        assert isinstance(task, ArmTask) and task.name == name and task.time_limit == TIME_LIMITS[task_name]
        assert (
            task.time_limit == limit and task.obs_dim == 29 and task.action_dim == 4 and task.reports_success
        )
    with pytest.raises(ValueError, match="unknown task"):
        ArmTask("stack")
    with pytest.raises(ValueError, match="unknown reward"):
        ArmTask("push", "shaped")
