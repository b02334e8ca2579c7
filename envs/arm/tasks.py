"""Tabletop manipulation tasks (reach, push, pick_place) for a simulated 5-DoF arm with a parallel gripper.

Control. The agent commands the end effector, not the joints: an action is 4 numbers in [-1, 1], the first
three a Cartesian displacement of the ``grip`` point (scaled by ``MAX_DELTA`` = 2.5 cm per step), the fourth
the gripper (-1 fully open, +1 fully closed, linear in between). Each control step (20 Hz: ``N_SUBSTEPS`` = 10
physics steps of 5 ms) the env

1. moves a desired grip position by the action, clips it to the workspace box (``WORKSPACE_LOW`` /
   ``WORKSPACE_HIGH``; its floor keeps the pads 3 mm off the table) and keeps it within 5 cm of the actual grip
   point (no wind-up when something blocks the hand);
2. runs one damped-least-squares IK iteration (``mj_jacSite``, 6-D error: position plus the orientation
   "gripper pointing straight down, fingers opening along world y") from the previously commanded joint
   targets, and sends the result to the joints' position servos;
3. steps the physics.

Why joint-space IK rather than a mocap hand (the Fetch approach): the arm is a real articulated body driven
by servos (gravity-compensated, critically damped), so what the agent learns transfers to the same
end-effector interface on a real arm, and contact forces come from actuators with force limits instead of
from an infinitely strong weld. Five joints are exactly enough for "position + pointing down + fixed yaw"
(see ``robot_rl.envs.arm.model``); the IK never has a redundant null space to drift in.

State observation: one flat float32 vector with the named layout ``STATE_LAYOUT`` (world frame, metres):

==================  =====  ============================================================================
name                slice  meaning
==================  =====  ============================================================================
``ee_pos``          0:3    grip point (between the finger pads)
``ee_vel``          3:6    grip point velocity over the last control step (m/s)
``gripper``         6:7    opening between the pads (m): 0.09 fully open, 0.04 on the cube, ~0 closed
``cube_pos``        7:10   cube centre
``cube_quat``       10:14  cube orientation (w, x, y, z)
``cube_vel``        14:17  cube linear velocity (m/s)
``cube_rel_ee``     17:20  cube_pos - ee_pos
``target_pos``      20:23  target centre
``target_rel_cube`` 23:26  target_pos - cube_pos
``target_rel_ee``   26:29  target_pos - ee_pos
==================  =====  ============================================================================

With ``pixels=True`` the observation is a dict ``{"state": <the vector>, "pixels": uint8 (H, W, 3)}`` rendered
from the fixed ``front`` camera.

Tasks (initial conditions are drawn from the env's ``np_random``; time limits in control steps are
``TIME_LIMITS``):

* ``reach`` (50 steps): bring the grip point to a random target in the air (x 0.25..0.5, y -0.2..0.2,
  z 0.06..0.25 m, at least 10 cm from the start). Success: distance < 3 cm. The cube is parked out of reach.
* ``push`` (100 steps): push the cube (random position and yaw) to a random target on the table at least
  10 cm away. Success: cube-target distance in the table plane < 5 cm.
* ``pick_place`` (100 steps): grasp the cube and hold it at a random target in the air (centre 7..22 cm above
  the table, i.e. the cube's underside 5..20 cm up), at least 10 cm away horizontally. Success: cube-target
  distance < 5 cm with the cube off the table (centre more than 1.5 cm above its resting height).

The grip point starts at a random position above the table (x 0.3..0.42, y -0.12..0.12, z 0.1..0.2) with the
gripper open.

Rewards. ``reward="dense"`` (shaped, always <= 0, so ending the episode early by succeeding is never
penalised):

* reach: ``-|ee - target|``
* push: ``-|cube_xy - target_xy| - 0.5 |ee - cube|``
* pick_place: ``-|cube - target| - 0.5 |ee - cube|``

``reward="sparse"``: 1.0 on a step where the task is solved, else 0.0. Both variants terminate
(``terminated=True``) on success, and ``info["success"]`` is reported on every step.

Cost (shared 2-core development machine, other jobs running, so figures are rough): about 0.5 ms per env step
with state observations (physics ~0.21 ms for the 10 substeps, one IK iteration ~0.06 ms, observation ~0.04
ms, the rest wrapper and Python overhead); ``gym:Hopper-v5`` measured 0.35-1.0 ms per step in the same runs.
A 5 ms timestep was kept because 10 ms made grasps fail (pick_place expert 21 %) and 6.25 ms made noisy
grasps less reliable. Pixel observations add an 84x84 render per step: about 12 ms on software GL (llvmpipe),
which is why the observation renderer skips shadows (they made it ~3x slower).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from .model import (
    ARM_JOINTS,
    CUBE_HALF,
    FINGER_JOINTS,
    FINGER_RANGE,
    FOREARM,
    HOME_QPOS,
    SHOULDER_HEIGHT,
    TIMESTEP,
    UPPER_ARM,
    WRIST_TO_GRIP,
    build_model,
)

TASKS = ("reach", "push", "pick_place")
TIME_LIMITS = {"reach": 50, "push": 100, "pick_place": 100}
REWARDS = ("dense", "sparse")
N_SUBSTEPS = 10
CONTROL_DT = N_SUBSTEPS * TIMESTEP  # 0.05 s, i.e. 20 Hz
MAX_DELTA = 0.025  # metres of grip-point displacement per control step at |action| = 1
WORKSPACE_LOW = np.array([0.15, -0.28, 0.018])
WORKSPACE_HIGH = np.array([0.6, 0.28, 0.32])
SUCCESS_RADIUS = {"reach": 0.03, "push": 0.05, "pick_place": 0.05}
LIFT_MARGIN = 0.015  # pick_place: the cube centre must be this far above its resting height

STATE_LAYOUT: dict[str, slice] = {
    "ee_pos": slice(0, 3),
    "ee_vel": slice(3, 6),
    "gripper": slice(6, 7),
    "cube_pos": slice(7, 10),
    "cube_quat": slice(10, 14),
    "cube_vel": slice(14, 17),
    "cube_rel_ee": slice(17, 20),
    "target_pos": slice(20, 23),
    "target_rel_cube": slice(23, 26),
    "target_rel_ee": slice(26, 29),
}
STATE_DIM = 29

# Desired hand orientation: a half turn about world y (hand z = world -z, hand y = world y).
_HAND_QUAT = np.array([0.0, 0.0, 1.0, 0.0])
_IK_DAMPING = 0.03
_IK_MAX_DQ = 0.4  # rad per IK iteration
_CUBE_PARKED = np.array([0.68, 0.42, CUBE_HALF])
_MAX_LEAD = 0.05  # desired grip position may lead the actual one by at most this much


class ArmEnv(gym.Env):
    """One tabletop manipulation task (see the module docstring for control, observations and rewards).

    Args:
        task: ``"reach"``, ``"push"`` or ``"pick_place"``.
        reward: ``"dense"`` (shaped negative distances) or ``"sparse"`` (1.0 on success).
        pixels: add a ``"pixels"`` camera image to the observation (which becomes a dict).
        pixel_size: (height, width) of the ``"pixels"`` image.
        render_mode: None or ``"rgb_array"`` (``render()`` then returns a frame of ``render_size``).
        render_size: (height, width) of ``render()`` frames.
        camera: camera name or id for pixels and ``render()`` (default the fixed ``"front"`` camera).
        control_hz: control rate. The default 20 Hz is the tasks' rate; another rate (one whose period is a
            whole number of 5 ms physics steps, e.g. 50 Hz for the hardware bridge's real-time loop) scales the
            displacement per step so that a given action is the same hand speed at any rate.

    The env has no time limit of its own; ``TIME_LIMITS[task]`` is applied by ``robot_rl.envs.make``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1.0 / CONTROL_DT))}

    def __init__(
        self,
        task: str = "push",
        reward: str = "dense",
        *,
        pixels: bool = False,
        pixel_size: tuple[int, int] = (84, 84),
        render_mode: str | None = None,
        render_size: tuple[int, int] = (240, 320),
        camera: str | int = "front",
        control_hz: float = 1.0 / CONTROL_DT,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of {REWARDS}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.task, self.reward_type, self.render_mode = task, reward, render_mode
        substeps = 1.0 / (control_hz * TIMESTEP)
        if control_hz <= 0 or abs(substeps - round(substeps)) > 1e-6:
            raise ValueError(
                f"control_hz={control_hz} is not a whole number of {TIMESTEP * 1e3:g} ms physics steps per "
                "control step; use e.g. 10, 20, 25, 40, 50 or 100"
            )
        self.n_substeps = int(round(substeps))
        self.control_dt = self.n_substeps * TIMESTEP
        self.max_delta = MAX_DELTA * self.control_dt / CONTROL_DT
        self.model = build_model()
        self.data = mujoco.MjData(self.model)
        self._ik_data = mujoco.MjData(self.model)
        m = self.model
        self._arm_qpos = np.array([m.joint(j).qposadr[0] for j in ARM_JOINTS])
        self._arm_dof = np.array([m.joint(j).dofadr[0] for j in ARM_JOINTS])
        self._finger_qpos = np.array([m.joint(j).qposadr[0] for j in FINGER_JOINTS])
        self._arm_act = np.array([m.actuator(j).id for j in ARM_JOINTS])
        self._finger_act = np.array([m.actuator(j).id for j in FINGER_JOINTS])
        self._arm_range = m.jnt_range[[m.joint(j).id for j in ARM_JOINTS]].copy()
        self._cube_qpos = m.joint("cube").qposadr[0]
        self._cube_dof = m.joint("cube").dofadr[0]
        self._grip = m.site("grip").id
        self._jac = np.zeros((6, m.nv))  # rows 0:3 translational, 3:6 rotational (contiguous halves)
        self._ik_reg = _IK_DAMPING**2 * np.eye(len(ARM_JOINTS))
        self._arm_dof_slice = slice(int(self._arm_dof[0]), int(self._arm_dof[-1]) + 1)
        assert np.array_equal(self._arm_dof, np.arange(self._arm_dof[0], self._arm_dof[-1] + 1))
        self._camera = m.camera(camera).id if isinstance(camera, str) else int(camera)
        if not 0 <= self._camera < m.ncam:
            raise ValueError(f"camera id {camera} out of range: the scene has {m.ncam} cameras")

        self._pixels = pixels
        self._pixel_renderer: mujoco.Renderer | None = None
        if pixels:
            self._pixel_renderer = mujoco.Renderer(m, *pixel_size)
            # Shadows cost several times the plain render on a software GL (llvmpipe); observations skip them.
            self._pixel_renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        self._renderer: mujoco.Renderer | None = None
        if render_mode == "rgb_array":
            self._renderer = mujoco.Renderer(m, *render_size)

        state_space = gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
        if pixels:
            self.observation_space = gym.spaces.Dict(
                {"state": state_space, "pixels": gym.spaces.Box(0, 255, (*pixel_size, 3), np.uint8)}
            )
        else:
            self.observation_space = state_space
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

        self._q_cmd = np.array(HOME_QPOS, dtype=np.float64)
        self._x_des = np.zeros(3)
        self._target = np.zeros(3)
        self._prev_ee = np.zeros(3)
        self._ee_vel = np.zeros(3)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Draw a new start (grip position, cube pose, target) from ``np_random``; see the module docstring."""
        super().reset(seed=seed)
        rng = self.np_random
        ee0 = rng.uniform([0.3, -0.12, 0.1], [0.42, 0.12, 0.2])
        if self.task == "reach":
            cube_xy, yaw = _CUBE_PARKED[:2], 0.0
            target = _sample_far(rng, [0.25, -0.2, 0.06], [0.5, 0.2, 0.25], ee0, 0.1)
        else:
            cube_xy = rng.uniform([0.28, -0.15], [0.45, 0.15])
            yaw = rng.uniform(-np.pi / 4, np.pi / 4)
            if self.task == "push":
                xy = _sample_far(rng, [0.27, -0.18], [0.48, 0.18], cube_xy, 0.1)
                target = np.array([xy[0], xy[1], CUBE_HALF])
            else:
                xy = _sample_far(rng, [0.27, -0.18], [0.48, 0.18], cube_xy, 0.1)
                target = np.array([xy[0], xy[1], rng.uniform(CUBE_HALF + 0.05, CUBE_HALF + 0.2)])

        d = self.data
        mujoco.mj_resetData(self.model, d)
        q = _analytic_ik(ee0)
        d.qpos[self._arm_qpos] = q
        d.ctrl[self._arm_act] = q
        d.qpos[self._finger_qpos] = FINGER_RANGE[1]
        d.ctrl[self._finger_act] = FINGER_RANGE[1]
        c = self._cube_qpos
        d.qpos[c : c + 3] = (cube_xy[0], cube_xy[1], CUBE_HALF)
        d.qpos[c + 3 : c + 7] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        d.mocap_pos[0] = target
        mujoco.mj_forward(self.model, d)

        self._q_cmd = q
        self._target = np.asarray(target, dtype=np.float64)
        ee = d.site_xpos[self._grip].copy()
        self._x_des = ee.copy()
        self._prev_ee = ee
        self._ee_vel = np.zeros(3)
        return self._observation(), {"success": self._success()}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply one control step (20 Hz unless ``control_hz`` says otherwise); returns ``(obs, reward, terminated, truncated=False, info)``."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (4,):
            raise ValueError(f"action must have shape (4,), got {np.shape(action)}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action contains NaN or inf ({a}); refusing to send it to the simulator")
        a = np.clip(a, -1.0, 1.0)
        m, d = self.model, self.data

        ee = d.site_xpos[self._grip]
        x_des = np.clip(self._x_des + a[:3] * self.max_delta, WORKSPACE_LOW, WORKSPACE_HIGH)
        lead = x_des - ee
        dist = float(np.linalg.norm(lead))
        if dist > _MAX_LEAD:
            x_des = ee + lead * (_MAX_LEAD / dist)
        self._x_des = x_des
        self._q_cmd = self._solve_ik(self._q_cmd, x_des, iters=1)
        d.ctrl[self._arm_act] = self._q_cmd
        d.ctrl[self._finger_act] = FINGER_RANGE[1] * (1.0 - a[3]) / 2.0

        mujoco.mj_step(m, d, nstep=self.n_substeps)
        # Make positions consistent with the final qpos (mj_step leaves them one substep old).
        mujoco.mj_kinematics(m, d)

        ee = d.site_xpos[self._grip].copy()
        self._ee_vel = (ee - self._prev_ee) / self.control_dt
        self._prev_ee = ee
        success = self._success()
        if self.reward_type == "sparse":
            reward = 1.0 if success else 0.0
        else:
            reward = self._dense_reward()
        return self._observation(), reward, success, False, {"success": success}

    def render(self) -> np.ndarray | None:
        """RGB frame (``render_size``) from the env's camera when made with ``render_mode="rgb_array"``."""
        if self._renderer is None:
            return None
        self._renderer.update_scene(self.data, camera=self._camera)
        return self._renderer.render()

    def close(self) -> None:
        """Free the renderers (EGL contexts); safe to call twice."""
        for name in ("_renderer", "_pixel_renderer"):
            renderer = getattr(self, name, None)
            if renderer is not None:
                renderer.close()
                setattr(self, name, None)

    # ------------------------------------------------------------------ internals
    def _solve_ik(self, q0: np.ndarray, x_des: np.ndarray, iters: int) -> np.ndarray:
        """Damped-least-squares IK on a scratch MjData: grip position ``x_des``, hand pointing down."""
        m, k = self.model, self._ik_data
        q = q0.copy()
        cur, neg, err = np.empty(4), np.empty(4), np.empty(4)
        e = np.empty(6)
        jac_p, jac_r = self._jac[:3], self._jac[3:]
        for _ in range(iters):
            k.qpos[self._arm_qpos] = q
            mujoco.mj_kinematics(m, k)
            mujoco.mj_comPos(m, k)
            mujoco.mju_mat2Quat(cur, k.site_xmat[self._grip])
            mujoco.mju_negQuat(neg, cur)
            mujoco.mju_mulQuat(err, _HAND_QUAT, neg)
            if err[0] < 0:
                err *= -1.0
            mujoco.mju_quat2Vel(e[3:], err, 1.0)
            np.subtract(x_des, k.site_xpos[self._grip], out=e[:3])
            mujoco.mj_jacSite(m, k, jac_p, jac_r, self._grip)
            jac = self._jac[:, self._arm_dof_slice]
            dq = np.linalg.solve(jac.T @ jac + self._ik_reg, jac.T @ e)
            scale = np.max(np.abs(dq)) / _IK_MAX_DQ
            if scale > 1.0:
                dq /= scale
            q = np.clip(q + dq, self._arm_range[:, 0], self._arm_range[:, 1])
        return q

    def _state(self) -> np.ndarray:
        d = self.data
        ee = self._prev_ee
        c = self._cube_qpos
        cube = d.qpos[c : c + 3]
        out = np.empty(STATE_DIM, dtype=np.float32)
        out[0:3] = ee
        out[3:6] = self._ee_vel
        out[6] = 2.0 * d.qpos[self._finger_qpos].mean()
        out[7:10] = cube
        out[10:14] = d.qpos[c + 3 : c + 7]
        out[14:17] = d.qvel[self._cube_dof : self._cube_dof + 3]
        out[17:20] = cube - ee
        out[20:23] = self._target
        out[23:26] = self._target - cube
        out[26:29] = self._target - ee
        return out

    def _observation(self) -> Any:
        state = self._state()
        if not self._pixels:
            return state
        assert self._pixel_renderer is not None
        self._pixel_renderer.update_scene(self.data, camera=self._camera)
        return {"state": state, "pixels": self._pixel_renderer.render()}

    def _cube(self) -> np.ndarray:
        return self.data.qpos[self._cube_qpos : self._cube_qpos + 3]

    def _success(self) -> bool:
        radius = SUCCESS_RADIUS[self.task]
        if self.task == "reach":
            return bool(np.linalg.norm(self._prev_ee - self._target) < radius)
        cube = self._cube()
        if self.task == "push":
            return bool(np.linalg.norm(cube[:2] - self._target[:2]) < radius)
        lifted = cube[2] > CUBE_HALF + LIFT_MARGIN
        return bool(lifted and np.linalg.norm(cube - self._target) < radius)

    def _dense_reward(self) -> float:
        ee = self._prev_ee
        if self.task == "reach":
            return -float(np.linalg.norm(ee - self._target))
        cube = self._cube()
        reach = 0.5 * float(np.linalg.norm(ee - cube))
        if self.task == "push":
            return -float(np.linalg.norm(cube[:2] - self._target[:2])) - reach
        return -float(np.linalg.norm(cube - self._target)) - reach


def _analytic_ik(grip: np.ndarray) -> np.ndarray:
    """Closed-form joint angles (elbow up) that put the grip point at ``grip`` with the hand pointing down.

    Used at reset, where the arm jumps to a new pose; the per-step control uses the Jacobian instead.
    """
    x, y, z = grip
    yaw = np.arctan2(y, x)
    reach = np.hypot(x, y)
    height = z + WRIST_TO_GRIP - SHOULDER_HEIGHT
    dist2 = reach**2 + height**2
    cos_elbow = (dist2 - UPPER_ARM**2 - FOREARM**2) / (2 * UPPER_ARM * FOREARM)
    elbow = np.arccos(np.clip(cos_elbow, -1.0, 1.0))
    shoulder = np.arctan2(reach, height) - np.arctan2(
        FOREARM * np.sin(elbow), UPPER_ARM + FOREARM * np.cos(elbow)
    )
    return np.array([yaw, shoulder, elbow, np.pi - shoulder - elbow, yaw])


def _sample_far(
    rng: np.random.Generator, low: Any, high: Any, avoid: np.ndarray, min_dist: float
) -> np.ndarray:
    """Uniform sample in [low, high] at least ``min_dist`` from ``avoid`` (rejection, then the farthest try)."""
    best, best_d = None, -1.0
    for _ in range(100):
        x = rng.uniform(low, high)
        dist = float(np.linalg.norm(x - avoid[: len(x)]))
        if dist >= min_dist:
            return x
        if dist > best_d:
            best, best_d = x, dist
    return best
