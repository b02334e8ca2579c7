"""The tabletop arm tasks (reach, push, pick_place, track): their one definition, in torch, batched, for every physics backend.

``ArmTask`` is the MDP; every number it uses (time limits, workspace, action scale, success radii, lift margin,
IK damping and step limit, hand orientation, reset boxes, parked cube, observation layout) is in
``robot_rl.envs.arm.constants`` and the scene in ``robot_rl.envs.arm.model``. It runs batched on CPU MuJoCo, MJX and
Warp (``mujoco:push``, ``mjx:push``, ...) through ``SimEnv``, and one env at a time on CPU MuJoCo behind the
gymnasium adapter ``robot_rl.envs.arm.ArmEnv`` (``arm:`` specs, the ``sim_arm`` robot driver). The physics backends
only expose ``qpos``/``qvel`` and accept ``ctrl``, so everything is computed from ``qpos`` in torch:

* forward kinematics of the ``grip`` site and the hand orientation in closed form (base yaw ``j1`` about z,
  three pitch joints ``j2..j4`` about the rotated y axis, wrist roll ``j5`` about the hand's z), using the arm
  dimensions of ``robot_rl.envs.arm.model``; ``tests/envs/sim/test_arm_task.py`` checks it against ``mj_kinematics``;
* the Jacobian analytically (a revolute joint with world axis w through anchor p contributes
  ``jacp = w x (site - p)``, ``jacr = w``, which is what ``mj_jacSite`` returns; tested against it);
* the per-step controller: the desired grip point moved by the action (``max_delta`` per step), clipped to the
  workspace, to the arm's reach (``within_reach``) and to ``MAX_LEAD`` from the measured grip point, then ONE
  damped-least-squares IK iteration from the previously commanded joints (6-D error: position plus the
  orientation error ``quat2Vel(HAND_QUAT * conj(hand))`` with the error quaternion sign-normalised, as
  ``mju_mat2Quat``/``mju_negQuat``/``mju_mulQuat``/``mju_quat2Vel`` would give; the test compares with exactly
  those calls), the step clipped to ``IK_MAX_DQ``
  and to the joint ranges; the hand quaternion is ``qz(j1) qy(j2+j3+j4) qz(j5)`` multiplied out;
* reset: the grip point uniform in ``EE0_BOX`` (joints from the closed-form ``analytic_ik``), gripper open; the
  cube uniform in ``CUBE_XY_BOX`` with yaw in ``[-MAX_YAW, MAX_YAW]`` (reach, track: parked at ``CUBE_PARKED``); the
  target at least ``MIN_TARGET_DIST`` from the start, drawn as ``_CANDIDATES`` = 16 candidates at once per env,
  taking the first far enough, else the farthest (with 16 the fallback has probability below 1e-6 per reset for
  every task, and the accepted target is uniform over the valid region); track's target is a uniform phase,
  radius and height of its circle (``TRACK_*``), wherever the grip point starts;
* track's target moved along its circle after each control step (``evaluate``; its velocity ``target_velocity``);
* observation (``STATE_LAYOUT``, 29-D), dense and sparse rewards, success and termination on success (``score``).

``control_hz`` (default 20 Hz) picks another control rate whose period is a whole number of physics steps, with
``max_delta`` scaled so that an action is the same hand speed at any rate (the hardware bridge runs 50 Hz).

Everything is batched over the N envs, in the physics' dtype on its device (float64 on CPU MuJoCo, float32 on
MJX and Warp), with no per-env Python and no host synchronisation in reset, control, evaluate or observe:
fixed-shape draws, ``torch.where`` for choices, ``solve_ex`` for the IK's 5x5 systems, constants built once per
dtype and device (a tensor made from host data in the step would cost a copy and a sync on a GPU).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import torch
from robot_rl.envs.arm.constants import (
    ACTION_MIRROR_SIGN,
    CONTROL_DT,
    CUBE_PARKED,
    CUBE_XY_BOX,
    EE0_BOX,
    HAND_QUAT,
    IK_DAMPING,
    IK_MAX_DQ,
    LIFT_MARGIN,
    MAX_DELTA,
    MAX_LEAD,
    MAX_YAW,
    MIN_TARGET_DIST,
    MIRROR_TASKS,
    PICK_HEIGHT,
    PRACTICE_XY_BOX,
    REACH_MAX,
    REACH_TARGET_BOX,
    REWARDS,
    STATE_DIM,
    STATE_LAYOUT,
    STATE_MIRROR_SIGN,
    SUCCESS_RADIUS,
    TARGET_XY_BOX,
    TASKS,
    TIME_LIMITS,
    TRACK_CENTRE_XY,
    TRACK_HEIGHT,
    TRACK_RADIUS,
    TRACK_SPEED,
    TRACK_SPEED_TOL,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)
from robot_rl.envs.arm.model import (
    ARM_JOINTS,
    CUBE_HALF,
    FINGER_JOINTS,
    FINGER_RANGE,
    FOREARM,
    SHOULDER_HEIGHT,
    TIMESTEP,
    UPPER_ARM,
    WRIST_TO_GRIP,
    build_xml,
)

from ..rng import ResetRNG
from ..task import SimTask

_CANDIDATES = 16  # targets drawn at once per reset for the "at least 10 cm away" rule
_QUAT_MINVAL = 1e-15  # mjMINVAL, below which mju_quat2Vel's axis normalisation gives up


# ---------------------------------------------------------------------------------------------- kinematics
def _error_matrix() -> torch.Tensor:
    """``E`` with ``E @ cur = HAND_QUAT * conj(cur)`` (``mju_mulQuat`` after ``mju_negQuat``) for (w, x, y, z) quats."""
    w, x, y, z = HAND_QUAT
    left = torch.tensor([[w, -x, -y, -z], [x, w, -z, y], [y, z, w, -x], [z, -y, x, w]], dtype=torch.float64)
    return left * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=torch.float64)


_ERROR_MATRIX_T = _error_matrix().T
_IK_REG = IK_DAMPING**2 * torch.eye(5, dtype=torch.float64)  # the damping term of ik_step's normal equations
_LINKS = torch.tensor([UPPER_ARM, FOREARM, WRIST_TO_GRIP], dtype=torch.float64)  # j2 -> j3 -> j4 -> grip
_ON: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _cube_symmetries() -> torch.Tensor:
    """The 24 rotations that map a cube onto itself, as the 48 unit quaternions (w, x, y, z) of both signs ``[48, 4]``:
    the permutations of (±1, 0, 0, 0) (identity, 180° about a face axis), (±½, ±½, ±½, ±½) (120°, 240° about a
    diagonal) and (±√½, ±√½, 0, 0) (90°, 270° about a face axis; 180° about an edge axis)."""
    import itertools

    found: set[tuple[float, ...]] = set()
    half, root = 0.5, math.sqrt(0.5)
    for pattern in ((1.0, 0.0, 0.0, 0.0), (half, half, half, half), (root, root, 0.0, 0.0)):
        for perm in itertools.permutations(pattern):
            for signs in itertools.product((1.0, -1.0), repeat=4):
                found.add(tuple(round(v * sg, 12) + 0.0 for v, sg in zip(perm, signs, strict=True)))
    return torch.tensor(sorted(found), dtype=torch.float64)


def _quat_product_matrix(q: torch.Tensor) -> torch.Tensor:
    """``R [..., 4, 4]`` with ``R @ s = q * s`` (Hamilton product, (w, x, y, z))."""
    w, x, y, z = q.unbind(-1)
    return torch.stack([torch.stack([w, -x, -y, -z], -1), torch.stack([x, w, -z, y], -1),
                        torch.stack([y, z, w, -x], -1), torch.stack([z, -y, x, w], -1)], dim=-2)


_CUBE_SYMMETRIES = _cube_symmetries()
assert _CUBE_SYMMETRIES.shape == (48, 4)


def canonical_cube_quat(q: torch.Tensor) -> torch.Tensor:
    """The cube's orientation ``[N, 4]`` as the smallest rotation among the 24 that give the same cube (it looks the
    same on every face: a pose estimator of such a cube reports one of them), with w >= 0.

    The raw quaternion after a few pushes in autonomous practice was outside every orientation the reset draws
    (|yaw| <= 45°, flat; 82% of practice starts beyond it, 18% on another face), and a policy trained from resets
    solved 17% of practice starts against 80% of reset starts. For the reset's own orientations the canonical one
    is the raw one."""
    candidates = _quat_product_matrix(q) @ _on(_CUBE_SYMMETRIES, q).T  # [N, 4, 48]: q * s for each symmetry s
    best = candidates[:, 0, :].abs().argmax(dim=1)
    out = torch.gather(candidates, 2, best[:, None, None].expand(-1, 4, 1))[..., 0]
    return torch.where(out[:, :1] < 0, -out, out)


def _on(const: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The module constant ``const`` in ``like``'s dtype and device, copied there once."""
    key = (id(const), like.dtype, like.device)
    if key not in _ON:
        _ON[key] = const.to(like)
    return _ON[key]


def _kinematics(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Grip point ``[..., 3]``, hand quaternion ``[..., 4]`` and Jacobian ``[..., 6, 5]`` for joints ``q [..., 5]``.

    The pitch joints keep the arm in the vertical plane at yaw ``j1``; in that plane a link of length L after
    accumulated pitch ``a`` adds ``L (sin a, cos a)`` to (radial distance, height). The j2 axis is
    ``SHOULDER_HEIGHT`` above the table (link1 at 0.04 plus link2 at 0.08 in the MJCF); the grip site is
    ``WRIST_TO_GRIP`` past j4 along the hand's z (hand at 0.05, site at 0.1).

    Jacobian columns (a revolute joint with world axis w through anchor p: ``jacp = w x (site - p)``,
    ``jacr = w``): j1 about z through the origin gives ``(-y, x, 0)``; the pitch joints' common axis is
    ``(-sin j1, cos j1, 0)`` and the site is ``dr`` further out and ``dz`` higher than their anchors in the arm's
    plane, which gives ``(cos j1 dz, sin j1 dz, -dr)``; the grip site lies on j5's axis (the hand's z).
    Hand orientation: ``qz(j1) qy(a) qz(j5)`` with ``a = j2 + j3 + j4``, multiplied out.
    """
    yaw, roll = q[..., 0], q[..., 4]
    c1, s1 = torch.cos(yaw), torch.sin(yaw)
    pitch = torch.cumsum(q[..., 1:4], dim=-1)
    sp, cp = torch.sin(pitch), torch.cos(pitch)
    links = _on(_LINKS, q)
    radial = torch.cumsum(sp * links, dim=-1)  # j3 anchor, j4 anchor, grip site; from the j2 axis
    height = torch.cumsum(cp * links, dim=-1)
    r, h = radial[..., 2], height[..., 2]
    grip = torch.stack([r * c1, r * s1, h + SHOULDER_HEIGHT], dim=-1)
    dr = r[..., None] - torch.nn.functional.pad(radial[..., :2], (1, 0))  # from the j2, j3, j4 anchors
    dz = h[..., None] - torch.nn.functional.pad(height[..., :2], (1, 0))
    zero, one = torch.zeros_like(yaw), torch.ones_like(yaw)
    sa, ca = sp[..., 2], cp[..., 2]
    jac = torch.stack(
        [
            torch.cat([(-grip[..., 1])[..., None], c1[..., None] * dz, zero[..., None]], dim=-1),
            torch.cat([grip[..., 0:1], s1[..., None] * dz, zero[..., None]], dim=-1),
            torch.cat([zero[..., None], -dr, zero[..., None]], dim=-1),
            torch.stack([zero, -s1, -s1, -s1, sa * c1], dim=-1),
            torch.stack([zero, c1, c1, c1, sa * s1], dim=-1),
            torch.stack([one, zero, zero, zero, ca], dim=-1),
        ],
        dim=-2,
    )
    ch, sh = torch.cos(pitch[..., 2] / 2), torch.sin(pitch[..., 2] / 2)
    s15, d15 = (yaw + roll) / 2, (roll - yaw) / 2
    quat = torch.stack(
        [ch * torch.cos(s15), sh * torch.sin(d15), sh * torch.cos(d15), ch * torch.sin(s15)], dim=-1
    )
    return grip, quat, jac


def grip_position(q: torch.Tensor) -> torch.Tensor:
    """World position ``[..., 3]`` of the ``grip`` site for arm joint angles ``q [..., 5]`` (j1..j5).

    ``_kinematics``'s grip point alone (the observation and reward need nothing else), in fewer operations.
    """
    pitch = torch.cumsum(q[..., 1:4], dim=-1)  # accumulated pitch of the upper arm, forearm and hand
    links = _on(_LINKS, q)
    radial = torch.sin(pitch) @ links
    height = torch.cos(pitch) @ links + SHOULDER_HEIGHT
    yaw = q[..., 0]
    return torch.stack([radial * torch.cos(yaw), radial * torch.sin(yaw), height], dim=-1)


def hand_quat(q: torch.Tensor) -> torch.Tensor:
    """Hand orientation ``[..., 4]`` (w, x, y, z), equal up to sign to ``mju_mat2Quat`` of the site's xmat."""
    return _kinematics(q)[1]


def hand_matrix(q: torch.Tensor) -> torch.Tensor:
    """Hand (and ``grip`` site) rotation matrix ``[..., 3, 3]``: ``Rz(j1) Ry(j2 + j3 + j4) Rz(j5)``."""
    a = q[..., 1] + q[..., 2] + q[..., 3]
    c1, s1 = torch.cos(q[..., 0]), torch.sin(q[..., 0])
    ca, sa = torch.cos(a), torch.sin(a)
    c5, s5 = torch.cos(q[..., 4]), torch.sin(q[..., 4])
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
    """The IK's rotation error ``[..., 3]``: quat2Vel(sign-fixed HAND_QUAT * conj(quat), 1), as ``mju_quat2Vel``."""
    err = quat @ _on(_ERROR_MATRIX_T, quat)
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
    return _kinematics(q)[2]


def ik_step(q: torch.Tensor, x_des: torch.Tensor, q_low: torch.Tensor, q_high: torch.Tensor) -> torch.Tensor:
    """One damped-least-squares IK iteration for a batch: joints ``[N, 5]`` towards grip point ``x_des``.

    Damped least squares on the 6-D error (position, and hand pointing down with the fixed yaw), the step
    scaled so no joint moves more than ``IK_MAX_DQ``, then clipped to the joint range ``[q_low, q_high]``.
    ``solve_ex`` rather than ``solve``: it does not check the factorisation on the host (the system is
    positive definite anyway thanks to the damping), so the control step stays free of device syncs.
    """
    grip, quat, jac = _kinematics(q)
    e = torch.cat([x_des - grip, _orientation_error(quat)], dim=-1)
    jt = jac.transpose(-1, -2)
    dq, _ = torch.linalg.solve_ex(jt @ jac + _on(_IK_REG, q), (jt @ e.unsqueeze(-1)))
    dq = dq.squeeze(-1)
    scale = dq.abs().amax(dim=-1, keepdim=True) / IK_MAX_DQ
    dq = dq / scale.clamp_min(1.0)
    return torch.clamp(q + dq, q_low, q_high)


def within_reach(grip: torch.Tensor) -> torch.Tensor:
    """Grip points ``[..., 3]`` moved horizontally towards the base until the wrist centre is at most ``REACH_MAX``
    from the shoulder (``REACH_MAX`` says why); the height is kept, so the point stays in the workspace box."""
    height = grip[..., 2] + WRIST_TO_GRIP - SHOULDER_HEIGHT  # of the wrist centre above the shoulder
    reach = torch.linalg.vector_norm(grip[..., :2], dim=-1)
    allowed = torch.sqrt((REACH_MAX**2 - height**2).clamp_min(0.0))
    scale = (allowed / reach.clamp_min(1e-9)).clamp(max=1.0)
    return torch.cat([grip[..., :2] * scale.unsqueeze(-1), grip[..., 2:]], dim=-1)


def analytic_ik(grip: torch.Tensor) -> torch.Tensor:
    """Closed-form elbow-up joints ``[..., 5]`` that put the grip point at ``grip [..., 3]``, the hand pointing down.

    Used at reset, where the arm jumps to a new pose; the per-step control uses the Jacobian instead.
    """
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

    obs_dim = STATE_DIM
    action_dim = 4
    reports_success = True
    # Measured on CPU MuJoCo: up to 12 contacts and 72 constraint rows with random actions (pyramidal cones,
    # condim 4: 6 rows per contact); a grasp adds more. Room for four times that.
    contact_capacity = (48, 320)

    def __init__(
        self, task: str = "push", reward: str = "dense", control_hz: float = 1.0 / CONTROL_DT, *, fences: bool = False
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of {REWARDS}")
        substeps = 1.0 / (control_hz * TIMESTEP) if control_hz > 0 else 0.5
        if abs(substeps - round(substeps)) > 1e-6 or round(substeps) < 1:
            raise ValueError(
                f"control_hz={control_hz} is not a whole number of {TIMESTEP * 1e3:g} ms physics steps per "
                "control step; use e.g. 10, 20, 25, 40, 50 or 100"
            )
        self.task, self.reward_type, self.fences = task, reward, bool(fences)
        self.name = task if reward == "dense" else f"{task}-{reward}"
        self.time_limit = TIME_LIMITS[task]
        self.frame_skip = int(round(substeps))
        self.control_dt = self.frame_skip * TIMESTEP
        # A given action is the same hand speed at any rate.
        self.max_delta = MAX_DELTA * self.control_dt / CONTROL_DT

    def build_model(self) -> mujoco.MjModel:
        # A fresh model, not envs.arm.model.build_model()'s cached one: SimEnv resizes the render buffers.
        return mujoco.MjModel.from_xml_string(build_xml(fences=self.fences))

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
        self._cube_dofs = slice(cd, cd + 6)
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
            "ee0": (const(EE0_BOX[0], f64), const(EE0_BOX[1], f64)),
            "reach_target": (const(REACH_TARGET_BOX[0], f64), const(REACH_TARGET_BOX[1], f64)),
            "cube_xy": (const(CUBE_XY_BOX[0], f64), const(CUBE_XY_BOX[1], f64)),
            "target_xy": (const(TARGET_XY_BOX[0], f64), const(TARGET_XY_BOX[1], f64)),
            "practice_xy": (const(PRACTICE_XY_BOX[0], f64), const(PRACTICE_XY_BOX[1], f64)),
        }
        self._parked = const(CUBE_PARKED, f64)
        self._track_centre = const(TRACK_CENTRE_XY)

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
        """Per env, a point of ``box`` at least ``MIN_TARGET_DIST`` from ``avoid [N, D]``.

        ``_CANDIDATES`` candidates at once: the first far enough, else the farthest; no data-dependent control
        flow.
        """
        cand = self._uniform(rng, box, (_CANDIDATES,))  # [N, K, D]
        dist = torch.linalg.vector_norm(cand - avoid[:, None, :], dim=-1)  # [N, K]
        ok = dist >= MIN_TARGET_DIST
        first_ok = torch.argmax(ok.to(torch.int8), dim=1)  # argmax returns the first maximal index
        idx = torch.where(ok.any(dim=1), first_ok, torch.argmax(dist, dim=1))
        return torch.gather(cand, 1, idx[:, None, None].expand(-1, 1, cand.shape[-1])).squeeze(1)

    def _draw_target(self, rng: ResetRNG, ee: torch.Tensor, cube_xy: torch.Tensor) -> torch.Tensor:
        """Targets ``[N, 3]`` (float64) for a scene whose grip point is ``ee`` and cube ``cube_xy``: reach's at least
        ``MIN_TARGET_DIST`` from the hand, push's and pick_place's from the cube, track's a point of its circle."""
        if self.task == "reach":
            return self._sample_far(rng, "reach_target", ee)
        if self.task == "track":  # a point of the target's circle (constants: TRACK_*)
            phase = rng.uniform((), -math.pi, math.pi)
            radius = rng.uniform((), *TRACK_RADIUS)
            height = rng.uniform((), *TRACK_HEIGHT)
            centre = self._track_centre.to(torch.float64)
            return torch.stack([centre[0] + radius * torch.cos(phase), centre[1] + radius * torch.sin(phase), height],
                               dim=1)
        xy = self._sample_far(rng, "target_xy", cube_xy)
        if self.task == "push":
            height = torch.full_like(xy[:, :1], CUBE_HALF)
        else:
            height = rng.uniform((1,), *PICK_HEIGHT)
        return torch.cat([xy, height], dim=1)

    def initial_state(self, rng: ResetRNG) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, dtype = self.num_envs, self.dtype
        ee0 = self._uniform(rng, "ee0")
        if self.task in ("reach", "track"):
            cube_xy = self._parked[:2].expand(n, 2)
            yaw = torch.zeros(n, dtype=torch.float64, device=self.device)
        else:
            cube_xy = self._uniform(rng, "cube_xy")
            yaw = rng.uniform((), -MAX_YAW, MAX_YAW)
        target = self._draw_target(rng, ee0, cube_xy)

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

    def start_grip(self, rng: ResetRNG) -> torch.Tensor:
        """Grip points ``[N, 3]`` that a reset drawing from ``rng`` now would start from; the task state is untouched."""
        pending = self._pending
        qpos, _, _ = self.initial_state(rng)
        self._pending = pending
        return grip_position(qpos[:, self._arm])

    def start_cube(self, rng: ResetRNG) -> torch.Tensor:
        """Cube centres ``[N, 3]`` that a reset drawing from ``rng`` now would start from (the goal of practice's
        reset controller: the start a person's reset would give); the task state is untouched."""
        pending = self._pending
        qpos, _, _ = self.initial_state(rng)
        self._pending = pending
        return qpos[:, self._cube_pos]

    def cube_position(self, qpos: torch.Tensor) -> torch.Tensor:
        """The cube's centre ``[N, 3]`` in ``qpos``."""
        return qpos[:, self._cube_pos]

    def finger_hold_command(self, qpos: torch.Tensor) -> torch.Tensor:
        """The gripper action ``[N]`` (-1 open .. 1 closed) whose finger target is where the fingers are now."""
        return 1.0 - 2.0 * qpos[:, self._fingers].mean(dim=1) / FINGER_RANGE[1]

    def cube_speed(self, qvel: torch.Tensor) -> torch.Tensor:
        """The cube's largest velocity component ``[N]`` in ``qvel`` (m/s and rad/s): whether it is at rest."""
        return qvel[:, self._cube_dofs].abs().amax(dim=1)

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

    # -- reset-free practice ----------------------------------------------------------------------------------
    def practice_target(self, rng: ResetRNG, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A new episode on the scene as it is (autonomous practice, no one resets it): ``(target [N, 3], stuck
        [N])``. The target is drawn by the task's rule from where the hand and the cube are now; ``stuck`` marks
        scenes a person must reset: a cube outside ``PRACTICE_XY_BOX`` (where the hand can no longer get round it to
        push it back) or off the table. reach and track are never stuck."""
        cube = qpos[:, self._cube_pos].to(torch.float64)
        ee = grip_position(qpos[:, self._arm]).to(torch.float64)
        target = self._draw_target(rng, ee, cube[:, :2])
        if self.task in ("reach", "track"):
            return target.to(self.dtype), torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return target.to(self.dtype), self.beyond_push(qpos) | (cube[:, 2] < CUBE_HALF - 0.01)

    def beyond_push(self, qpos: torch.Tensor) -> torch.Tensor:
        """``[N]``: the cube's centre outside ``PRACTICE_XY_BOX``, where the hand can no longer get behind it to push it
        towards the middle (practice's reset controller picks it up instead; left there, it needs a person)."""
        low, high = self._boxes["practice_xy"]
        cube = qpos[:, self._cube_pos][:, :2].to(torch.float64)
        return ((cube < low) | (cube > high)).any(dim=1)

    def practice_state(self, rng: ResetRNG, qpos: torch.Tensor, qvel: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The start of a practice episode: ``(qpos, qvel, ctrl, stuck)`` for ``commit_reset``. The arm goes home, as a
        robot's own reset motion takes it (a fresh start pose, gripper open: ``initial_state``'s draw); the cube stays
        as the last episode left it and gets a new target (``practice_target``). A ``stuck`` env gets the whole fresh
        start instead, the reset a person would do."""
        fresh_qpos, fresh_qvel, ctrl = self.initial_state(rng)
        if self.task in ("reach", "track"):  # no object to leave where it is: a fresh start
            return fresh_qpos, fresh_qvel, ctrl, torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        target, stuck = self.practice_target(rng, qpos)
        keep = ~stuck[:, None]
        new_qpos, new_qvel = fresh_qpos.clone(), fresh_qvel.clone()
        for part in (self._cube_pos, self._cube_quat):
            new_qpos[:, part] = torch.where(keep, qpos[:, part], fresh_qpos[:, part])
        new_qvel[:, self._cube_dofs] = torch.where(keep, qvel[:, self._cube_dofs], fresh_qvel[:, self._cube_dofs])
        assert self._pending is not None
        self._pending["target"] = torch.where(keep, target, self._pending["target"])
        return new_qpos, new_qvel, ctrl, stuck

    # -- step -------------------------------------------------------------------------------------------------
    def _ctrl(self, q_cmd: torch.Tensor, finger: torch.Tensor) -> torch.Tensor:
        return torch.cat([q_cmd, finger[:, None], finger[:, None]], dim=1)[:, self._ctrl_perm]

    def control(self, action: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        ee = grip_position(qpos[:, self._arm])  # the measured grip point
        x_des = within_reach(torch.clamp(self.x_des + action[:, :3] * self.max_delta, self._ws_low, self._ws_high))
        lead = x_des - ee
        dist = torch.linalg.vector_norm(lead, dim=1, keepdim=True)
        x_des = torch.where(dist > MAX_LEAD, ee + lead * (MAX_LEAD / dist.clamp_min(MAX_LEAD)), x_des)
        self.x_des = x_des
        # The IK linearises at the commanded joints, not the measured ones (the servos lag behind them).
        self.q_cmd = ik_step(self.q_cmd, x_des, self._q_low, self._q_high)
        return self._ctrl(self.q_cmd, FINGER_RANGE[1] * (1.0 - action[:, 3]) / 2.0)

    def evaluate(
        self, qpos_before: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ee = grip_position(qpos[:, self._arm])
        self.ee_vel = (ee - self.prev_ee) / self.control_dt
        self.prev_ee = ee
        if self.task == "track":  # the target moves on with the control step
            rel = self.target[:, :2] - self._track_centre
            angle = TRACK_SPEED * self.control_dt / torch.linalg.vector_norm(rel, dim=1).clamp_min(1e-6)
            c, s = torch.cos(angle), torch.sin(angle)
            rotated = torch.stack([c * rel[:, 0] - s * rel[:, 1], s * rel[:, 0] + c * rel[:, 1]], dim=1)
            self.target = torch.cat([self._track_centre + rotated, self.target[:, 2:]], dim=1)
        reward, success = self.score(qpos)
        return reward, success, success

    def target_velocity(self) -> torch.Tensor:
        """The target's velocity ``[N, 3]`` (m/s): zero but on ``track``, where it follows from its position."""
        if self.task != "track":
            return torch.zeros_like(self.target)
        rel = self.target[:, :2] - self._track_centre
        tangent = torch.stack([-rel[:, 1], rel[:, 0]], dim=1) / torch.linalg.vector_norm(
            rel, dim=1, keepdim=True).clamp_min(1e-6)
        return torch.cat([TRACK_SPEED * tangent, torch.zeros_like(rel[:, :1])], dim=1)

    def score(self, qpos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reward [N], success [N])`` of the state ``qpos``, with the grip point of the last ``evaluate``."""
        ee, cube, target = self.prev_ee, qpos[:, self._cube_pos], self.target
        radius = SUCCESS_RADIUS[self.task]
        if self.task in ("reach", "track"):
            task_dist = torch.linalg.vector_norm(ee - target, dim=1)
            success = task_dist < radius
            if self.task == "track":  # caught: at the target and moving with it
                slip = torch.linalg.vector_norm(self.ee_vel - self.target_velocity(), dim=1)
                success = success & (slip < TRACK_SPEED_TOL)
        elif self.task == "push":
            task_dist = torch.linalg.vector_norm(cube[:, :2] - target[:, :2], dim=1)
            success = task_dist < radius
        else:
            task_dist = torch.linalg.vector_norm(cube - target, dim=1)
            success = (cube[:, 2] > CUBE_HALF + LIFT_MARGIN) & (task_dist < radius)
        if self.reward_type == "sparse":
            reward = success.to(self.dtype)
        elif self.task in ("reach", "track"):
            reward = -task_dist
        else:
            reward = -task_dist - 0.5 * torch.linalg.vector_norm(ee - cube, dim=1)
        return reward, success

    def hold(self, qpos: torch.Tensor) -> None:
        """Servo targets on the measured pose: the desired grip point and the commanded joints become ``qpos``'s.

        The hand then decelerates where it is instead of travelling on to a desired point that leads it.
        """
        self.q_cmd = qpos[:, self._arm].clone()
        self.x_des = grip_position(self.q_cmd)

    def observe(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        ee = grip_position(qpos[:, self._arm])
        cube, target = qpos[:, self._cube_pos], self.target
        gripper = 2.0 * qpos[:, self._fingers].mean(dim=1, keepdim=True)
        parts = {
            "ee_pos": ee,
            "ee_vel": self.ee_vel,
            "gripper": gripper,
            "cube_pos": cube,
            "cube_quat": canonical_cube_quat(qpos[:, self._cube_quat]),  # as the cube looks, not how it got there
            "cube_vel": qvel[:, self._cube_vel],
            "cube_rel_ee": cube - ee,
            "target_pos": target,
            "target_rel_cube": target - cube,
            "target_rel_ee": target - ee,
        }
        return torch.cat([parts[name] for name in STATE_LAYOUT], dim=1).to(torch.float32)

    def reflection(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The signs ``(state [29], action [4])`` that reflect an episode in the plane y = 0 into another episode of
        this task (``MIRROR_TASKS``: push and pick_place; None for reach), for ``BatchedEnv.reflection``."""
        if self.task not in MIRROR_TASKS:
            return None
        return STATE_MIRROR_SIGN.copy(), ACTION_MIRROR_SIGN.copy()

    def mocap_pos(self, index: int) -> np.ndarray:
        """The target of env ``index`` as ``(1, 3)``, for the scene's target marker (the only mocap body)."""
        return self.target[index].detach().to("cpu", torch.float64).numpy().reshape(1, 3)
