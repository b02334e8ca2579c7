"""Every number of the tabletop arm tasks' MDP, in one place (the scene's geometry is in ``model``).

``robot_rl.envs.sim.tasks.arm.ArmTask`` (the task definition) reads them; ``robot_rl.envs.arm.tasks`` re-exports the
public ones for ``ArmEnv``'s users. This module imports nothing but ``model`` and ``robot_rl.envs.arm_specs``, so any module may import it.
"""

from __future__ import annotations

import math

import numpy as np

from ..arm_specs import TASKS  # noqa: F401  (re-exported: the arm package reads its task names here)
from .model import CUBE_HALF, TIMESTEP

TIME_LIMITS = {"reach": 50, "push": 100, "pick_place": 100, "track": 100}  # control steps at 20 Hz
REWARDS = ("dense", "sparse")
N_SUBSTEPS = 10
CONTROL_DT = N_SUBSTEPS * TIMESTEP  # 0.05 s, i.e. 20 Hz
MAX_DELTA = 0.025  # metres of grip-point displacement per control step at |action| = 1 (at 20 Hz)
WORKSPACE_LOW = np.array([0.15, -0.28, 0.018])  # the floor keeps the pads 3 mm off the table
WORKSPACE_HIGH = np.array([0.6, 0.28, 0.32])
SUCCESS_RADIUS = {"reach": 0.03, "push": 0.05, "pick_place": 0.05, "track": 0.03}
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
# What a robot knows about itself without a model of the scene: the state of the ``-pixels`` tasks, whose cube and
# target must be seen by the cameras (a cube or target position in the state would let the learner ignore them).
PROPRIO_KEYS = ("ee_pos", "ee_vel", "gripper")
PROPRIO_INDEX = tuple(i for key in PROPRIO_KEYS for i in range(STATE_LAYOUT[key].start, STATE_LAYOUT[key].stop))
PROPRIO_DIM = len(PROPRIO_INDEX)  # 7
PIXEL_CAMERAS = ("front", "wrist")  # the cameras of a -pixels observation, as groups "pixels/<camera>"

# The mirror symmetry y -> -y (``ArmTask.reflection``). The arm (base yaw about z, pitch joints about the rotated
# y axis, two identical fingers), the workspace and the push and pick_place reset boxes are all symmetric about the
# plane y = 0, so an episode reflected in it is another episode of the same task: every y coordinate of the state
# (positions, velocities, relative vectors) and the action's y displacement change sign, and the cube quaternion
# (w, x, y, z) becomes (w, -x, y, -z). reach parks its cube at +y (``CUBE_PARKED``), which the reflection would move.
MIRROR_TASKS = ("push", "pick_place")
# the y entry of every 3-vector, the quaternion's x and z; the gripper's opening (1-D) keeps its sign
_FLIPPED = [p.start + 1 for k, p in STATE_LAYOUT.items() if k != "cube_quat" and p.stop - p.start == 3]
_FLIPPED += [STATE_LAYOUT["cube_quat"].start + 1, STATE_LAYOUT["cube_quat"].start + 3]
STATE_MIRROR_SIGN = np.array([-1.0 if i in _FLIPPED else 1.0 for i in range(STATE_DIM)], dtype=np.float32)
ACTION_MIRROR_SIGN = np.array([1.0, -1.0, 1.0, 1.0], dtype=np.float32)  # (dx, dy, dz, gripper)
PROPRIO_MIRROR_SIGN = STATE_MIRROR_SIGN[list(PROPRIO_INDEX)].copy()  # the -pixels tasks' state
# The -pixels cameras both lie in the plane y = 0 (``front`` in the world's, ``wrist`` in the hand's, which the
# reflection maps onto itself) with their image x axis across it, and the scene is symmetric (``model.py``: the
# light and the table's checks), so a left-right flip of their frames is the reflected episode's frame.
MIRROR_CAMERAS = tuple(f"pixels/{name}" for name in PIXEL_CAMERAS)

# Controller.
HAND_QUAT = (0.0, 0.0, 1.0, 0.0)  # desired hand orientation: a half turn about world y (hand z = world -z)
IK_DAMPING = 0.03
IK_MAX_DQ = 0.4  # rad per IK iteration
MAX_LEAD = 0.05  # the desired grip position may lead the measured one by at most this much
# The desired grip point is kept where the arm reaches it: its wrist centre at most this far from the shoulder (the
# straight arm reaches 0.64 m; 0.63 m leaves the elbow bent by 0.35 rad). The workspace box's far corners lie beyond
# the arm; chasing such a point, the IK crossed the straight-arm singularity every tick and its clipped steps flipped
# the elbow back and forth, so the hand shook at 1.1-1.5 m/s, holding or not. Every reset box and target is within.
REACH_MAX = 0.63

# Reset: uniform boxes ((low...), (high...)).
EE0_BOX = ((0.3, -0.12, 0.1), (0.42, 0.12, 0.2))  # grip point at the start
REACH_TARGET_BOX = ((0.25, -0.2, 0.06), (0.5, 0.2, 0.25))
CUBE_XY_BOX = ((0.28, -0.15), (0.45, 0.15))
TARGET_XY_BOX = ((0.27, -0.18), (0.48, 0.18))  # push and pick_place
MAX_YAW = math.pi / 4  # cube yaw in [-MAX_YAW, MAX_YAW]
PICK_HEIGHT = (CUBE_HALF + 0.05, CUBE_HALF + 0.2)  # pick_place target centre height
# Autonomous practice (reset-free): a cube outside this box needs a person (``ArmTask.practice_target``), once the
# reset controller has tried. The hand's workspace ends at x 0.15..0.6 and y +-0.28 (x 0.6 beyond the arm's reach at
# the table), and pushing a cube back needs the hand 6 cm behind it, so beyond these edges the cube can no longer be
# pushed towards the middle: the controller picks it up instead (practice_reset="expert").
PRACTICE_XY_BOX = ((0.21, -0.22), (0.54, 0.22))
# Practice's reset controller (``ArmEnv(practice_reset="expert")``): a cube held in the air is put down on the
# table and let go (the hand open for PRACTICE_RELEASE_S seconds); the hand rises to PRACTICE_CLEARANCE above the
# cube; then the scripted push expert moves the cube to a fresh start, for at most PRACTICE_RESET_S seconds in all
# (200 control steps at 20 Hz; 23-28 on average), until the cube is within PRACTICE_RESET_TOL of it (in the plane)
# and at rest. At 2 cm the expert's last corrections sometimes kicked the cube off the table's usable part: a
# trained push policy's practice then needed 2 human resets in 150 episodes from the controller, none at 3 cm.
PRACTICE_RELEASE_S = 0.3
# A cube outside PRACTICE_XY_BOX, or one the push has not brought back after PRACTICE_PUSH_S seconds of pushing, is
# picked up by the pick_place expert instead, carried PRACTICE_CARRY_HEIGHT above the start, put down and let go.
PRACTICE_PUSH_S = 4.0
PRACTICE_CARRY_HEIGHT = 0.03
PRACTICE_CLEARANCE = 0.05
PRACTICE_RESET_S = 10.0
PRACTICE_RESET_TOL = 0.03
PRACTICE_RESETS = ("expert", "home")
# Practice: while the arm goes home the cube comes to rest; the reset simulates up to PRACTICE_SETTLE_S seconds of
# control steps with the arm at home until no velocity component of the cube exceeds PRACTICE_REST (m/s, rad/s).
# Without it an episode started with the cube still sliding or tumbling from the last push (up to 3 rad/s), and RLPD
# on push practised at 2-29% with the reset controller.
PRACTICE_SETTLE_S = 2.0
PRACTICE_REST = 0.01
MIN_TARGET_DIST = 0.1  # target at least this far from the start (reach: grip point; else cube, in the plane)
CUBE_PARKED = (0.68, 0.42, CUBE_HALF)  # reach and track: the cube sits out of the way

# track: the target circles a vertical axis through TRACK_CENTRE_XY, counter-clockwise seen from above, at
# TRACK_SPEED, on a circle of radius uniform in TRACK_RADIUS at a height uniform in TRACK_HEIGHT, from a uniform
# phase. Direction and speed are fixed, so the target's velocity is a function of its position (the state stays
# Markov without a velocity entry): ``speed * (-(y - cy), x - cx) / r``. At 0.15 m/s the target moves 3.75 cm
# during a 5-step (250 ms) delay, more than the success radius: a policy must act ahead of it.
TRACK_CENTRE_XY = (0.38, 0.0)
TRACK_RADIUS = (0.06, 0.12)
TRACK_HEIGHT = (0.08, 0.2)
TRACK_SPEED = 0.15  # m/s along the circle
TRACK_SPEED_TOL = 0.05  # m/s: success needs the hand's velocity within this of the target's
