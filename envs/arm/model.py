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
* ``fence_near``, ``fence_far`` (only in autonomous practice's scene, ``build_xml(fences=True)``): two 6 cm fences
  across the table, between the robot's base and the workspace and beyond the hand's far reach (``FENCE_X``), as a
  person setting up a robot to practise on its own would build them, so that a pushed cube stays where the reset
  controller can pick it up.
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


# Practice fences (``build_xml(fences=True)``): inner faces at these x (m), across the table, 6 cm tall (a cube
# thrown at 3 m/s tipped over a 4 cm one) and 3 cm thick (a thin one let a fast cube pass within a 5 ms step). The
# hand's pads reach x 0.138..0.612 (grip x 0.15..0.6 in the workspace, pads 1.2 cm either side), so neither fence
# touches them, and a cube stopped by one lies where the reset controller's pick can reach it.
FENCE_X = (0.13, 0.62)
FENCE_HEIGHT = 0.06
_FENCE = ('\n    <geom name="fence_{name}" type="box" pos="{x:.4f} 0 {z:.4f}" size="0.015 0.55 {z:.4f}" '
          'material="joint" contype="1" conaffinity="1" friction="0.6 0.005 0.0001"/>')


def build_xml(fences: bool = False) -> str:
    """Return the scene's MJCF as a string (see the module docstring for what is in it). ``fences``: add autonomous
    practice's two fences (``FENCE_X``): without them a pushed cube slid towards the robot's base, where the hand
    cannot reach it (two thirds of practice's human resets), or past the hand's far reach."""
    walls = "".join(_FENCE.format(name=name, x=x + sign * 0.015, z=FENCE_HEIGHT / 2)
                    for name, x, sign in (("near", FENCE_X[0], -1), ("far", FENCE_X[1], 1))) if fences else ""
    return _XML.format(timestep=TIMESTEP, cube_half=CUBE_HALF, fmin=FINGER_RANGE[0], fmax=FINGER_RANGE[1],
                       fences=walls)


@functools.lru_cache(maxsize=1)
def build_model() -> mujoco.MjModel:
    """Compile the scene once per process; the model is read-only afterwards and shared by every env."""
    return mujoco.MjModel.from_xml_string(build_xml())
