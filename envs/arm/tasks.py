"""Tabletop manipulation tasks (reach, push, pick_place, track) for a simulated 5-DoF arm with a parallel gripper:
``ArmEnv``, the gymnasium single env behind ``arm:`` specs and the ``sim_arm`` robot driver.

The tasks are defined once, in torch, by ``robot_rl.envs.sim.tasks.arm.ArmTask`` (which also runs batched on the
``mujoco:``, ``mjx:`` and ``warp:`` backends) with the numbers in ``robot_rl.envs.arm.constants``; ``ArmEnv`` is a
thin adapter that runs one ``ArmTask`` on ``robot_rl.envs.sim.physics.CpuPhysics`` (float64) and renders its pixels.
What follows describes the MDP.

Control. The agent commands the end effector, not the joints: an action is 4 numbers in [-1, 1], the first
three a Cartesian displacement of the ``grip`` point (scaled by ``MAX_DELTA`` = 2.5 cm per step), the fourth
the gripper (-1 fully open, +1 fully closed, linear in between). Each control step (20 Hz: ``N_SUBSTEPS`` = 10
physics steps of 5 ms) the env

1. moves a desired grip position by the action, clips it to the workspace box (``WORKSPACE_LOW`` /
   ``WORKSPACE_HIGH``; its floor keeps the pads 3 mm off the table) and keeps it within 5 cm of the actual grip
   point (no wind-up when something blocks the hand);
2. runs one damped-least-squares IK iteration (analytic Jacobian, equal to ``mj_jacSite``'s; 6-D error: position
   plus the orientation "gripper pointing straight down, fingers opening along world y") from the previously
   commanded joint targets, and sends the result to the joints' position servos;
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
``cube_quat``       10:14  cube orientation (w, x, y, z) up to its 24 symmetries, w >= 0 (``canonical_cube_quat``)
``cube_vel``        14:17  cube linear velocity (m/s)
``cube_rel_ee``     17:20  cube_pos - ee_pos
``target_pos``      20:23  target centre
``target_rel_cube`` 23:26  target_pos - cube_pos
``target_rel_ee``   26:29  target_pos - ee_pos
==================  =====  ============================================================================

With ``pixels=True`` the observation is a dict ``{"state": float32 [7], "pixels/front": uint8 (H, W, 3),
"pixels/wrist": uint8 (H, W, 3)}`` (``PIXEL_CAMERAS``; the ``pixels/<camera>`` groups ``CameraFusion`` encodes),
and ``state`` is proprioception only (``PROPRIO_KEYS``: ``ee_pos``, ``ee_vel``, ``gripper``, in that order): the
cube and the target are what the cameras are for, and a position of either in the state would let a learner
solve the task without looking (``full_state=True`` keeps the full state instead, for a reward classifier's frames
beside a state learner). ``front`` is the fixed camera in front of the table, ``wrist`` rides on the
hand looking along the gripper (see ``robot_rl.envs.arm.model``).

Tasks (time limits in control steps are ``TIME_LIMITS``; sampling boxes in ``robot_rl.envs.arm.constants``).
Initial conditions are drawn from a ``robot_rl.envs.sim.rng.CounterRNG`` stream: ``reset(seed=s)`` seeds it with
``s`` (so ``ArmEnv`` with seed ``s`` starts exactly like sub-env 0 of ``mujoco:<task>`` with seed ``s``), a
reset without a seed continues it, and the first reset without any seed seeds it from ``np_random``:

* ``reach`` (50 steps): bring the grip point to a random target in the air (x 0.25..0.5, y -0.2..0.2,
  z 0.06..0.25 m, at least 10 cm from the start). Success: distance < 3 cm. The cube is parked out of reach.
* ``push`` (100 steps): push the cube (random position and yaw) to a random target on the table at least
  10 cm away. Success: cube-target distance in the table plane < 5 cm.
* ``pick_place`` (100 steps): grasp the cube and hold it at a random target in the air (centre 7..22 cm above
  the table, i.e. the cube's underside 5..20 cm up), at least 10 cm away horizontally. Success: cube-target
  distance < 5 cm with the cube off the table (centre more than 1.5 cm above its resting height).

* ``track`` (100 steps): catch a target that circles above the table (``TRACK_*`` in
  ``robot_rl.envs.arm.constants``: counter-clockwise about a vertical axis at x 0.38, y 0, radius 6..12 cm,
  height 8..20 cm, 15 cm/s, random phase) and move with it. Success: grip point within 3 cm of the target with its
  velocity within 5 cm/s of the target's. The target's velocity follows from its position, so the state is Markov;
  at 15 cm/s it moves 3.75 cm during a 5-step (250 ms) delay, which is what makes it the task where latency
  matters (``env_delay``). The cube is parked out of reach, as in reach.

The grip point starts at a random position above the table (x 0.3..0.42, y -0.12..0.12, z 0.1..0.2) with the
gripper open.

Rewards. ``reward="dense"`` (shaped, always <= 0, so ending the episode early by succeeding is never
penalised):

* reach and track: ``-|ee - target|``
* push: ``-|cube_xy - target_xy| - 0.5 |ee - cube|``
* pick_place: ``-|cube - target| - 0.5 |ee - cube|``

``reward="sparse"``: 1.0 on a step where the task is solved, else 0.0. Both variants terminate
(``terminated=True``) on success unless made with ``end_on_success=False``, and ``info["success"]`` is reported on
every step.

Cost (shared 2-core development machine, other jobs running, so figures are rough): about 0.7 ms per env step
with state observations, against 0.18 ms for the numpy implementation this adapter replaced (measured in the
same process): the torch task's ~150 operations on 1-row tensors dominate, the 10 physics substeps take ~0.15 ms.
A 5 ms timestep was kept because 10 ms made grasps fail (pick_place expert 21 %) and 6.25 ms made noisy
grasps less reliable. Pixel observations add two 84x84 renders per step (front and wrist): measured 14.4 ms per
step against 3.4 ms with state observations (200 random steps of ``push``, EGL on llvmpipe, on the shared
machine under two benchmark processes), i.e. about 11 ms of rendering, 5-6 ms per camera.
The observation renderer skips shadows (they made a render ~3x slower on software GL).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import torch

from ..sim.render import close_renderer, open_renderer
from .constants import (
    CONTROL_DT,
    CUBE_HALF,
    MIRROR_CAMERAS,
    PIXEL_CAMERAS,
    PRACTICE_CARRY_HEIGHT,
    PRACTICE_CLEARANCE,
    PRACTICE_PUSH_S,
    PRACTICE_RELEASE_S,
    PRACTICE_RESET_S,
    PRACTICE_RESET_TOL,
    PRACTICE_RESETS,
    PRACTICE_REST,
    PRACTICE_SETTLE_S,
    PROPRIO_INDEX,
    PROPRIO_MIRROR_SIGN,
    STATE_DIM,
    STATE_LAYOUT,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)


class ArmEnv(gym.Env):
    """One tabletop manipulation task (see the module docstring for control, observations and rewards).

    Args:
        task: ``"reach"``, ``"push"``, ``"pick_place"`` or ``"track"``.
        reward: ``"dense"`` (shaped negative distances) or ``"sparse"`` (1.0 on success).
        pixels: observe ``{"state": proprioception, "pixels/front": ..., "pixels/wrist": ...}`` instead of the full
            state vector (see the module docstring).
        pixel_size: (height, width) of each camera image.
        full_state: with ``pixels``, ``state`` is the full task state (as without ``pixels``) instead of the
            proprioception: frames for a camera reward classifier beside a learner that reads the scene's state
            (``robot-rl train env.reward_classifier=`` on a state task), not a pixel task (it leaks the scene).
        render_mode: None or ``"rgb_array"`` (``render()`` then returns a frame of ``render_size``).
        render_size: (height, width) of ``render()`` frames.
        camera: camera name or id for ``render()`` (default the fixed ``"front"`` camera); pixel observations
            always come from ``PIXEL_CAMERAS``.
        control_hz: control rate. The default 20 Hz is the tasks' rate; another rate (one whose period is a
            whole number of 5 ms physics steps, e.g. 50 Hz for the hardware bridge's real-time loop) scales the
            displacement per step so that a given action is the same hand speed at any rate.
        end_on_success: ``terminated=True`` at the task's success (the default). False: the episode goes on (only
            the time limit, or a reward classifier wrapped around the env, ends it) while ``info["success"]`` and
            the sparse reward still report every solved step: training on a learned reward, where on a robot
            nothing but the classifier knows of success.
        practice: autonomous practice (reset-free). A ``reset()`` without a seed after an episode does not put the
            scene back: the arm goes home to a fresh start pose (as a robot's own reset motion takes it; gripper
            open), the cube stays where the last episode left it, and a new target is drawn for it by the task's
            rule (``ArmTask.practice_state``). Only a scene the arm cannot recover from (push, pick_place: the cube
            outside ``PRACTICE_XY_BOX`` or off the table) gets a full reset, a *human reset*: counted in
            ``human_resets`` and flagged ``info["human_reset"]``. A seeded reset is the setup, always full, and not
            counted. On push and pick_place the practice scene has an enclosure (``model.build_xml(fences=True)``: a
            fence between the robot's base and the workspace, slippery ramps with fences behind them at the sides and
            the far end), as a person setting up a robot to practise alone would build: a pushed cube stays where
            the hand can still pick it up.
        practice_reset: what puts the scene back between practice episodes. ``"expert"`` (the default): a reset
            controller first moves the cube to a fresh start of the task (the one a person's reset would give): a
            held cube is put down, then the scripted push expert pushes the cube there (the pick_place expert
            picks it up and carries it where a push cannot reach it), for at most ``PRACTICE_RESET_S``
            seconds of control steps, all simulated and counted in ``reset_motion_steps`` (robot time no episode learns from;
            ``info["reset_steps"]``); then the arm goes home. On a robot this is a scripted reset that reads the
            cube's measured pose. ``"home"``: only the arm goes home; the cube stays where the episode left it
            (RLPD on push-sparse then practised at 4% against 86% with a person's reset every episode,
            bench/results/practice_push).

    The env has no time limit of its own; ``TIME_LIMITS[task]`` is applied by ``robot_rl.envs.make``. Stepping
    after ``terminated`` goes on simulating the same episode. ``arm_task`` holds the ``ArmTask`` (its per-env state:
    ``target``, ``x_des``, ``q_cmd``, ``prev_ee``, ``ee_vel``) and ``physics`` the ``CpuPhysics``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1.0 / CONTROL_DT))}

    def __init__(
        self,
        task: str = "push",
        reward: str = "dense",
        *,
        pixels: bool = False,
        pixel_size: tuple[int, int] = (84, 84),
        full_state: bool = False,
        render_mode: str | None = None,
        render_size: tuple[int, int] = (240, 320),
        camera: str | int = "front",
        control_hz: float = 1.0 / CONTROL_DT,
        end_on_success: bool = True,
        practice: bool = False,
        practice_reset: str = "expert",
    ) -> None:
        # Lazy: robot_rl.envs.sim.tasks.arm imports this package's model and constants.
        from ..sim.physics import CpuPhysics
        from ..sim.rng import CounterRNG
        from ..sim.tasks.arm import ArmTask

        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        # checks task, reward and control_hz; practice's scene has the fences that keep a pushed cube within reach
        self.arm_task = ArmTask(task, reward, control_hz=control_hz, fences=bool(practice) and task in ("push", "pick_place"))
        self.task, self.reward_type, self.render_mode = task, reward, render_mode
        self.end_on_success = bool(end_on_success)
        self.practice = bool(practice)
        if practice_reset not in PRACTICE_RESETS:
            raise ValueError(f"practice_reset must be one of {PRACTICE_RESETS}, got {practice_reset!r}")
        self.practice_reset = practice_reset
        self.reset_motion_steps = 0  # practice: control steps of the reset controller and the settling, in all
        self.human_resets = 0  # practice: full resets a person would have had to do (the seeded setup not counted)
        self.practice_resets = 0  # practice: episodes that went on from the scene as it was
        self._episode_ran = False
        self.n_substeps, self.control_dt, self.max_delta = (
            self.arm_task.frame_skip,
            self.arm_task.control_dt,
            self.arm_task.max_delta,
        )
        m = self.model = self.arm_task.build_model()
        for height, width in (pixel_size, render_size):
            m.vis.global_.offwidth = max(m.vis.global_.offwidth, width)
            m.vis.global_.offheight = max(m.vis.global_.offheight, height)
        cpu = torch.device("cpu")
        self.physics = CpuPhysics(m, 1, cpu, nthread=1)
        self.arm_task.setup(m, 1, cpu, self.physics.dtype)
        self._rng = CounterRNG(1, cpu)
        self._seeded = False
        self._all = torch.ones(1, dtype=torch.bool)
        self._camera = m.camera(camera).id if isinstance(camera, str) else int(camera)
        if not 0 <= self._camera < m.ncam:
            raise ValueError(f"camera id {camera} out of range: the scene has {m.ncam} cameras")
        self._data = mujoco.MjData(m)  # filled from the physics for rendering
        self._data_fresh = False
        self._full_state: np.ndarray | None = None  # of the latest observation (``privileged_state``)
        self._pixel_renderer: mujoco.Renderer | None = None
        self._pixel_cameras = {f"pixels/{name}": m.camera(name).id for name in PIXEL_CAMERAS}
        self._proprio = np.asarray(PROPRIO_INDEX) if not full_state else np.arange(STATE_DIM)
        if pixels:
            self._pixel_renderer = open_renderer(m, *pixel_size)
            # Shadows cost several times the plain render on a software GL (llvmpipe); observations skip them.
            self._pixel_renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        self._renderer: mujoco.Renderer | None = None
        if render_mode == "rgb_array":
            self._renderer = open_renderer(m, *render_size)

        if pixels:
            image = gym.spaces.Box(0, 255, (*pixel_size, 3), np.uint8)
            self.observation_space = gym.spaces.Dict(
                {"state": gym.spaces.Box(-np.inf, np.inf, (len(self._proprio),), np.float32),
                 **{group: image for group in self._pixel_cameras}}
            )
        else:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Draw a new start (grip position, cube pose, target); see the module docstring for the random stream."""
        super().reset(seed=seed)
        task, physics = self.arm_task, self.physics
        human_reset, reset_steps = False, 0
        practising = self.practice and seed is None and self._episode_ran
        if practising:  # the arm goes home, the cube stays
            if self.practice_reset == "expert" and task.task in ("push", "pick_place"):
                reset_steps = self._put_cube_back()
            qpos_now, qvel_now = physics.state()
            qpos, qvel, ctrl, stuck = task.practice_state(self._rng, qpos_now, qvel_now)
            human_reset = bool(stuck[0])
            self.human_resets += human_reset
            self.practice_resets += not human_reset
        else:
            self._seed_stream(seed)
            qpos, qvel, ctrl = task.initial_state(self._rng)
        physics.reset(self._all, qpos, qvel, ctrl)
        task.commit_reset(self._all)
        if practising and not human_reset and task.task in ("push", "pick_place"):
            reset_steps += self._settle(ctrl)  # the cube comes to rest while the arm goes home
        self.reset_motion_steps += reset_steps
        self._rng.advance()
        self._episode_ran = False
        qpos, qvel = physics.state()
        _, success = task.score(qpos)
        info = {"success": bool(success[0])}
        if self.practice:
            info["human_reset"] = human_reset
            info["reset_steps"] = reset_steps
        return self._observation(qpos, qvel), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply one control step (20 Hz unless ``control_hz`` says otherwise); returns ``(obs, reward, terminated, truncated=False, info)``."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (4,):
            raise ValueError(f"action must have shape (4,), got {np.shape(action)}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action contains NaN or inf ({a}); refusing to send it to the simulator")
        task, physics = self.arm_task, self.physics
        self._episode_ran = True
        qpos, qvel = physics.state()
        ctrl = task.control(torch.from_numpy(np.clip(a, -1.0, 1.0)[None]), qpos, qvel)
        physics.step(ctrl, task.frame_skip)
        qpos_after, qvel = physics.state()
        reward, terminated, success = task.evaluate(qpos, qpos_after, qvel, ctrl)
        obs = self._observation(qpos_after, qvel)
        ended = bool(terminated[0]) and self.end_on_success
        return obs, float(reward[0]), ended, False, {"success": bool(success[0])}

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
            setattr(self, name, None)  # first: a close that raises is not tried again by __del__
            close_renderer(renderer)

    def __del__(self) -> None:
        # an env dropped without close() must not free another env's GL objects (envs/sim/render.py)
        self.close()

    # ------------------------------------------------------------------ for the robot driver and tests
    @property
    def data(self) -> mujoco.MjData:
        """An ``MjData`` with the current state (positions computed, target marker placed); read-only use."""
        if not self._data_fresh:
            self.physics.get_data(0, self._data)
            self._data.mocap_pos[:] = self.arm_task.mocap_pos(0)
            mujoco.mj_forward(self.model, self._data)
            self._data_fresh = True
        return self._data

    def privileged_state(self) -> np.ndarray:
        """The full task state (float32 [29], ``STATE_LAYOUT``) behind the current observation, also with ``pixels=True``.

        Not part of the observation: it is the channel a privileged scripted expert steers by when demonstrations are
        recorded in a ``-pixels`` task (as in SERL / HIL-SERL, whose demos come from an operator who sees the scene;
        here a script that reads the simulator). ``robot-rl collect`` reads it through
        ``BatchedEnv.privileged_state()``; learners, replay buffers and datasets never receive it.
        """
        if self._full_state is None:
            raise RuntimeError("call reset() before privileged_state()")
        return self._full_state.copy()

    def reflection(self) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]] | None:
        """(state signs, action signs, mirrored camera groups): ``ArmTask.reflection`` and no camera for the state
        observation; with ``pixels=True`` the proprioception's signs (the full state's with ``full_state``) and both
        cameras (``MIRROR_CAMERAS``)."""
        signs = self.arm_task.reflection()
        if signs is None:
            return None
        if self._pixel_renderer is None:
            return signs[0], signs[1], ()
        state_signs = signs[0] if len(self._proprio) == STATE_DIM else PROPRIO_MIRROR_SIGN.copy()
        return state_signs, signs[1], MIRROR_CAMERAS

    def hold(self) -> None:
        """Freeze the servo targets on the measured pose (``ArmTask.hold``); time does not advance."""
        self.arm_task.hold(self.physics.state()[0])

    def reset_position(self, seed: int | None = None) -> np.ndarray:
        """The grip position that ``reset(seed=seed)`` would start from; this env's random stream is untouched."""
        rng = copy.deepcopy(self._rng)
        if seed is not None:
            rng.seed(seed)
        elif not self._seeded:  # the first reset would seed from np_random: draw from a copy of it
            rng.seed(_stream_seed(copy.deepcopy(self.np_random)))
        return self.arm_task.start_grip(rng)[0].numpy().copy()

    # ------------------------------------------------------------------ internals
    def _settle(self, ctrl: torch.Tensor) -> int:
        """Practice: the arm holds at home while the cube comes to rest (the time a robot's reset motion takes);
        the control steps it took (robot time, counted in ``reset_steps``)."""
        task, physics = self.arm_task, self.physics
        for step in range(round(PRACTICE_SETTLE_S / self.control_dt)):
            if float(task.cube_speed(physics.state()[1])[0]) <= PRACTICE_REST:
                return step
            physics.step(ctrl, task.frame_skip)
        return round(PRACTICE_SETTLE_S / self.control_dt)

    def _put_cube_back(self) -> int:
        """Practice's reset controller (``practice_reset="expert"``): the cube to a fresh start, in simulated control
        steps; how many it ran. The goal comes from this reset's own draw (``ArmTask.start_cube``), so the scene
        then starts as a full reset would have, up to ``PRACTICE_RESET_TOL`` and the cube's yaw, with the cube at
        rest. A cube the hand can push back (inside ``PRACTICE_XY_BOX``) is pushed by the push expert; one beyond
        it, or one the push has not brought back within ``PRACTICE_PUSH_S``, is picked up by the pick_place expert,
        carried to the goal and put down (a pushed cube that strays towards the robot's base can no longer be got
        behind). A cube it cannot bring back within ``PRACTICE_RESET_S`` stays where it got to: beyond
        ``PRACTICE_XY_BOX`` it is a human reset."""
        from .experts import ScriptedExpert  # lazy: the experts' module imports this package's specs

        task, physics = self.arm_task, self.physics
        goal = task.start_cube(copy.deepcopy(self._rng))
        carry_to = goal.clone()
        carry_to[:, 2] += PRACTICE_CARRY_HEIGHT
        pusher, picker = ScriptedExpert("push", 1), ScriptedExpert("pick_place", 1)
        lower, release = torch.tensor([[0.0, 0.0, -1.0, 1.0]]), torch.tensor([[0.0, 0.0, 0.0, -1.0]])
        lift = torch.tensor([[0.0, 0.0, 1.0, 1.0]])  # opening the fingers beside the cube would kick it
        release_steps = max(1, round(PRACTICE_RELEASE_S / self.control_dt))
        max_steps = round(PRACTICE_RESET_S / self.control_dt)
        push_steps = round(PRACTICE_PUSH_S / self.control_dt)
        reach_low, reach_high = (torch.tensor(edge[:2], dtype=torch.float32) for edge in (WORKSPACE_LOW, WORKSPACE_HIGH))
        cube_xy = slice(STATE_LAYOUT["cube_pos"].start, STATE_LAYOUT["cube_pos"].start + 2)
        qpos = physics.state()[0]
        # A cube held in the air is put down and let go; a cube on the table is left alone while the hand rises
        # clear of it with its fingers as they are (opening or closing them beside the cube kicks or grasps it).
        in_air = float(task.cube_position(qpos)[0, 2]) > CUBE_HALF + 0.01
        phase, phase_steps, pushed = ("put_down" if in_air else "clear"), 0, 0
        for step in range(max_steps):
            qpos, qvel = physics.state()
            cube = task.cube_position(qpos)[0]
            there = bool(torch.linalg.vector_norm(cube[:2] - goal[0, :2]) < PRACTICE_RESET_TOL)
            on_table = float(cube[2]) < CUBE_HALF + 0.005
            if there and on_table and float(task.cube_speed(qvel)[0]) <= PRACTICE_REST:
                return step
            # The experts read their goal from the observed target: the start for a push, above it for a carry.
            task.target = (carry_to if phase == "pick" else goal).to(task.target.dtype)
            state = task.observe(qpos, qvel)
            new = phase
            if phase == "put_down" and not (float(cube[2]) > CUBE_HALF + 0.01 and phase_steps < max_steps // 4):
                new = "open"
            elif phase == "open" and phase_steps >= release_steps:
                new = "clear"
            elif phase == "clear" and state[0, 2] >= cube[2] + PRACTICE_CLEARANCE:
                new = "push" if not bool(task.beyond_push(qpos)[0]) and pushed < push_steps else "pick"
            elif phase == "push" and not there and pushed >= push_steps:
                new = "clear"  # the push is not getting there: pick it up instead
            elif phase == "pick" and there and float(cube[2]) > CUBE_HALF + 0.005:
                new = "put_down"  # carried above the start: lower it, let go, rise clear
            if new != phase:
                phase, phase_steps = new, 0
                pusher.reset()
                picker.reset()
            if phase == "put_down":
                action = lower  # dropped from the air, a cube flies off
            elif phase == "open":
                action = release
            elif phase == "clear":
                action = torch.tensor([[0.0, 0.0, 1.0, float(task.finger_hold_command(qpos)[0])]])
            elif there and phase == "push":
                action = lift  # off the cube, fingers closed, while it comes to rest (momentum carries it on)
            elif phase == "push":
                action, pushed = pusher.act(state), pushed + 1
            else:  # aimed at the nearest point the grip reaches: closing there draws in a cube a little beyond it
                aim = state.clone()
                aim[0, cube_xy] = torch.maximum(torch.minimum(aim[0, cube_xy], reach_high), reach_low)
                action = picker.act(aim)
            phase_steps += 1
            ctrl = task.control(action, qpos, qvel)
            physics.step(ctrl, task.frame_skip)
            task.evaluate(qpos, physics.state()[0], qvel, ctrl)  # the task's hand velocity follows the motion
        return max_steps

    def _seed_stream(self, seed: int | None) -> None:
        if seed is not None:
            self._rng.seed(seed)
        elif not self._seeded:
            self._rng.seed(_stream_seed(self.np_random))
        self._seeded = True

    def _observation(self, qpos: torch.Tensor, qvel: torch.Tensor) -> Any:
        self._data_fresh = False
        state = self.arm_task.observe(qpos, qvel)[0].numpy()
        self._full_state = state
        if self._pixel_renderer is None:
            return state
        obs = {"state": state[self._proprio]}
        for group, camera in self._pixel_cameras.items():
            self._pixel_renderer.update_scene(self.data, camera=camera)
            obs[group] = self._pixel_renderer.render()  # a fresh array per call: nothing aliases the next frame
        return obs


def _stream_seed(np_random: np.random.Generator) -> int:
    """A CounterRNG seed from gymnasium's ``np_random`` (for a first reset without a seed)."""
    return int(np_random.integers(0, 2**62))
