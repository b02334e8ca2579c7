"""The tabletop arm tasks' definition, ``robot_rl.envs.sim.tasks.arm.ArmTask``, and its gymnasium adapter ``ArmEnv``.

Kinematics and Jacobian against MuJoCo itself (``mj_kinematics``, ``mj_jacSite``), the IK iteration against a
damped-least-squares step written with MuJoCo's own functions, IK convergence, reward and success on hand-built
states, the reset distribution, the ``control_hz`` option, and ``ArmEnv`` against sub-env 0 of a ``SimEnv`` with
the same seed (the adapter adds nothing to the MDP). Expert success rates are in ``tests/envs/test_arm.py``.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.constants import (
    EE0_BOX,
    HAND_QUAT,
    IK_DAMPING,
    IK_MAX_DQ,
    LIFT_MARGIN,
    REACH_MAX,
    REACH_TARGET_BOX,
    STATE_LAYOUT,
    SUCCESS_RADIUS,
    TARGET_XY_BOX,
    TIME_LIMITS,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)
from robot_rl.envs.arm.experts import ScriptedExpert
from robot_rl.envs.arm.model import (
    ARM_JOINTS,
    CUBE_HALF,
    FINGER_RANGE,
    SHOULDER_HEIGHT,
    WRIST_TO_GRIP,
    build_model,
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
    within_reach,
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


def test_analytic_ik_reaches_the_point_pointing_down() -> None:
    """The reset's closed-form IK, checked by MuJoCo's forward kinematics: grip point and hand orientation."""
    m = build_model()
    d = mujoco.MjData(m)
    grip = m.site("grip").id
    points = np.random.default_rng(1).uniform(EE0_BOX[0], EE0_BOX[1], (16, 3))
    points = np.concatenate([points, [[0.3, 0.0, 0.1], [0.5, -0.2, 0.03], [0.2, 0.25, 0.3]]])
    qs = analytic_ik(torch.from_numpy(points)).numpy()
    for point, q in zip(points, qs, strict=True):
        d.qpos[:5] = q
        mujoco.mj_kinematics(m, d)
        np.testing.assert_allclose(d.site_xpos[grip], point, atol=1e-9)
        np.testing.assert_allclose(d.site_xmat[grip].reshape(3, 3), np.diag([-1.0, 1.0, -1.0]), atol=1e-9)


def _reference_ik_step(m: mujoco.MjModel, d: mujoco.MjData, q: np.ndarray, x_des: np.ndarray) -> np.ndarray:
    """One damped-least-squares IK iteration written with MuJoCo's functions (the pre-torch ``ArmEnv._solve_ik``)."""
    grip = m.site("grip").id
    arm_qpos = [m.joint(j).qposadr[0] for j in ARM_JOINTS]
    arm_dof = [m.joint(j).dofadr[0] for j in ARM_JOINTS]
    ranges = m.jnt_range[[m.joint(j).id for j in ARM_JOINTS]]
    d.qpos[arm_qpos] = q
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    cur, neg, err, e = np.empty(4), np.empty(4), np.empty(4), np.empty(6)
    mujoco.mju_mat2Quat(cur, d.site_xmat[grip])
    mujoco.mju_negQuat(neg, cur)
    mujoco.mju_mulQuat(err, np.array(HAND_QUAT), neg)
    if err[0] < 0:
        err *= -1.0
    mujoco.mju_quat2Vel(e[3:], err, 1.0)
    e[:3] = x_des - d.site_xpos[grip]
    jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    mujoco.mj_jacSite(m, d, jacp, jacr, grip)
    jac = np.vstack([jacp, jacr])[:, arm_dof]
    dq = np.linalg.solve(jac.T @ jac + IK_DAMPING**2 * np.eye(5), jac.T @ e)
    dq /= max(1.0, np.max(np.abs(dq)) / IK_MAX_DQ)
    return np.clip(q + dq, ranges[:, 0], ranges[:, 1])


def test_ik_step_matches_mujoco_reference() -> None:
    m = build_model()
    d = mujoco.MjData(m)
    rng = np.random.default_rng(2)
    ranges = m.jnt_range[[m.joint(j).id for j in ARM_JOINTS]]
    low, high = torch.from_numpy(ranges[:, 0]), torch.from_numpy(ranges[:, 1])
    n = 64
    x_des = rng.uniform(WORKSPACE_LOW, WORKSPACE_HIGH, (n, 3))
    # Anywhere in the joint box (large errors: step limit and range clipping), and near the IK's working
    # point (hand about pointing down, small steps: the unclipped least-squares solution).
    near = analytic_ik(torch.from_numpy(rng.uniform(WORKSPACE_LOW, WORKSPACE_HIGH, (n, 3)))).numpy()
    near = np.clip(near + rng.normal(0.0, 0.05, near.shape), ranges[:, 0], ranges[:, 1])
    for q0 in (_joint_samples(m, n, seed=3), near):
        ours = ik_step(torch.from_numpy(q0), torch.from_numpy(x_des), low, high).numpy()
        ref = np.stack([_reference_ik_step(m, d, q0[i], x_des[i]) for i in range(n)])
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)


def test_ik_converges() -> None:
    """Iterated from the start pose, the IK puts the grip point on any workspace target, pointing down."""
    m = build_model()
    ranges = m.jnt_range[[m.joint(j).id for j in ARM_JOINTS]]
    low, high = torch.from_numpy(ranges[:, 0]), torch.from_numpy(ranges[:, 1])
    rng = np.random.default_rng(4)
    n = 32
    start = torch.from_numpy(rng.uniform(EE0_BOX[0], EE0_BOX[1], (n, 3)))
    # The tasks' targets: reach targets in the air, push targets on the table (grip point at the cube centre).
    air = rng.uniform(REACH_TARGET_BOX[0], REACH_TARGET_BOX[1], (n // 2, 3))
    table = np.concatenate(
        [rng.uniform(TARGET_XY_BOX[0], TARGET_XY_BOX[1], (n // 2, 2)), np.full((n // 2, 1), 0.02)], 1
    )
    x_des = torch.from_numpy(np.concatenate([air, table]))
    q = analytic_ik(start)
    for _ in range(40):
        q = ik_step(q, x_des, low, high)
    torch.testing.assert_close(grip_position(q), x_des, rtol=0, atol=1e-4)
    down = torch.tensor([[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]], dtype=torch.float64)
    torch.testing.assert_close(hand_matrix(q), down.expand(n, 3, 3), rtol=0, atol=1e-3)


def _scored(task_name: str, reward: str, ee: list[float], cube: list[float], target: list[float]):
    """``ArmTask.score`` for one hand-built state: grip point ``ee``, cube centre ``cube``, target ``target``."""
    task = ArmTask(task_name, reward)
    model = task.build_model()
    task.setup(model, 1, torch.device("cpu"), torch.float64)
    qpos = task.qpos0[None].clone()
    c = int(model.joint("cube").qposadr[0])
    qpos[0, c : c + 3] = torch.tensor(cube, dtype=torch.float64)
    task.prev_ee = torch.tensor([ee], dtype=torch.float64)
    task.target = torch.tensor([target], dtype=torch.float64)
    reward_t, success = task.score(qpos)
    return float(reward_t[0]), bool(success[0])


def test_reward_and_success_definitions() -> None:
    """Dense rewards are the documented negative distances, sparse is 1.0 on success; success radii and lift."""
    r = SUCCESS_RADIUS
    # reach: the grip point within 3 cm of the target; the cube plays no part.
    assert _scored("reach", "dense", [0.3, 0.0, 0.1], [0.6, 0.4, 0.02], [0.3, 0.04, 0.1]) == (
        pytest.approx(-0.04),
        False,
    )
    inside = [0.3, 0.0, 0.1 + r["reach"] - 1e-4]
    assert _scored("reach", "dense", [0.3, 0.0, 0.1], [0.6, 0.4, 0.02], inside)[1]
    assert _scored("reach", "sparse", [0.3, 0.0, 0.1], [0.3, 0.0, 0.02], [0.3, 0.02, 0.1]) == (1.0, True)
    # push: the cube within 5 cm of the target in the table plane (height ignored); dense adds 0.5 |ee - cube|.
    ee, cube = [0.3, 0.0, 0.1], [0.3, 0.0, 0.02]
    far = np.hypot(0.03, 0.041)  # 5.08 cm
    assert _scored("push", "dense", ee, cube, [0.33, 0.041, 0.02]) == (pytest.approx(-far - 0.04), False)
    near = np.hypot(0.03, 0.039)  # 4.92 cm
    assert _scored("push", "dense", ee, cube, [0.33, 0.039, 0.5]) == (pytest.approx(-near - 0.04), True)
    assert _scored("push", "sparse", ee, cube, [0.33, 0.041, 0.02]) == (0.0, False)
    # pick_place: 3-D distance within 5 cm and the cube lifted by more than LIFT_MARGIN.
    lifted = [0.3, 0.0, 0.02 + LIFT_MARGIN + 1e-3]
    assert _scored("pick_place", "dense", lifted, lifted, [0.3, 0.0, 0.06]) == (pytest.approx(-0.024), True)
    on_table = [0.3, 0.0, 0.02 + LIFT_MARGIN - 1e-3]
    assert _scored("pick_place", "sparse", on_table, on_table, [0.3, 0.0, 0.04]) == (0.0, False)
    assert _scored("pick_place", "sparse", lifted, lifted, [0.3, 0.0, 0.09]) == (0.0, False)  # 5.4 cm away
    assert _scored("pick_place", "dense", [0.3, 0.1, 0.1], lifted, [0.3, 0.0, 0.06]) == (
        pytest.approx(-0.024 - 0.5 * np.linalg.norm([0.0, 0.1, 0.1 - lifted[2]])),
        True,
    )


def test_track_target_circles_and_success_needs_its_velocity() -> None:
    """track: the target moves 15 cm/s counter-clockwise on its circle (radius and height kept); a hand at the
    target but standing still is not a catch, one at the target moving with it is."""
    env = SimEnv(ArmTask("track", "sparse"), "cpu", num_envs=4, seed=0)
    try:
        env.reset()
        task = env.task
        centre = torch.tensor([0.38, 0.0], dtype=torch.float64)
        before = task.target.clone()
        velocity = task.target_velocity()
        env.step(torch.zeros(4, 4))
        after = task.target
        step = after - before
        torch.testing.assert_close(step.norm(dim=1), torch.full((4,), 0.15 * 0.05, dtype=torch.float64), rtol=1e-3,
                                   atol=0)
        # along the tangent: a chord of at most 0.125 rad (radius 6 cm) is off it by at most 0.15 sin(0.0625) m/s
        torch.testing.assert_close(step / 0.05, velocity, rtol=0, atol=0.0095)
        torch.testing.assert_close((after[:, :2] - centre).norm(dim=1), (before[:, :2] - centre).norm(dim=1))
        torch.testing.assert_close(after[:, 2], before[:, 2], rtol=0, atol=0)
        rel = before[:, :2] - centre
        assert torch.all(rel[:, 0] * step[:, 1] - rel[:, 1] * step[:, 0] > 0)  # counter-clockwise
        # Scored at the target: moving with it is a catch, standing still (or moving the wrong way) is not.
        qpos, _ = env.physics.state()
        task.prev_ee = task.target.clone()
        task.ee_vel = task.target_velocity()
        reward, success = task.score(qpos)
        assert torch.all(success) and torch.all(reward == 1.0)
        task.ee_vel = torch.zeros_like(task.ee_vel)
        assert not task.score(qpos)[1].any()
        task.ee_vel = -task.target_velocity()
        assert not task.score(qpos)[1].any()
        task.ee_vel = task.target_velocity() + torch.tensor([0.0, 0.0, 0.045], dtype=torch.float64)  # within 5 cm/s
        assert task.score(qpos)[1].all()
        task.prev_ee = task.target + torch.tensor([0.0, 0.031, 0.0], dtype=torch.float64)  # outside 3 cm
        assert not task.score(qpos)[1].any()
    finally:
        env.close()


CASES = [("reach", "dense"), ("push", "dense"), ("pick_place", "dense"), ("pick_place", "sparse"), ("track", "sparse")]


@pytest.mark.parametrize("policy", ["random", "expert"])
@pytest.mark.parametrize(("task_name", "reward"), CASES)
def test_arm_env_is_sub_env_zero_of_sim_env(task_name: str, reward: str, policy: str) -> None:
    """``ArmEnv`` with seed s runs exactly like sub-env 0 of ``SimEnv(ArmTask)`` with seed s (same stream, same
    physics in float64), until the first termination or 60 steps (reach: 49, within its time limit).

    "random" actions are uniform in [-1, 1]; "expert" actions come from the scripted expert with noise 0.3,
    which pushes, grasps, lifts and solves (termination, success, the sparse reward).
    """
    n = 2
    env = SimEnv(ArmTask(task_name, reward), "cpu", num_envs=n, seed=0)
    arm = ArmEnv(task_name, reward)
    try:
        arm_obs, info = arm.reset(seed=7)
        obs = env.reset(seed=7)["state"]
        np.testing.assert_array_equal(obs[0].numpy(), arm_obs)
        assert info == {"success": False}
        expert = ScriptedExpert(task_name, n, noise=0.3, seed=0)
        gen = torch.Generator().manual_seed(0)
        terminated_once = False
        for t in range(min(60, TIME_LIMITS[task_name] - 1)):  # before SimEnv's time limit
            action = expert.act(obs) if policy == "expert" else torch.rand(n, 4, generator=gen) * 2 - 1
            obs, reward_t, terminated, truncated, info_t = env.step(action)
            arm_obs, arm_reward, arm_term, arm_trunc, arm_info = arm.step(action[0].numpy())
            where = f"{task_name}-{reward} {policy}: step {t}"
            np.testing.assert_array_equal(info_t["final_obs"]["state"][0].numpy(), arm_obs, err_msg=where)
            assert arm_reward == pytest.approx(float(reward_t[0]), abs=1e-6), where
            assert arm_term == bool(terminated[0]) == arm_info["success"] == bool(info_t["success"][0]), where
            assert not arm_trunc and not bool(truncated[0]), where
            if reward == "sparse":
                assert arm_reward == float(arm_term)
            else:
                assert arm_reward < 0
            if arm_term:
                terminated_once = True
                # The same step reset the sub-env: a fresh start with zero hand velocity.
                assert np.all(obs["state"][0, L["ee_vel"]].numpy() == 0.0), where
                break
        if policy == "expert":
            assert terminated_once, "the expert solved nothing: the termination path went untested"
    finally:
        env.close()
        arm.close()


def test_control_hz() -> None:
    """Another control rate: fewer substeps, a proportionally smaller step, the same hand speed."""
    task = ArmTask("reach", control_hz=50.0)
    assert task.frame_skip == 4 and task.control_dt == pytest.approx(0.02)
    assert task.max_delta == pytest.approx(0.025 * 0.02 / 0.05)
    assert ArmTask("reach").frame_skip == 10
    for bad in (0.0, -20.0, 30.0, 300.0):
        with pytest.raises(ValueError, match="control_hz"):
            ArmTask("reach", control_hz=bad)
    speeds = {}
    for hz in (20.0, 50.0):
        arm = ArmEnv("reach", control_hz=hz)
        start, _ = arm.reset(seed=1)
        steps = int(round(0.5 * hz))  # half a second of full speed along x
        for _ in range(steps):
            obs, *_ = arm.step(np.array([1.0, 0.0, 0.0, -1.0]))
        speeds[hz] = (obs[0] - start[0]) / 0.5
        arm.close()
    assert speeds[20.0] > 0.2 and speeds[50.0] == pytest.approx(speeds[20.0], rel=0.1)


@pytest.mark.parametrize("hz", [20.0, 100.0])
def test_the_hand_settles_in_every_corner_of_the_workspace(hz: float) -> None:
    """Driven at full speed into each corner of the workspace box and held there (zero actions), the hand comes to
    rest. The box's far corners are beyond the arm's reach: before ``within_reach`` the IK chased them across the
    straight-arm singularity, its clipped steps flipped the elbow every tick and the hand shook at 1.1-1.5 m/s
    (above the bridge supervisor's 1.3 m/s soft limit at 100 Hz, so a policy that went there latched the e-stop)."""
    arm = ArmEnv("push", control_hz=hz)
    corners = [np.array([x, y, z]) for x in (WORKSPACE_LOW[0], WORKSPACE_HIGH[0])
               for y in (WORKSPACE_LOW[1], WORKSPACE_HIGH[1]) for z in (WORKSPACE_LOW[2], WORKSPACE_HIGH[2])]
    for corner in corners:
        obs, _ = arm.reset(seed=0)
        for _ in range(int(2 * hz)):  # two seconds towards the corner, pushing on once there
            obs, *_ = arm.step(np.r_[np.clip(50 * (corner - obs[L["ee_pos"]]), -1, 1), -1.0])
        ee = [obs[L["ee_pos"]]]
        for _ in range(int(0.5 * hz)):  # then zero actions: the servos keep their targets
            obs, *_ = arm.step(np.array([0.0, 0.0, 0.0, -1.0]))
            ee.append(obs[L["ee_pos"]])
        speed = np.linalg.norm(np.diff(ee, axis=0), axis=1) * hz
        assert speed[int(0.3 * hz):].max() < 0.01, f"hand still moving at {speed.max():.2f} m/s at {corner}"
        assert np.all(obs[L["ee_pos"]] >= WORKSPACE_LOW - 1e-3) and np.all(obs[L["ee_pos"]] <= WORKSPACE_HIGH + 1e-3)
    arm.close()


def test_within_reach_keeps_reachable_points_and_the_height() -> None:
    inside = torch.tensor([[0.45, 0.15, 0.02], [0.5, 0.2, 0.25], [0.15, -0.28, 0.32]], dtype=torch.float64)
    torch.testing.assert_close(within_reach(inside), inside, rtol=0, atol=0)  # every task box is within reach
    far = torch.tensor([[0.6, 0.28, 0.32], [0.6, 0.2, 0.018]], dtype=torch.float64)
    moved = within_reach(far)
    torch.testing.assert_close(moved[:, 2], far[:, 2], rtol=0, atol=0)
    wrist = torch.cat([moved[:, :2], moved[:, 2:] + WRIST_TO_GRIP - SHOULDER_HEIGHT], dim=1)
    torch.testing.assert_close(wrist.norm(dim=1), torch.full((2,), REACH_MAX, dtype=torch.float64))
    torch.testing.assert_close(moved[:, 1] / moved[:, 0], far[:, 1] / far[:, 0])  # towards the base, same bearing


def test_reset_position_and_hold() -> None:
    """``ArmEnv.reset_position`` previews a reset without using the stream; ``hold`` freezes the servo targets."""
    arm = ArmEnv("push")
    np.testing.assert_allclose(arm.reset_position(3), arm.reset(seed=3)[0][L["ee_pos"]], atol=1e-6)
    preview = arm.reset_position()
    np.testing.assert_allclose(arm.reset_position(), preview, rtol=0, atol=0)  # the stream did not move
    first, _ = arm.reset()
    np.testing.assert_allclose(preview, first[L["ee_pos"]], atol=1e-6)
    for _ in range(3):
        arm.step(np.array([1.0, 0.0, 0.0, 0.0]))
    arm.hold()
    qpos = arm.physics.state()[0]
    torch.testing.assert_close(arm.arm_task.q_cmd, qpos[:, :5], rtol=0, atol=0)
    torch.testing.assert_close(arm.arm_task.x_des, grip_position(qpos[:, :5]), rtol=0, atol=0)
    # The data view is the physics state, with the target marker placed.
    np.testing.assert_allclose(
        arm.data.site_xpos[arm.model.site("grip").id], arm.arm_task.x_des[0].numpy(), atol=1e-12
    )
    np.testing.assert_allclose(arm.data.mocap_pos[0], arm.arm_task.target[0].numpy())
    arm.close()


@pytest.mark.parametrize("task_name", ["reach", "push", "pick_place", "track"])
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
        elif task_name == "track":  # on its circle: radius 6..12 cm about (0.38, 0), height 8..20 cm, any phase
            rel = target[:, :2] - torch.tensor([0.38, 0.0], dtype=target.dtype)
            assert torch.all((rel.norm(dim=1) >= 0.06 - 1e-9) & (rel.norm(dim=1) <= 0.12 + 1e-9))
            assert torch.all((target[:, 2] >= 0.08) & (target[:, 2] <= 0.2))
            phase = torch.atan2(rel[:, 1], rel[:, 0])
            assert (phase > 0).any() and (phase < 0).any() and phase.std() > 1.0
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


def _mirror_physics(qpos: torch.Tensor, qvel: torch.Tensor, model: mujoco.MjModel
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The physics state reflected in y = 0, written from the scene (not from ``ArmTask.reflection``): the yaw
    joints j1 and j5 change sign (a reflection turns a rotation about z the other way and keeps one about y), the
    fingers swap, the cube's y, its quaternion's x and z, its linear y velocity and its angular x and z change
    sign."""
    qpos, qvel = qpos.clone(), qvel.clone()
    for name in ("j1", "j5"):
        qpos[..., int(model.joint(name).qposadr[0])] *= -1
        qvel[..., int(model.joint(name).dofadr[0])] *= -1
    for x, adr in ((qpos, "qposadr"), (qvel, "dofadr")):
        left, right = int(getattr(model.joint("finger_l"), adr)[0]), int(getattr(model.joint("finger_r"), adr)[0])
        x[..., [left, right]] = x[..., [right, left]]
    c, cd = int(model.joint("cube").qposadr[0]), int(model.joint("cube").dofadr[0])
    qpos[..., [c + 1, c + 4, c + 6]] *= -1  # position y; quaternion (w, x, y, z) -> (w, -x, y, -z)
    qvel[..., [cd + 1, cd + 3, cd + 5]] *= -1  # linear y; angular velocity is a pseudovector: x and z
    return qpos, qvel


def test_a_flipped_camera_frame_is_the_reflected_scene() -> None:
    """The -pixels reflection flips frames left to right (``MIRROR_CAMERAS``); that is right only if the cameras lie
    in the plane y = 0 and the scene is symmetric. Render the reflected scene of random push states and compare it
    with the env's frames flipped: equal up to rasterisation (the table's checks and the light were asymmetric
    before, 8-10 grey levels apart on average), while the unflipped frames differ."""
    env = ArmEnv("push", "sparse", pixels=True, pixel_size=(48, 48))
    renderer = mujoco.Renderer(env.model, 48, 48)
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0  # as the env's observations
    try:
        rng = np.random.default_rng(0)
        flipped_gap, unflipped_gap = [], []
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            for _ in range(8):
                obs, *_ = env.step(rng.uniform(-1, 1, 4))
            mirrored = mujoco.MjData(env.model)
            q, v = _mirror_physics(torch.from_numpy(env.data.qpos.copy()), torch.from_numpy(env.data.qvel.copy()),
                                   env.model)
            mirrored.qpos[:], mirrored.qvel[:] = q.numpy(), v.numpy()
            mirrored.mocap_pos[:] = env.data.mocap_pos * np.array([1.0, -1.0, 1.0])
            mujoco.mj_forward(env.model, mirrored)
            for camera in ("front", "wrist"):
                renderer.update_scene(mirrored, camera=camera)
                reflected = renderer.render().astype(np.float64)
                frame = obs[f"pixels/{camera}"].astype(np.float64)
                flipped_gap.append(np.abs(frame[:, ::-1] - reflected).mean())
                unflipped_gap.append(np.abs(frame - reflected).mean())
        assert max(flipped_gap) < 1.5, flipped_gap
        assert np.mean(unflipped_gap) > 3 * np.mean(flipped_gap), (unflipped_gap, flipped_gap)
    finally:
        renderer.close()
        env.close()


@pytest.mark.parametrize("task_name", ["push", "pick_place"])
def test_reflection_is_a_symmetry_of_the_task(task_name: str) -> None:
    """``ArmTask.reflection`` (what ``data.mirror=true`` trusts): sub-env 1 starts as the mirror image of sub-env 0
    (the physics reflected joint by joint, the task's target and commands reflected), then follows the mirrored
    actions of the scripted expert that sub-env 0 follows while it pushes or lifts the cube to the target. Every
    observation of sub-env 1 is sub-env 0's times the declared signs, with the same rewards and the same success
    step.
    reach declares no reflection (its parked cube sits at +y)."""
    assert ArmTask("reach").reflection() is None
    env = SimEnv(ArmTask(task_name, "sparse"), "cpu", num_envs=2, seed=0)
    try:
        state_sign, action_sign = (torch.as_tensor(s) for s in env.task.reflection())
        assert env.reflection() is not None and torch.equal(env.reflection().state, state_sign)
        obs = env.reset(seed=11)["state"]
        task, model = env.task, env._model
        qpos, qvel = env.physics.state()
        mirrored_q, mirrored_v = _mirror_physics(qpos[0], qvel[0], model)
        qpos, qvel = qpos.clone(), qvel.clone()
        qpos[1], qvel[1] = mirrored_q, mirrored_v
        y = torch.tensor([1.0, -1.0, 1.0], dtype=qpos.dtype)
        for name in ("target", "x_des", "prev_ee", "ee_vel"):
            value = getattr(task, name).clone()
            value[1] = value[0] * y
            setattr(task, name, value)
        task.q_cmd = task.q_cmd.clone()
        task.q_cmd[1] = task.q_cmd[0] * torch.tensor([-1.0, 1.0, 1.0, 1.0, -1.0], dtype=qpos.dtype)
        ctrl = task._ctrl(task.q_cmd, torch.full_like(task.q_cmd[:, 0], FINGER_RANGE[1]))
        env.physics.reset(torch.tensor([False, True]), qpos, qvel, ctrl)
        obs = task.observe(*env.physics.state())
        torch.testing.assert_close(obs[1], obs[0] * state_sign, rtol=0, atol=1e-6)
        expert = ScriptedExpert(task_name, 1, noise=0.0, seed=0)
        for t in range(TIME_LIMITS[task_name] - 1):
            a = expert.act(obs[:1])[0]
            next_obs, reward, terminated, _, info = env.step(torch.stack([a, a * action_sign]))
            obs = next_obs["state"]
            last = info["final_obs"]["state"]
            torch.testing.assert_close(last[1], last[0] * state_sign, rtol=0, atol=1e-6, msg=f"step {t}")
            assert reward[1] == reward[0] and terminated[1] == terminated[0], f"step {t}"
            if terminated[0]:
                break
        assert bool(terminated[0]), "the expert did not solve the episode: the contact phase went untested"
    finally:
        env.close()


def test_a_pixel_env_drawn_on_another_thread_closes_without_error_and_leaves_the_others_intact() -> None:
    """An EGL context stays current on the thread that drew last, so closing an env made and used on another thread
    (the simulated robot driver's GL thread; an env collected on whichever thread runs the collector) failed in
    eglMakeCurrent with EGL_BAD_ACCESS: `close` raised and `__del__` printed the error. Now the closing thread lets go
    of its own context instead, and the env still in use here draws the same frames."""
    from concurrent.futures import ThreadPoolExecutor

    live = ArmEnv("push", "sparse", pixels=True, pixel_size=(32, 32))
    pool = ThreadPoolExecutor(1)
    try:
        before = live.reset(seed=3)[0]["pixels/front"]
        other = pool.submit(ArmEnv, "push", "sparse", pixels=True, pixel_size=(32, 32)).result()
        pool.submit(other.reset, seed=1).result()
        other.close()  # on this thread, while the worker still has the context current
        assert other._pixel_renderer is None
        np.testing.assert_array_equal(live.reset(seed=3)[0]["pixels/front"], before)
    finally:
        pool.shutdown()
        live.close()


def test_a_camera_env_left_open_at_exit_closes_quietly() -> None:
    """mujoco.egl terminates its display from an atexit hook, and an env nobody closed had its renderers freed
    after it, during interpreter teardown: three EGL tracebacks on stderr at the end of a user's script.
    `envs/sim/render.open_renderer` closes the still-open renderers from a hook that runs first."""
    import os
    import subprocess
    import sys

    script = ("from robot_rl.envs.arm import ArmEnv\n"
              "env = ArmEnv('push', 'sparse', pixels=True, pixel_size=(32, 32), render_mode='rgb_array', "
              "render_size=(32, 32))\n"
              "env.reset(seed=0); env.render()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "EGLError" not in done.stderr, done.stderr


def test_closing_or_dropping_a_pixel_env_leaves_the_other_envs_frames_intact() -> None:
    """mujoco's `Renderer.close` freed its render context under whichever GL context was current: closing (or
    garbage-collecting) one camera env made another live one return frames from the wrong camera, upside down
    (179 grey levels off on 92% of the pixels) with no error. `envs/sim/render.close_renderer` makes the closing
    renderer's own context current first."""
    import gc

    from robot_rl.envs.core import EnvOptions

    def frames(env: ArmEnv) -> np.ndarray:
        obs, _ = env.reset(seed=3)
        return np.concatenate([obs["pixels/front"], obs["pixels/wrist"]], axis=1)

    live = ArmEnv("push", "sparse", pixels=True, pixel_size=(32, 32))
    try:
        before = frames(live)
        closed = ArmEnv("push", "sparse", pixels=True, pixel_size=(32, 32))
        frames(closed)
        frames(live)  # the live env drew last: its context is current when the other closes
        closed.close()
        np.testing.assert_array_equal(frames(live), before)
        dropped = ArmEnv("push", "sparse", pixels=True, pixel_size=(48, 48))
        frames(dropped)
        frames(live)
        del dropped
        gc.collect()
        np.testing.assert_array_equal(frames(live), before)
        batched = SimEnv(ArmTask("push", "sparse"), "cpu", num_envs=1, seed=0,
                         options=EnvOptions(render=True, render_size=(32, 32)))
        batched.reset()
        batched.render()
        frames(live)
        batched.close()
        np.testing.assert_array_equal(frames(live), before)
    finally:
        live.close()


def test_the_cube_orientation_is_observed_up_to_the_cubes_symmetry() -> None:
    """A cube turned by any of its 24 symmetries looks the same, and the observation says so: the smallest rotation
    among them, w >= 0. The reset's own orientations (flat, |yaw| <= 45 deg) are observed as they are; a cube pushed
    past 45 deg or onto another face is observed as one the resets draw (practice started outside them, and a
    policy trained from resets solved 17% of practice starts)."""
    import math

    from robot_rl.envs.sim.tasks.arm import _CUBE_SYMMETRIES, _quat_product_matrix, canonical_cube_quat

    def yaw(deg: float) -> torch.Tensor:
        half = math.radians(deg) / 2
        return torch.tensor([[math.cos(half), 0.0, 0.0, math.sin(half)]], dtype=torch.float64)

    for deg in (-44.9, -20.0, 0.0, 33.0, 44.9):  # (at exactly 45 deg, -45 and 45 are the same cube)
        torch.testing.assert_close(canonical_cube_quat(yaw(deg)), yaw(deg))
    torch.testing.assert_close(canonical_cube_quat(yaw(60.0)), yaw(-30.0))
    on_its_side = _quat_product_matrix(yaw(20.0)) @ torch.tensor([[math.sqrt(0.5)], [math.sqrt(0.5)], [0.0], [0.0]],
                                                                  dtype=torch.float64)
    torch.testing.assert_close(canonical_cube_quat(on_its_side[..., 0]), yaw(20.0))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(500, 4, generator=gen, dtype=torch.float64)
    q = q / q.norm(dim=1, keepdim=True)
    turned = (_quat_product_matrix(q) @ _CUBE_SYMMETRIES[torch.randint(0, 48, (500,), generator=gen)][..., None])[..., 0]
    torch.testing.assert_close(canonical_cube_quat(turned), canonical_cube_quat(q))
    assert bool((canonical_cube_quat(q)[:, 0] >= math.cos(math.radians(62.8) / 2)).all())  # at most 62.8 deg
