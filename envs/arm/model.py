"""MJCF for the tabletop arm scene, written from primitives (nothing is downloaded).

Scene (world frame: metres, z up, table surface at z = 0, robot base at the origin, workspace in +x):

* ``table``: a box whose top face is the plane z = 0.
* a 5-DoF arm built from capsules: ``j1`` base yaw, ``j2`` shoulder pitch, ``j3`` elbow pitch, ``j4`` wrist pitch,
  ``j5`` wrist roll (about the gripper's approach axis). Five joints are exactly enough for a position plus
  "gripper points straight down with a fixed yaw": base yaw and the three pitch joints keep the arm in a vertical
  plane, the pitch chain places the wrist and points the hand down, and the wrist roll cancels the base yaw.
  Every arm joint has a position actuator (stiff ``kp``, critically damped via ``dampratio``) and every arm
  body has ``gravcomp="1"`` so the servos only track, never hold weight. Arm links do not collide (they are
  visual and inertial only); the palm and finger pads do.
* a parallel gripper: two slide fingers, each on its own position actuator; the env gives both the same
  target, which couples them without an equality constraint (and lets a grasp centre itself). The pads are
  friction-2, ``condim=4`` (torsional friction stops the cube spinning in the grasp).
* ``cube``: 4 cm, 50 g, free joint, friction 0.6 against the table (MuJoCo combines friction by taking the
  maximum, so finger-cube contacts get the pads' 2.0 while cube-table contacts keep 0.6, making pushing easy
  and grasping firm).
* ``ramp_*`` and ``fence_*`` geoms (only in autonomous practice's scene, ``build_xml(fences=True)``): slippery
  ramps at the sides and along the hand's far reach, fences behind them and between the robot's base and the
  workspace (``FENCE_NEAR_X``), as a person setting up a robot to practise alone would build them, so that a pushed
  cube stays where the reset controller can pick it up.
* ``target``: a mocap body carrying a translucent sphere site (no collision), so each env's target moves
  through ``data.mocap_pos`` and one compiled ``MjModel`` can be shared by all envs of a process.
* ``grip`` site: the point midway between the finger pads, 1.5 cm above the pads' lower edge; this is the
  end-effector point that the observations, IK and rewards use.
* camera ``front``: fixed, in front of the table, looking back at the workspace and the robot; ``side``: fixed,
  beside the table (videos); ``wrist``: on the hand, 4.5 cm off the approach axis beside the palm and tilted
  25 degrees towards it, looking along the gripper at the fingers and what lies between them (a wrist camera
  sees the grasp the front camera's view of the hand hides). Body cameras are numbered after the world's, so
  ``front`` stays 0 and ``side`` 1.
* mirror symmetry: the scene is its own mirror image in the plane y = 0, what the frames need for the tasks'
  reflection (``constants.MIRROR_CAMERAS``): the light comes from above in that plane, and the table's checks
  repeat 5.5 times across its width, which puts a check edge's mirror image on a check edge (6 repeats did not:
  a flipped ``front`` frame then differed from the reflected episode's by 8 grey levels on average, 0.4 now).

Physics: 5 ms timestep, ``implicitfast`` integrator (stable with stiff, damped servos).
"""

from __future__ import annotations

import functools
import math

import mujoco

# Geometry shared with the env (envs.arm.tasks) and its IK.
CUBE_HALF = 0.02  # cube half-size (m)
# Each finger's slide range: its pad's inner face sits at +-q from the gripper's centre plane.
FINGER_RANGE = (0.0, 0.045)
TIMESTEP = 0.005
ARM_JOINTS = ("j1", "j2", "j3", "j4", "j5")
FINGER_JOINTS = ("finger_l", "finger_r")
# Arm dimensions (m), used by the MJCF below and by the env's closed-form IK at reset.
SHOULDER_HEIGHT = 0.12  # j2 axis above the table
UPPER_ARM = 0.32  # j2 -> j3
FOREARM = 0.32  # j3 -> j4
WRIST_TO_GRIP = 0.15  # j4 -> grip site, along the hand's approach axis
# Home configuration (radians): gripper above the middle of the workspace, pointing down.
HOME_QPOS = (0.0, 0.35, 1.75, 1.04, 0.0)

_XML = """
<mujoco model="arm_tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{timestep}" integrator="implicitfast"/>
  <size memory="2M"/>
  <visual>
    <global offwidth="640" offheight="480"/>
    <quality shadowsize="1024"/>
    <headlight ambient="0.35 0.35 0.35" diffuse="0.5 0.5 0.5"/>
  </visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.55 0.45 0.35" rgb2="0.5 0.4 0.3"
             width="256" height="256" mark="edge" markrgb="0.45 0.35 0.25"/>
    <material name="table" texture="grid" texrepeat="6 5.5"/>
    <material name="link" rgba="0.85 0.85 0.88 1"/>
    <material name="joint" rgba="0.25 0.25 0.3 1"/>
    <material name="pad" rgba="0.15 0.15 0.15 1"/>
    <material name="cube" rgba="0.85 0.2 0.15 1"/>
  </asset>
  <default>
    <joint damping="2" armature="0.02"/>
    <geom contype="0" conaffinity="0" material="link"/>
    <position kp="800" dampratio="1" forcerange="-150 150"/>
    <default class="collide">
      <geom contype="1" conaffinity="1" condim="4" friction="2 0.02 0.001" solref="0.01 1"/>
    </default>
  </default>
  <worldbody>
    <light pos="-0.2 0 1.5" dir="0.3 0 -1" directional="true" diffuse="0.6 0.6 0.6"/>
    <geom name="floor" type="plane" pos="0 0 -0.75" size="3 3 0.1" rgba="0.3 0.32 0.35 1"/>
    <geom name="table" type="box" pos="0.3 0 -0.025" size="0.45 0.55 0.025" material="table"
          contype="1" conaffinity="1" friction="0.6 0.005 0.0001"/>
    <geom name="table_leg" type="box" pos="0.3 0 -0.39" size="0.05 0.05 0.34" material="joint"/>
    <camera name="front" pos="0.95 0 0.5" xyaxes="0 1 0 -0.573 0 0.819" fovy="45"/>
    <camera name="side" pos="0.35 -0.9 0.45" xyaxes="1 0 0 0 0.45 0.9" fovy="50"/>
    <geom name="base" type="cylinder" pos="0 0 0.02" size="0.07 0.02" material="joint"/>{fences}
    <body name="link1" pos="0 0 0.04" gravcomp="1">
      <joint name="j1" axis="0 0 1" range="-2.5 2.5"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.08" size="0.045"/>
      <body name="link2" pos="0 0 0.08" gravcomp="1">
        <joint name="j2" axis="0 1 0" range="-1.6 1.6"/>
        <geom type="cylinder" fromto="0 -0.045 0 0 0.045 0" size="0.04" material="joint"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.32" size="0.032"/>
        <body name="link3" pos="0 0 0.32" gravcomp="1">
          <joint name="j3" axis="0 1 0" range="-0.2 2.7"/>
          <geom type="cylinder" fromto="0 -0.038 0 0 0.038 0" size="0.034" material="joint"/>
          <geom type="capsule" fromto="0 0 0 0 0 0.32" size="0.027"/>
          <body name="link4" pos="0 0 0.32" gravcomp="1">
            <joint name="j4" axis="0 1 0" range="-2.2 2.2"/>
            <geom type="cylinder" fromto="0 -0.032 0 0 0.032 0" size="0.028" material="joint"/>
            <geom type="capsule" fromto="0 0 0 0 0 0.035" size="0.022"/>
            <body name="hand" pos="0 0 0.05" gravcomp="1">
              <joint name="j5" axis="0 0 1" range="-3.0 3.0"/>
              <geom type="cylinder" fromto="0 0 0 0 0 0.01" size="0.03" material="joint"/>
              <geom name="palm" class="collide" type="box" pos="0 0 0.02" size="0.02 0.055 0.01"/>
              <site name="grip" pos="0 0 0.1" size="0.006" rgba="0 0.8 0 0.5" group="3"/>
              <camera name="wrist" pos="0.045 0 0.035" xyaxes="0 -1 0 -0.906 0 -0.423" fovy="75"/>
              <body name="finger_l" pos="0 0 0.03" gravcomp="1">
                <joint name="finger_l" type="slide" axis="0 1 0" range="{fmin} {fmax}" damping="5"
                       armature="0.05"/>
                <geom type="box" pos="0 0.012 0.03" size="0.006 0.006 0.022" material="pad"/>
                <geom name="pad_l" class="collide" type="box" pos="0 0.006 0.065" size="0.012 0.006 0.02"
                      material="pad"/>
              </body>
              <body name="finger_r" pos="0 0 0.03" gravcomp="1">
                <joint name="finger_r" type="slide" axis="0 -1 0" range="{fmin} {fmax}" damping="5"
                       armature="0.05"/>
                <geom type="box" pos="0 -0.012 0.03" size="0.006 0.006 0.022" material="pad"/>
                <geom name="pad_r" class="collide" type="box" pos="0 -0.006 0.065" size="0.012 0.006 0.02"
                      material="pad"/>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
    <body name="cube" pos="0.35 0 {cube_half}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{cube_half} {cube_half} {cube_half}" mass="0.05" material="cube"
            contype="1" conaffinity="1" condim="4" friction="0.6 0.02 0.001" solref="0.01 1"/>
    </body>
    <body name="target" mocap="true" pos="0.4 0.1 0.1">
      <site name="target" type="sphere" size="0.02" rgba="0.1 0.85 0.2 0.45"/>
    </body>
  </worldbody>
  <contact>
    <exclude body1="finger_l" body2="finger_r"/>
    <exclude body1="hand" body2="finger_l"/>
    <exclude body1="hand" body2="finger_r"/>
  </contact>
  <actuator>
    <position name="j1" joint="j1" ctrlrange="-2.5 2.5"/>
    <position name="j2" joint="j2" ctrlrange="-1.6 1.6"/>
    <position name="j3" joint="j3" ctrlrange="-0.2 2.7"/>
    <position name="j4" joint="j4" ctrlrange="-2.2 2.2"/>
    <position name="j5" joint="j5" ctrlrange="-3.0 3.0" kp="200"/>
    <position name="finger_l" joint="finger_l" ctrlrange="{fmin} {fmax}" kp="400" forcerange="-12 12"/>
    <position name="finger_r" joint="finger_r" ctrlrange="{fmin} {fmax}" kp="400" forcerange="-12 12"/>
  </actuator>
</mujoco>
"""


# Autonomous practice's enclosure (``build_xml(fences=True)``), what a person setting up a robot to practise alone
# would build so that a pushed cube stays where the reset controller can pick it up (the hand's grip reaches
# x 0.15..0.6, |y| <= 0.28 and 0.628 from the base at the table; its pads stand 1.2 cm either side of the grip in x
# and, open, 5.7 cm in y, so at most 0.665 from the base):
# - ramps at the sides from |y| = RAMP_Y and at the far end from RAMP_FAR_R about the base, rising outwards at
#   RAMP_SLOPE: a cube that slides up one comes back down to its foot, where the grip reaches it. A wall beside the
#   cube would block the open hand's outer pad; the ramp is low enough there (under 1 cm) for the pad to stand on
#   it while the fingers close on the cube. Slippery (friction RAMP_FRICTION, which wins over the cube's by its
#   priority): at the cube's 0.6 it would stay on a slope this gentle.
# - fences (FENCE_HEIGHT tall: a cube thrown at 3 m/s tipped over a 4 cm one; 3 cm thick: a thin one let a fast cube
#   pass within a 5 ms step) across the table between the robot's base and the workspace (inner face at
#   x = FENCE_NEAR_X), and along the ramps' tops, all beyond what the hand reaches: it never touches them.
FENCE_NEAR_X = 0.13
FENCE_HEIGHT = 0.06
RAMP_Y = 0.30
RAMP_FAR_R = 0.60
RAMP_SLOPE = math.radians(15.0)
RAMP_LENGTH = 0.10
RAMP_FRICTION = 0.1
_FAR_SEGMENTS = 8
_BOX = ('\n    <geom name="{name}" type="box" pos="{x:.4f} {y:.4f} {z:.4f}" size="{sx:.4f} {sy:.4f} {sz:.4f}" '
        'quat="{quat}" material="joint" contype="1" conaffinity="1" {friction}/>')
_FENCE_FRICTION = 'friction="0.6 0.005 0.0001"'
_RAMP_FRICTION = f'friction="{RAMP_FRICTION} 0.005 0.0001" priority="1"'


def _quat(yaw: float, roll: float = 0.0) -> str:
    """MJCF ``quat`` of a rotation by ``roll`` about x, then ``yaw`` about z."""
    cz, sz, cx, sx = math.cos(yaw / 2), math.sin(yaw / 2), math.cos(roll / 2), math.sin(roll / 2)
    return f"{cz * cx:.6f} {cz * sx:.6f} {sz * sx:.6f} {sz * cx:.6f}"


def _practice_enclosure() -> str:
    """MJCF geoms of practice's ramps and fences (see the comment above)."""
    half_h, t, thin = FENCE_HEIGHT / 2, 0.015, 0.005
    run, rise = RAMP_LENGTH * math.cos(RAMP_SLOPE), RAMP_LENGTH * math.sin(RAMP_SLOPE)
    # a ramp box is its top face (rising from its foot at z = 0 along its local y) moved down by its half-thickness
    lift_y, lift_z = run / 2 + thin * math.sin(RAMP_SLOPE), rise / 2 - thin * math.cos(RAMP_SLOPE)
    geoms = [_BOX.format(name="fence_near", x=FENCE_NEAR_X - t, y=0.0, z=half_h, sx=t, sy=0.55, sz=half_h,
                         quat=_quat(0.0), friction=_FENCE_FRICTION)]
    x_end = RAMP_FAR_R + run  # the side ramps and fences run on to the far ones
    for name, sign in (("left", 1.0), ("right", -1.0)):
        x_mid, half_x = (FENCE_NEAR_X + x_end) / 2, (x_end - FENCE_NEAR_X) / 2
        geoms.append(_BOX.format(name=f"ramp_{name}", x=x_mid, y=sign * (RAMP_Y + lift_y), z=lift_z, sx=half_x,
                                 sy=RAMP_LENGTH / 2, sz=thin, quat=_quat(0.0, sign * RAMP_SLOPE),
                                 friction=_RAMP_FRICTION))
        geoms.append(_BOX.format(name=f"fence_{name}", x=x_mid, y=sign * (RAMP_Y + run + t), z=half_h, sx=half_x,
                                 sy=t, sz=half_h, quat=_quat(0.0), friction=_FENCE_FRICTION))
    span = math.asin(min(1.0, (RAMP_Y + run + 2 * t) / RAMP_FAR_R))  # the far ramp reaches the side fences
    step = 2 * span / _FAR_SEGMENTS
    for k in range(_FAR_SEGMENTS):  # chords of the arcs
        angle = -span + (k + 0.5) * step
        c, s = math.cos(angle), math.sin(angle)
        foot = RAMP_FAR_R * math.cos(step / 2)
        half_w = (RAMP_FAR_R + run) * math.sin(step / 2) + 0.01
        geoms.append(_BOX.format(name=f"ramp_far{k}", x=(foot + lift_y) * c, y=(foot + lift_y) * s, z=lift_z,
                                 sx=half_w, sy=RAMP_LENGTH / 2, sz=thin, quat=_quat(angle - math.pi / 2, RAMP_SLOPE),
                                 friction=_RAMP_FRICTION))
        fence = (RAMP_FAR_R + run) * math.cos(step / 2) + t
        geoms.append(_BOX.format(name=f"fence_far{k}", x=fence * c, y=fence * s, z=half_h, sx=t,
                                 sy=(RAMP_FAR_R + run + 2 * t) * math.sin(step / 2) + 0.01, sz=half_h,
                                 quat=_quat(angle), friction=_FENCE_FRICTION))
    return "".join(geoms)


def build_xml(fences: bool = False) -> str:
    """Return the scene's MJCF as a string (see the module docstring for what is in it). ``fences``: add autonomous
    practice's enclosure (fences and side ramps, see ``FENCE_NEAR_X``): without it a pushed cube slid towards the robot's
    base, where the hand cannot reach it (two thirds of practice's human resets), or beyond the hand's reach."""
    return _XML.format(timestep=TIMESTEP, cube_half=CUBE_HALF, fmin=FINGER_RANGE[0], fmax=FINGER_RANGE[1],
                       fences=_practice_enclosure() if fences else "")


@functools.lru_cache(maxsize=1)
def build_model() -> mujoco.MjModel:
    """Compile the scene once per process; the model is read-only afterwards and shared by every env."""
    return mujoco.MjModel.from_xml_string(build_xml())
