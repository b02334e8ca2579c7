"""The tabletop arm tasks (reach, push, pick_place) of ``robot_rl.envs.arm`` in torch, batched, for every physics backend.

``robot_rl.envs.arm.tasks.ArmEnv`` is the reference: one numpy/gymnasium env that reads everything it needs from a
``mujoco.MjData`` (``site_xpos``, ``site_xmat``, ``mj_jacSite``) and keeps its controller state in numpy. The
sim backends only expose ``qpos``/``qvel`` and accept ``ctrl``, so this port computes the same quantities from
``qpos`` in torch:

* forward kinematics of the ``grip`` site and the hand orientation in closed form (base yaw ``j1`` about z,
  three pitch joints ``j2..j4`` about the rotated y axis, wrist roll ``j5`` about the hand's z), using the arm
  dimensions of ``robot_rl.envs.arm.model``; ``tests/envs/sim/test_arm_task.py`` checks it against ``mj_kinematics``;
* the Jacobian analytically (a revolute joint with world axis w through anchor p contributes
  ``jacp = w x (site - p)``, ``jacr = w``, which is what ``mj_jacSite`` returns);
* ``ArmEnv``'s per-step controller: the desired grip point moved by the action, clipped to the workspace and
  to ``_MAX_LEAD`` from the measured grip point, then ONE damped-least-squares IK iteration from the previously
  commanded joints (6-D error: position plus the orientation error that ``ArmEnv._solve_ik`` builds with
  ``mju_mat2Quat``/``mju_negQuat``/``mju_mulQuat``/``mju_quat2Vel``), the step clipped to ``_IK_MAX_DQ`` and to
  the joint ranges; the hand quaternion is composed directly as ``qz(j1) qy(j2+j3+j4) qz(j5)`` instead of being
  recovered from the rotation matrix, which is the same rotation (the error quaternion is sign-normalised, so
  the sign convention of ``mju_mat2Quat`` does not matter);
* reset, observation (``STATE_LAYOUT``, 29-D), dense and sparse rewards, success and termination on success.

Shared with ``robot_rl.envs.arm`` (imported, not copied): the MJCF (``build_xml``), geometry and finger range, the
time limits, workspace, action scale, success radii, lift margin, IK damping and step limit, the hand
orientation, the parked cube position and the closed-form reset IK's arm dimensions. Only the reset sampling
boxes are literals in ``ArmEnv.reset`` and are repeated here (``_EE0_BOX`` etc.).

Differences from ``ArmEnv`` (the MDP is the same; ``tests/envs/sim/test_arm_task.py`` runs both step for step
from the same state): random numbers come from the env's ``CounterRNG`` rather than numpy's stream, and the
"target at least 10 cm away" rejection sampling draws ``_CANDIDATES`` = 16 candidates at once per env and takes
the first that is far enough, else the farthest one (``ArmEnv`` tries up to 100 times in sequence; with
16 candidates the fallback has probability below 1e-6 per reset for every task, and the accepted target is
uniform over the valid region either way). Only ``ArmEnv``'s default 20 Hz control rate is ported
(``control_hz`` is a hardware-bridge option).

Everything is batched over the N envs, in the physics' dtype on its device (float64 on CPU MuJoCo, float32 on
MJX and Warp), with no per-env Python and no host synchronisation in reset, control, evaluate or observe:
fixed-shape draws, ``torch.where`` for choices, ``solve_ex`` for the IK's 5x5 systems, constants built once in
``setup`` (a tensor made from host data in the step would cost a copy and a sync on a GPU).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import torch
from robot_rl.envs.arm.model import (
    ARM_JOINTS,
    CUBE_HALF,
    FINGER_JOINTS,
    FINGER_RANGE,
    FOREARM,
    SHOULDER_HEIGHT,
    UPPER_ARM,
    WRIST_TO_GRIP,
    build_xml,
)
from robot_rl.envs.arm.tasks import (
    _CUBE_PARKED,
    _HAND_QUAT,
    _IK_DAMPING,
    _IK_MAX_DQ,
    _MAX_LEAD,
    CONTROL_DT,
    LIFT_MARGIN,
    MAX_DELTA,
    N_SUBSTEPS,
    REWARDS,
    STATE_DIM,
    STATE_LAYOUT,
    SUCCESS_RADIUS,
    TASKS,
    TIME_LIMITS,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)

from ..rng import ResetRNG
from ..task import SimTask

# Sampling boxes of ArmEnv.reset (literals there).
_EE0_BOX = ((0.3, -0.12, 0.1), (0.42, 0.12, 0.2))
_REACH_TARGET_BOX = ((0.25, -0.2, 0.06), (0.5, 0.2, 0.25))
_CUBE_XY_BOX = ((0.28, -0.15), (0.45, 0.15))
_TARGET_XY_BOX = ((0.27, -0.18), (0.48, 0.18))
_MAX_YAW = math.pi / 4
_PICK_HEIGHT = (CUBE_HALF + 0.05, CUBE_HALF + 0.2)
_MIN_TARGET_DIST = 0.1
_CANDIDATES = 16  # targets drawn at once per reset for the "at least 10 cm away" rule
_HAND_Q = tuple(float(v) for v in _HAND_QUAT)
_QUAT_MINVAL = 1e-15  # mjMINVAL, below which mju_quat2Vel's axis normalisation gives up
_OBS_PARTS = (  # ArmTask.observe concatenates these, in this order
    ("ee_pos", 3),
    ("ee_vel", 3),
    ("gripper", 1),
    ("cube_pos", 3),
    ("cube_quat", 4),
    ("cube_vel", 3),
    ("cube_rel_ee", 3),
    ("target_pos", 3),
    ("target_rel_cube", 3),
    ("target_rel_ee", 3),
)


def _check_layout() -> None:
    """``observe`` hard-codes the layout for speed; fail at import if ``robot_rl.envs.arm``'s layout ever changes."""
    start = 0
    for name, size in _OBS_PARTS:
        assert STATE_LAYOUT[name] == slice(start, start + size), f"STATE_LAYOUT changed at {name!r}"
        start += size
    assert start == STATE_DIM and len(STATE_LAYOUT) == len(_OBS_PARTS), "STATE_LAYOUT changed"


_check_layout()


# ---------------------------------------------------------------------------------------------- kinematics
def _quat_mul(a: tuple[torch.Tensor | float, ...], b: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Hamilton product on (w, x, y, z) component tuples (``mju_mulQuat``); entries may be tensors or floats."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return (
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    )


def _chain(q: torch.Tensor) -> dict[str, torch.Tensor]:
    """Everything the controller needs from the joint angles ``q [..., 5]`` (world frame).

    The pitch joints keep the arm in the vertical plane at yaw ``j1``; in that plane a link of length L after
    accumulated pitch ``a`` adds ``L (sin a, cos a)`` to (radial distance, height). The j2 axis is
    ``SHOULDER_HEIGHT`` above the table (link1 at 0.04 plus link2 at 0.08 in the MJCF); the grip site is
    ``WRIST_TO_GRIP`` past j4 along the hand's z (hand at 0.05, site at 0.1).
    """
    q1, q2, q3, q4, q5 = q.unbind(-1)
    a3 = q2 + q3
    a4 = a3 + q4
    c1, s1 = torch.cos(q1), torch.sin(q1)
    sa4, ca4 = torch.sin(a4), torch.cos(a4)
    zero = torch.zeros_like(q1)

    def world(radial: torch.Tensor, height: torch.Tensor) -> torch.Tensor:
        return torch.stack([radial * c1, radial * s1, height], dim=-1)

    r3, z3 = UPPER_ARM * torch.sin(q2), SHOULDER_HEIGHT + UPPER_ARM * torch.cos(q2)  # j3 anchor
    r4, z4 = r3 + FOREARM * torch.sin(a3), z3 + FOREARM * torch.cos(a3)  # j4 anchor
    grip = world(r4 + WRIST_TO_GRIP * sa4, z4 + WRIST_TO_GRIP * ca4)
    # Hand orientation qz(q1) * qy(a4) * qz(q5), as a quaternion and as a matrix Rz(q1) Ry(a4) Rz(q5).
    h1, h4, h5 = q1 / 2, a4 / 2, q5 / 2
    qz1 = (torch.cos(h1), zero, zero, torch.sin(h1))
    qy4 = (torch.cos(h4), zero, torch.sin(h4), zero)
    qz5 = (torch.cos(h5), zero, zero, torch.sin(h5))
    quat = torch.stack(_quat_mul(_quat_mul(qz1, qy4), qz5), dim=-1)
    return {
        "grip": grip,
        "quat": quat,
        "anchors": torch.stack(
            [
                torch.stack([zero, zero, zero + SHOULDER_HEIGHT], dim=-1),  # j2 (j1's only matters in xy: 0)
                world(r3, z3),
                world(r4, z4),
            ],
            dim=-2,
        ),
        "pitch_axis": torch.stack([-s1, c1, zero], dim=-1),  # Rz(q1) y: the axis of j2, j3 and j4
        "roll_axis": world(sa4, ca4),  # hand z: the axis of j5
        "angles": torch.stack([c1, s1, sa4, ca4, torch.cos(q5), torch.sin(q5)], dim=-1),
    }


def grip_position(q: torch.Tensor) -> torch.Tensor:
    """World position ``[..., 3]`` of the ``grip`` site for arm joint angles ``q [..., 5]`` (j1..j5)."""
    return _chain(q)["grip"]


def hand_quat(q: torch.Tensor) -> torch.Tensor:
    """Hand orientation ``[..., 4]`` (w, x, y, z), equal up to sign to ``mju_mat2Quat`` of the site's xmat."""
    return _chain(q)["quat"]


def hand_matrix(q: torch.Tensor) -> torch.Tensor:
    """Hand (and ``grip`` site) rotation matrix ``[..., 3, 3]``: ``Rz(j1) Ry(j2 + j3 + j4) Rz(j5)``."""
    c1, s1, sa, ca, c5, s5 = _chain(q)["angles"].unbind(-1)
    # Rz(q1) Ry(a): rows [c1 ca, -s1, c1 sa], [s1 ca, c1, s1 sa], [-sa, 0, ca]; then times Rz(q5).
    m = torch.stack(
        [
            torch.stack([c1 * ca * c5 - s1 * s5, -c1 * ca * s5 - s1 * c5, c1 * sa], dim=-1),
            torch.stack([s1 * ca * c5 + c1 * s5, -s1 * ca * s5 + c1 * c5, s1 * sa], dim=-1),
            torch.stack([-sa * c5, sa * s5, ca], dim=-1),
        ],
        dim=-2,
    )
    return m


def _orientation_error(quat: torch.Tensor) -> torch.Tensor:
    """``ArmEnv._solve_ik``'s rotation error ``[..., 3]``: quat2Vel(sign-fixed HAND_QUAT * conj(cur), 1)."""
    w, x, y, z = quat.unbind(-1)
    err = torch.stack(_quat_mul(_HAND_Q, (w, -x, -y, -z)), dim=-1)
    err = torch.where(err[..., :1] < 0, -err, err)
    axis = err[..., 1:]
    sin_half = torch.linalg.vector_norm(axis, dim=-1, keepdim=True)
    speed = 2.0 * torch.atan2(sin_half, err[..., :1])
    speed = torch.where(speed > math.pi, speed - 2.0 * math.pi, speed)
    # mju_normalize3 replaces a (near-)zero axis by x; the speed is then ~0 as well, so the result is ~0.
    factor = torch.where(sin_half < _QUAT_MINVAL, 0.0, speed / sin_half.clamp_min(_QUAT_MINVAL))
    return axis * factor


def jacobian(q: torch.Tensor) -> torch.Tensor:
    """``mj_jacSite`` of the grip site over the arm dofs: ``[..., 6, 5]`` (rows 0:3 translation, 3:6 rotation)."""
    return _jacobian(_chain(q))


def _jacobian(ch: dict[str, torch.Tensor]) -> torch.Tensor:
    grip, anchors = ch["grip"], ch["anchors"]
    pitch, roll = ch["pitch_axis"], ch["roll_axis"]
    z = torch.zeros_like(grip)
    z[..., 2] = 1.0
    # j1: z x (site - anchor) = (-y, x, 0); the anchor is on the z axis.
    jp1 = torch.stack([-grip[..., 1], grip[..., 0], torch.zeros_like(grip[..., 0])], dim=-1)
    jp_pitch = torch.linalg.cross(pitch.unsqueeze(-2).expand_as(anchors), grip.unsqueeze(-2) - anchors)
    jp5 = torch.zeros_like(grip)  # the grip site lies on j5's axis
    jacp = torch.cat([jp1.unsqueeze(-2), jp_pitch, jp5.unsqueeze(-2)], dim=-2)  # [..., 5, 3]
    jacr = torch.stack([z, pitch, pitch, pitch, roll], dim=-2)
    return torch.cat([jacp, jacr], dim=-1).transpose(-1, -2)


def ik_step(q: torch.Tensor, x_des: torch.Tensor, q_low: torch.Tensor, q_high: torch.Tensor) -> torch.Tensor:
    """One iteration of ``ArmEnv._solve_ik`` for a batch: joints ``[N, 5]`` towards grip point ``x_des``.

    Damped least squares on the 6-D error (position, and hand pointing down with the fixed yaw), the step
    scaled so no joint moves more than ``_IK_MAX_DQ``, then clipped to the joint range ``[q_low, q_high]``.
    ``solve_ex`` rather than ``solve``: it does not check the factorisation on the host (the system is
    positive definite anyway thanks to the damping), so the control step stays free of device syncs.
    """
    ch = _chain(q)
    e = torch.cat([x_des - ch["grip"], _orientation_error(ch["quat"])], dim=-1)
    jac = _jacobian(ch)
    jt = jac.transpose(-1, -2)
    eye = torch.eye(q.shape[-1], dtype=q.dtype, device=q.device)
    dq, _ = torch.linalg.solve_ex(jt @ jac + _IK_DAMPING**2 * eye, (jt @ e.unsqueeze(-1)))
    dq = dq.squeeze(-1)
    scale = dq.abs().amax(dim=-1, keepdim=True) / _IK_MAX_DQ
    dq = dq / scale.clamp_min(1.0)
    return torch.clamp(q + dq, q_low, q_high)


def analytic_ik(grip: torch.Tensor) -> torch.Tensor:
    """``robot_rl.envs.arm.tasks._analytic_ik`` batched: elbow-up joints ``[..., 5]`` for grip points ``[..., 3]``."""
    x, y, z = grip.unbind(-1)
    yaw = torch.atan2(y, x)
    reach = torch.hypot(x, y)
    height = z + WRIST_TO_GRIP - SHOULDER_HEIGHT
    dist2 = reach**2 + height**2
    cos_elbow = (dist2 - UPPER_ARM**2 - FOREARM**2) / (2 * UPPER_ARM * FOREARM)
    elbow = torch.arccos(cos_elbow.clamp(-1.0, 1.0))
    shoulder = torch.atan2(reach, height) - torch.atan2(
        FOREARM * torch.sin(elbow), UPPER_ARM + FOREARM * torch.cos(elbow)
    )
    return torch.stack([yaw, shoulder, elbow, math.pi - shoulder - elbow, yaw], dim=-1)


# ------------------------------------------------------------------------------------------------- the task
class ArmTask(SimTask):
    """One arm task, ``task`` in ``TASKS`` and ``reward`` in ``REWARDS``; see the module docstring."""

    frame_skip = N_SUBSTEPS
    obs_dim = STATE_DIM
    action_dim = 4
    reports_success = True
    # Measured on CPU MuJoCo: up to 12 contacts and 72 constraint rows with random actions (pyramidal cones,
    # condim 4: 6 rows per contact); a grasp adds more. Room for four times that.
    contact_capacity = (48, 320)

    def __init__(self, task: str = "push", reward: str = "dense") -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of {REWARDS}")
        self.task, self.reward_type = task, reward
        self.name = task if reward == "dense" else f"{task}-{reward}"
        self.time_limit = TIME_LIMITS[task]

    def build_model(self) -> mujoco.MjModel:
        # A fresh model, not envs.arm.model.build_model()'s cached one: SimEnv resizes the render buffers.
        return mujoco.MjModel.from_xml_string(build_xml())

    def setup(self, model: mujoco.MjModel, num_envs: int, device: torch.device, dtype: torch.dtype) -> None:
        super().setup(model, num_envs, device, dtype)
        arm_qpos = [int(model.joint(j).qposadr[0]) for j in ARM_JOINTS]
        finger_qpos = [int(model.joint(j).qposadr[0]) for j in FINGER_JOINTS]
        for adr in (arm_qpos, finger_qpos):  # slices keep indexing free of index tensors
            assert adr == list(range(adr[0], adr[0] + len(adr))), "joint addresses must be contiguous"
        self._arm = slice(arm_qpos[0], arm_qpos[-1] + 1)
        self._fingers = slice(finger_qpos[0], finger_qpos[-1] + 1)
        c, cd = int(model.joint("cube").qposadr[0]), int(model.joint("cube").dofadr[0])
        self._cube_pos, self._cube_quat = slice(c, c + 3), slice(c + 3, c + 7)
        self._cube_vel = slice(cd, cd + 3)  # free joint qvel: linear (world frame) then angular
        # ctrl = cat([q_cmd, finger, finger])[:, perm] puts every value at its actuator's id.
        act_ids = [int(model.actuator(j).id) for j in (*ARM_JOINTS, *FINGER_JOINTS)]
        assert sorted(act_ids) == list(range(model.nu)), "every actuator must be an arm or finger servo"
        self._ctrl_perm = torch.as_tensor(np.argsort(act_ids), dtype=torch.long, device=device)

        def const(x: object, dt: torch.dtype = dtype) -> torch.Tensor:
            return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=dt, device=device)

        ranges = model.jnt_range[[model.joint(j).id for j in ARM_JOINTS]]
        self._q_low, self._q_high = const(ranges[:, 0]), const(ranges[:, 1])
        self._ws_low, self._ws_high = const(WORKSPACE_LOW), const(WORKSPACE_HIGH)
        # Reset draws are float64 (CounterRNG's); the boxes stay float64 until the state is built.
        f64 = torch.float64
        self._boxes = {
            "ee0": (const(_EE0_BOX[0], f64), const(_EE0_BOX[1], f64)),
            "reach_target": (const(_REACH_TARGET_BOX[0], f64), const(_REACH_TARGET_BOX[1], f64)),
            "cube_xy": (const(_CUBE_XY_BOX[0], f64), const(_CUBE_XY_BOX[1], f64)),
            "target_xy": (const(_TARGET_XY_BOX[0], f64), const(_TARGET_XY_BOX[1], f64)),
        }
        self._parked = const(_CUBE_PARKED, f64)

        n = num_envs
        z3 = torch.zeros(n, 3, dtype=dtype, device=device)
        self.target, self.x_des, self.prev_ee, self.ee_vel = z3.clone(), z3.clone(), z3.clone(), z3.clone()
        self.q_cmd = self.qpos0[self._arm].expand(n, -1).clone()
        self._pending: dict[str, torch.Tensor] | None = None

    # -- reset ------------------------------------------------------------------------------------------------
    def _uniform(self, rng: ResetRNG, box: str, lead: tuple[int, ...] = ()) -> torch.Tensor:
        low, high = self._boxes[box]
        return low + (high - low) * rng.uniform((*lead, low.shape[0]))

    def _sample_far(self, rng: ResetRNG, box: str, avoid: torch.Tensor) -> torch.Tensor:
        """Per env, a point of ``box`` at least ``_MIN_TARGET_DIST`` from ``avoid [N, D]``.

        ``_CANDIDATES`` candidates at once: the first far enough, else the farthest (``ArmEnv``'s
        ``_sample_far`` draws up to 100 in sequence with the same fallback); no data-dependent control flow.
        """
        cand = self._uniform(rng, box, (_CANDIDATES,))  # [N, K, D]
        dist = torch.linalg.vector_norm(cand - avoid[:, None, :], dim=-1)  # [N, K]
        ok = dist >= _MIN_TARGET_DIST
        first_ok = torch.argmax(ok.to(torch.int8), dim=1)  # argmax returns the first maximal index
        idx = torch.where(ok.any(dim=1), first_ok, torch.argmax(dist, dim=1))
        return torch.gather(cand, 1, idx[:, None, None].expand(-1, 1, cand.shape[-1])).squeeze(1)

    def initial_state(self, rng: ResetRNG) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, dtype = self.num_envs, self.dtype
        ee0 = self._uniform(rng, "ee0")
        if self.task == "reach":
            cube_xy = self._parked[:2].expand(n, 2)
            yaw = torch.zeros(n, dtype=torch.float64, device=self.device)
            target = self._sample_far(rng, "reach_target", ee0)
        else:
            cube_xy = self._uniform(rng, "cube_xy")
            yaw = rng.uniform((), -_MAX_YAW, _MAX_YAW)
            xy = self._sample_far(rng, "target_xy", cube_xy)
            if self.task == "push":
                height = torch.full_like(xy[:, :1], CUBE_HALF)
            else:
                height = rng.uniform((1,), *_PICK_HEIGHT)
            target = torch.cat([xy, height], dim=1)

        q = analytic_ik(ee0).to(dtype)
        qpos = self.qpos0.expand(n, -1).clone()
        qpos[:, self._arm] = q
        qpos[:, self._fingers] = FINGER_RANGE[1]
        half, zeros = (yaw / 2)[:, None], torch.zeros_like(cube_xy[:, :1])
        cube_pos = torch.cat([cube_xy, zeros + CUBE_HALF], dim=1)
        cube_quat = torch.cat([torch.cos(half), zeros, zeros, torch.sin(half)], dim=1)  # yaw about z
        qpos[:, self._cube_pos] = cube_pos.to(dtype)
        qpos[:, self._cube_quat] = cube_quat.to(dtype)
        qvel = self.qvel0.expand(n, -1).clone()
        ctrl = self._ctrl(q, torch.full_like(q[:, 0], FINGER_RANGE[1]))
        # Applied to the envs that actually reset in commit_reset.
        self._pending = {"target": target.to(dtype), "q": q, "ee": grip_position(q)}
        return qpos, qvel, ctrl

    def commit_reset(self, mask: torch.Tensor) -> None:
        p = self._pending
        assert p is not None, "commit_reset() without initial_state()"
        m = mask[:, None]
        self.target = torch.where(m, p["target"], self.target)
        self.q_cmd = torch.where(m, p["q"], self.q_cmd)
        self.x_des = torch.where(m, p["ee"], self.x_des)
        self.prev_ee = torch.where(m, p["ee"], self.prev_ee)
        self.ee_vel = torch.where(m, 0.0, self.ee_vel)
        self._pending = None

    # -- step -------------------------------------------------------------------------------------------------
    def _ctrl(self, q_cmd: torch.Tensor, finger: torch.Tensor) -> torch.Tensor:
        return torch.cat([q_cmd, finger[:, None], finger[:, None]], dim=1)[:, self._ctrl_perm]

    def control(self, action: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        ee = grip_position(qpos[:, self._arm])  # the measured grip point
        x_des = torch.clamp(self.x_des + action[:, :3] * MAX_DELTA, self._ws_low, self._ws_high)
        lead = x_des - ee
        dist = torch.linalg.vector_norm(lead, dim=1, keepdim=True)
        x_des = torch.where(dist > _MAX_LEAD, ee + lead * (_MAX_LEAD / dist.clamp_min(_MAX_LEAD)), x_des)
        self.x_des = x_des
        # ArmEnv evaluates the IK's kinematics at the commanded joints (its scratch MjData), not the measured.
        self.q_cmd = ik_step(self.q_cmd, x_des, self._q_low, self._q_high)
        return self._ctrl(self.q_cmd, FINGER_RANGE[1] * (1.0 - action[:, 3]) / 2.0)

    def evaluate(
        self, qpos_before: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ee = grip_position(qpos[:, self._arm])
        self.ee_vel = (ee - self.prev_ee) / CONTROL_DT
        self.prev_ee = ee
        cube, target = qpos[:, self._cube_pos], self.target
        radius = SUCCESS_RADIUS[self.task]
        if self.task == "reach":
            task_dist = torch.linalg.vector_norm(ee - target, dim=1)
            success = task_dist < radius
        elif self.task == "push":
            task_dist = torch.linalg.vector_norm(cube[:, :2] - target[:, :2], dim=1)
            success = task_dist < radius
        else:
            task_dist = torch.linalg.vector_norm(cube - target, dim=1)
            success = (cube[:, 2] > CUBE_HALF + LIFT_MARGIN) & (task_dist < radius)
        if self.reward_type == "sparse":
            reward = success.to(self.dtype)
        elif self.task == "reach":
            reward = -task_dist
        else:
            reward = -task_dist - 0.5 * torch.linalg.vector_norm(ee - cube, dim=1)
        return reward, success, success

    def observe(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        ee = grip_position(qpos[:, self._arm])
        cube, target = qpos[:, self._cube_pos], self.target
        gripper = 2.0 * qpos[:, self._fingers].mean(dim=1, keepdim=True)
        parts = [  # in STATE_LAYOUT's order (checked at import, below the constants)
            ee,
            self.ee_vel,
            gripper,
            cube,
            qpos[:, self._cube_quat],
            qvel[:, self._cube_vel],
            cube - ee,
            target,
            target - cube,
            target - ee,
        ]
        obs = torch.cat(parts, dim=1).to(torch.float32)
        return obs

    def mocap_pos(self, index: int) -> np.ndarray:
        """The target of env ``index`` as ``(1, 3)``, for the scene's target marker (the only mocap body)."""
        return self.target[index].detach().to("cpu", torch.float64).numpy().reshape(1, 3)
