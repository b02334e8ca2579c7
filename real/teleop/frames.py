"""From a teleop device's own axes to the policy's action frame (the robot's base frame).

Why a module of its own: a device that maps "push forward" to the wrong robot axis still produces smooth,
plausible-looking actions, so the mistake survives into the intervention data and silently teaches the policy
the wrong thing. Every device therefore goes through the same two explicit steps, and each step is tested:

1. **Raw device axes -> operator frame.** Each device turns its raw readings into a vector in the *operator
   frame*: ``forward`` (away from the operator's body), ``left`` (the operator's left), ``up``. This step
   only undoes the device's own sign conventions (below); it knows nothing about where the robot is.
2. **Operator frame -> robot base frame** with a ``DeviceFrame``: a proper rotation (no mirroring) that says
   where the operator stands relative to the robot. The robot base frame is the action frame of the arm
   tasks: ``x`` forward away from the robot's base, ``y`` to the robot's left, ``z`` up.

Then ``to_action`` applies a per-axis deadband and scale (``AxisShaping``, in the operator frame, because
deadbands are about the device's noise), rotates, appends the gripper command and clips everything to
[-1, 1] as float32.

Where the operator stands (``DeviceFrame.preset``):

==================  =====  =========================================================================
preset              yaw    operator position; what "forward" on the device moves the hand towards
==================  =====  =========================================================================
``behind_robot``    0      behind the robot's base, looking the same way as the robot, over it at the
                           workspace (the default); forward = robot +x, left = robot +y
``facing_robot``    180    across the table, facing the robot; forward = robot -x, left = robot -y
``robot_right``     90     on the robot's right (its -y side), facing its left; forward = robot +y,
                           left = robot -x
``robot_left``      -90    on the robot's left (its +y side), facing its right; forward = robot -y,
                           left = robot +x
==================  =====  =========================================================================

``DeviceFrame.from_yaw(deg)`` covers any other standing position: ``yaw`` is the angle of the operator's
forward direction measured in the robot's base frame, counter-clockwise seen from above (from +x towards +y).

Raw axis conventions of the devices (what step 1 undoes; the device modules implement and test them):

* **Keyboard** (``robot_rl.real.teleop.keyboard``): no raw axes; keys name operator-frame directions directly
  (``w``/``s`` forward/back, ``a``/``d`` left/right, ``r``/``f`` up/down).
* **Gamepad** (``robot_rl.real.teleop.gamepad``, SDL joystick API through pygame): each stick axis reads -1..1 with
  ``+x`` = stick pushed right and ``+y`` = stick pulled **down** (towards the operator), the screen
  convention. So forward = -left_stick_y, left = -left_stick_x, up = -right_stick_y. Analogue triggers rest
  at -1 and read +1 fully pressed.
* **SpaceMouse** (``robot_rl.real.teleop.spacemouse``, pyspacemouse's default "legacy" convention): ``x`` = puck
  pushed right, ``y`` = puck pushed away from the operator, ``z`` = puck pulled up, each about -1..1. So
  forward = y, left = -x, up = z. (The raw USB HID convention is different: +y towards the user, +z down;
  pyspacemouse already flips those two, and ``SpaceMouseTeleop`` documents how to adapt if you open the
  device with another ``axis_convention``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

OPERATOR_AXES = ("forward", "left", "up")

PRESETS: dict[str, float] = {
    "behind_robot": 0.0,
    "facing_robot": 180.0,
    "robot_right": 90.0,
    "robot_left": -90.0,
}

_ROTATION_TOL = 1e-6


@dataclass(frozen=True, eq=False)
class DeviceFrame:
    """Rotation from the operator frame (forward, left, up) to the robot's base frame (x, y, z).

    Column ``i`` of ``rotation`` is operator axis ``i`` expressed in the robot base frame. The constructor
    rejects anything that is not a proper rotation: a reflection (determinant -1) would mirror one axis, which
    is exactly the silent bug this module exists to prevent.
    """

    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))

    def __post_init__(self) -> None:
        r = np.array(self.rotation, dtype=np.float64)
        if r.shape != (3, 3) or not np.all(np.isfinite(r)):
            raise ValueError(f"a device frame needs a finite 3x3 rotation matrix, got shape {r.shape}")
        if not np.allclose(r @ r.T, np.eye(3), atol=_ROTATION_TOL):
            raise ValueError(f"device frame matrix is not orthonormal (R @ R.T != I):\n{r}")
        if np.linalg.det(r) < 0:
            raise ValueError(
                f"device frame matrix is a reflection (det = -1), which would mirror an axis:\n{r}"
            )
        r.setflags(write=False)
        object.__setattr__(self, "rotation", r)

    @classmethod
    def from_yaw(cls, yaw_deg: float) -> DeviceFrame:
        """Operator whose forward direction points ``yaw_deg`` counter-clockwise from the robot's +x (seen
        from above); up stays up."""
        yaw = np.deg2rad(float(yaw_deg))
        c, s = np.cos(yaw), np.sin(yaw)
        # Round away the 1e-17 noise of cos(90 deg) so presets map axes exactly.
        c, s = (0.0 if abs(c) < 1e-12 else c), (0.0 if abs(s) < 1e-12 else s)
        return cls(np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]))

    @classmethod
    def preset(cls, name: str) -> DeviceFrame:
        """A named standing position (see the module docstring for the table)."""
        if name not in PRESETS:
            raise ValueError(f"unknown device frame preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls.from_yaw(PRESETS[name])

    @classmethod
    def coerce(cls, spec: DeviceFrame | str | float | None) -> DeviceFrame:
        """Build a frame from what a device constructor accepts: a frame, a preset name, a yaw in degrees, or
        None (the default ``behind_robot``)."""
        if spec is None:
            return cls()
        if isinstance(spec, DeviceFrame):
            return spec
        if isinstance(spec, str):
            return cls.preset(spec)
        if isinstance(spec, (int, float)):
            return cls.from_yaw(float(spec))
        raise TypeError(f"cannot make a DeviceFrame from {spec!r}")

    def to_base(self, operator_xyz: Sequence[float] | np.ndarray) -> np.ndarray:
        """Rotate an operator-frame vector (forward, left, up) into the robot base frame (float64 [3])."""
        v = np.asarray(operator_xyz, dtype=np.float64).reshape(3)
        return self.rotation @ v


def _triple(value: float | Sequence[float], name: str) -> tuple[float, float, float]:
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (3,))
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {value}")
    return (float(arr[0]), float(arr[1]), float(arr[2]))


@dataclass(frozen=True)
class AxisShaping:
    """Per-axis deadband and scale, applied in the operator frame before rotating.

    The deadband removes the small readings a device reports at rest (stick drift, a SpaceMouse puck that
    does not quite centre) so that "hands off" really commands zero motion. Outside the deadband the reading
    is rescaled so the output grows continuously from 0 at the deadband edge to 1 at full deflection (no jump
    at the edge); then it is multiplied by ``scale`` (e.g. 0.5 for a slower, more precise keyboard).
    """

    deadband: float | tuple[float, float, float] = 0.0
    scale: float | tuple[float, float, float] = 1.0

    def __post_init__(self) -> None:
        deadband = _triple(self.deadband, "deadband")
        scale = _triple(self.scale, "scale")
        if not all(0.0 <= d < 1.0 for d in deadband):
            raise ValueError(f"deadband must be in [0, 1) per axis, got {deadband}")
        object.__setattr__(self, "deadband", deadband)
        object.__setattr__(self, "scale", scale)

    def apply(self, operator_xyz: Sequence[float] | np.ndarray) -> np.ndarray:
        """Deadband then scale, per axis (float64 [3])."""
        v = np.asarray(operator_xyz, dtype=np.float64).reshape(3)
        d = np.asarray(self.deadband)
        mag = np.maximum(np.abs(v) - d, 0.0) / (1.0 - d)
        return np.sign(v) * mag * np.asarray(self.scale)

    def outside_deadband(self, operator_xyz: Sequence[float] | np.ndarray) -> bool:
        """Whether any axis is deflected beyond its deadband (devices use it to decide "operator is moving")."""
        v = np.abs(np.asarray(operator_xyz, dtype=np.float64).reshape(3))
        return bool(np.any(v > np.asarray(self.deadband)))


def to_action(
    operator_xyz: Sequence[float] | np.ndarray,
    gripper: float,
    frame: DeviceFrame | None = None,
    shaping: AxisShaping | None = None,
) -> np.ndarray:
    """The policy action for an operator-frame translation and a gripper command.

    Returns float32 ``[4]``: the shaped translation rotated into the robot base frame, then the gripper
    (-1 open, +1 closed), every component clipped to [-1, 1]. Clipping happens after the rotation, because a
    rotated full-scale diagonal can exceed 1 on one robot axis.
    """
    frame = frame if frame is not None else DeviceFrame()
    shaping = shaping if shaping is not None else AxisShaping()
    xyz = frame.to_base(shaping.apply(operator_xyz))
    out = np.empty(4, dtype=np.float32)
    out[:3] = xyz
    out[3] = float(gripper)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"teleop produced a non-finite action {out}")
    return np.clip(out, -1.0, 1.0)
