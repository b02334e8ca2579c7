"""Universal Robots e-Series driver over the ``ur_rtde`` library (Cartesian servoing of the TCP).

**UNTESTED ON HARDWARE.** This driver was written against ur_rtde's public Python API
(``rtde_control.RTDEControlInterface`` / ``rtde_receive.RTDEReceiveInterface``) and tested only against fake
modules that record the calls. Before the first run on a real arm: try it on URSim (Universal Robots'
simulator), keep a hand on the teach pendant's emergency stop, start with a small workspace box and a low
``max_speed_mps``, and check that the base frame reported by ``getActualTCPPose`` is the frame you expect.

How it moves. Each ``command(action)`` moves a Cartesian *target* for the TCP by ``action[:3] *
metres_per_unit`` in the robot's base frame (the frame of ``getActualTCPPose``), keeping the orientation the
TCP had when the target was anchored (after ``reset()``, the home pose's orientation), and sends it with
``servoL(pose, speed, acceleration, time=control period, lookahead_time, gain)``. The target is updated from
the previous target rather than from the measured pose so that small tracking lag does not shrink every step;
to avoid wind-up when something blocks the arm, the target may lead the measured TCP by at most
``max_lead_m``. Whatever the action, the driver itself enforces the ``CartesianLimits`` it was given (the
server's safety layer already does, this is a second line): each new target lies inside the workspace box and
at most ``min(max_step_m, max_speed_mps / control_hz)`` from the previous one.

``hold()`` re-sends the current target with ``servoL`` rather than calling ``servoStop``: the arm stays in
servo mode, settles smoothly on a target it is at most one step from, and the next ``command`` continues
without a mode switch (``servoStop`` would decelerate with its own profile and leave servo mode, and
re-entering servo mode restarts the controller's servo thread). Before the first command after ``reset()`` or
``stop()`` there is no servo target and ``hold()`` sends nothing: the arm is standing still. ``stop()`` (e-stop)
calls ``servoStop`` while servoing, otherwise ``stopL``; afterwards the target is re-anchored on the measured
pose at the next ``command``, so the arm never drives back to where it was heading when stopped. This is a
software stop, not a safety-rated one: the robot's own emergency stop and safety configuration stay the real
protection.

``reset()`` moves to ``home_pose`` with a blocking ``moveL`` (a straight line in Cartesian space from wherever
the TCP is: make sure that line is clear) at ``move_speed``, which may not exceed ``max_speed_mps``. Being
blocking, it holds the server's control loop for the whole move: an ``EStop`` during it latches at once but is
acknowledged (``stop()``) only when ``moveL`` returns, so keep the pendant's emergency stop at hand.

Gripper: there is no gripper driver. Pass ``gripper`` (called with ``action[3]`` on every command, -1 open ..
+1 closed, and with -1 on reset) and optionally ``gripper_state`` (returns the state vector's gripper entry,
e.g. the opening in metres) to connect one (a Robotiq URCap client, a digital output, ...). Without them the
gripper action is ignored and the state reports the last commanded gripper value as a placeholder.

Cameras (**untested on hardware**, like the rest): pass ``cameras=`` either ``robot_rl.real.cameras.Camera``
objects (e.g. ``CallableCamera(name, height, width, capture)`` around your own grabber) or ``{name: source}`` for
OpenCV (``OpenCVCamera``: a USB index such as 0 or a stream URL, read in a background thread, resized to
``camera_size``). They are opened by ``connect()``, closed by ``disconnect()``, declared in the spec, and every
observation carries each camera's latest frame (``observe()`` never waits for a new one). Name them ``front`` and
``wrist`` to match the simulated arm's ``-pixels`` observation groups.

State vector (13 numbers, float32): TCP pose (position m, rotation vector rad: ``getActualTCPPose``), TCP
speed (linear m/s, angular rad/s: ``getActualTCPSpeed``), gripper; see ``STATE_LAYOUT``. Policies trained on
the simulated arm's 29-D state need an adapter (object positions come from perception), which is not here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from robot_rl.real.cameras import Camera, make_cameras
from robot_rl.real.robot import CartesianLimits, Robot, RobotObservation, RobotSpec

INSTALL_HINT = "the UR driver needs ur_rtde: pip install ur_rtde"

STATE_LAYOUT: dict[str, tuple[int, int]] = {
    "ee_pos": (0, 3),
    "tcp_rotvec": (3, 6),
    "ee_vel": (6, 9),
    "tcp_ang_vel": (9, 12),
    "gripper": (12, 13),
}
STATE_DIM = 13
ACTION_DIM = 4

# ur_rtde's accepted ranges for servoL (checked by the library too; checked here so a bad config fails early).
_LOOKAHEAD_RANGE = (0.03, 0.2)
_GAIN_RANGE = (100.0, 2000.0)
# How far outside the workspace box the measured TCP may be when a target is anchored on it.
_ANCHOR_TOLERANCE_M = 0.01


def _import_rtde() -> tuple[Any, Any]:
    try:
        import rtde_control
        import rtde_receive
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return rtde_control, rtde_receive


class URRobot(Robot):
    """A UR e-Series arm driven by Cartesian servoing (see the module docstring; untested on hardware).

    Args:
        ip: the robot controller's IP address.
        home_pose: ``[x, y, z, rx, ry, rz]`` (m, rotation vector) in the base frame; ``reset()`` goes there.
            Its position must be inside the workspace box.
        workspace_low, workspace_high: the box (m, base frame) the TCP target must stay in.
        control_hz: the server's control rate; one ``command`` servos for one period.
        metres_per_unit: TCP displacement per control step at action 1.0 (0.025 m at 20 Hz matches the
            simulated arm tasks).
        max_step_m, max_speed_mps: per-step and speed limits of the TCP target.
        max_lead_m: how far the target may run ahead of the measured TCP (default: two steps).
        servo_lookahead_s, servo_gain: ``servoL`` smoothing and stiffness (ur_rtde ranges [0.03, 0.2] s and
            [100, 2000]).
        servo_speed, servo_accel: passed to ``servoL`` (current ur_rtde versions ignore them).
        move_speed, move_accel: ``moveL`` speed (m/s) and acceleration (m/s^2) for ``reset()``.
        stop_decel: deceleration (m/s^2) of ``stop()``.
        gripper, gripper_state: optional gripper hooks (see the module docstring).
        time_limit: episode length in control steps to advertise in the spec, if any.
        cameras: ``Camera`` objects, or ``{name: OpenCV source}`` (see the module docstring; untested).
        camera_size: (height, width) of the OpenCV cameras' frames.
    """

    def __init__(
        self,
        ip: str,
        home_pose: Sequence[float],
        workspace_low: Sequence[float],
        workspace_high: Sequence[float],
        *,
        control_hz: float = 20.0,
        metres_per_unit: float = 0.025,
        max_step_m: float = 0.025,
        max_speed_mps: float = 0.5,
        max_lead_m: float | None = None,
        servo_lookahead_s: float = 0.1,
        servo_gain: float = 300.0,
        servo_speed: float = 0.25,
        servo_accel: float = 1.2,
        move_speed: float = 0.1,
        move_accel: float = 0.5,
        stop_decel: float = 2.0,
        gripper: Callable[[float], None] | None = None,
        gripper_state: Callable[[], float] | None = None,
        time_limit: int | None = None,
        cameras: Sequence[Camera] | Mapping[str, int | str] | None = None,
        camera_size: Sequence[int] = (84, 84),
    ) -> None:
        self.cameras = make_cameras(cameras, camera_size)
        home = np.asarray(home_pose, dtype=np.float64).reshape(-1)
        if home.shape != (6,) or not np.all(np.isfinite(home)):
            raise ValueError(f"home_pose must be 6 finite numbers [x, y, z, rx, ry, rz], got {home_pose}")
        limits = CartesianLimits(
            workspace_low=tuple(float(v) for v in workspace_low),  # type: ignore[arg-type]
            workspace_high=tuple(float(v) for v in workspace_high),  # type: ignore[arg-type]
            metres_per_unit=float(metres_per_unit),
            max_step_m=float(max_step_m),
            max_speed_mps=float(max_speed_mps),
            ee_slice=STATE_LAYOUT["ee_pos"],
        )
        self._low = np.asarray(limits.workspace_low, dtype=np.float64)
        self._high = np.asarray(limits.workspace_high, dtype=np.float64)
        if np.any(home[:3] < self._low) or np.any(home[:3] > self._high):
            raise ValueError(
                f"home position {home[:3]} is outside the workspace box {self._low}..{self._high}"
            )
        if not _LOOKAHEAD_RANGE[0] <= servo_lookahead_s <= _LOOKAHEAD_RANGE[1]:
            raise ValueError(f"servo_lookahead_s must be in {_LOOKAHEAD_RANGE}, got {servo_lookahead_s}")
        if not _GAIN_RANGE[0] <= servo_gain <= _GAIN_RANGE[1]:
            raise ValueError(f"servo_gain must be in {_GAIN_RANGE}, got {servo_gain}")
        for name, value in (
            ("move_speed", move_speed),
            ("move_accel", move_accel),
            ("stop_decel", stop_decel),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if move_speed > max_speed_mps:  # reset() moves home with moveL at move_speed: the same limit applies
            raise ValueError(f"move_speed {move_speed} m/s exceeds max_speed_mps {max_speed_mps}")
        self.spec = RobotSpec(
            name="ur_rtde",
            state_dim=STATE_DIM,
            action_dim=ACTION_DIM,
            control_hz=float(control_hz),
            action_low=(-1.0,) * ACTION_DIM,
            action_high=(1.0,) * ACTION_DIM,
            cartesian=limits,
            time_limit=time_limit,
            state_layout=dict(STATE_LAYOUT),
            cameras=tuple(c.spec for c in self.cameras),
        )
        self.ip = ip
        self.home_pose = home
        self.metres_per_unit = limits.metres_per_unit
        self.period_s = 1.0 / self.spec.control_hz
        self.step_limit_m = min(limits.max_step_m, limits.max_speed_mps * self.period_s)
        self.max_lead_m = float(max_lead_m) if max_lead_m is not None else 2.0 * self.step_limit_m
        if not self.max_lead_m > 0:
            raise ValueError(f"max_lead_m must be > 0, got {max_lead_m}")
        # servoL(pose, speed, acceleration, time, lookahead_time, gain): servo for one control period.
        self.servo_args = tuple(
            float(v) for v in (servo_speed, servo_accel, self.period_s, servo_lookahead_s, servo_gain)
        )
        self.move_speed, self.move_accel, self.stop_decel = (
            float(move_speed),
            float(move_accel),
            float(stop_decel),
        )
        self._gripper_fn = gripper
        self._gripper_state_fn = gripper_state
        self._gripper_cmd = -1.0
        self._control: Any = None
        self._receive: Any = None
        self._target: np.ndarray | None = None  # servo target pose [6]; None = anchor on the next command
        self._servoing = False

    # ------------------------------------------------------------------ connection
    def connect(self) -> None:
        """Open the RTDE receive and control interfaces (uploads ur_rtde's control script to the robot)."""
        if self._control is not None:
            return
        rtde_control, rtde_receive = _import_rtde()
        self._receive = rtde_receive.RTDEReceiveInterface(self.ip)
        self._control = rtde_control.RTDEControlInterface(self.ip)
        if not (self._control.isConnected() and self._receive.isConnected()):
            self.disconnect()
            raise ConnectionError(f"could not connect to the UR controller at {self.ip}")
        try:
            for camera in self.cameras:
                camera.open()
        except BaseException:
            self.disconnect()
            raise

    def disconnect(self) -> None:
        """Leave servo mode, stop ur_rtde's control script and close both interfaces; safe to call twice."""
        control, receive, servoing = self._control, self._receive, self._servoing
        self._control = self._receive = None
        self._target, self._servoing = None, False
        if control is not None:
            try:
                if servoing:
                    control.servoStop(self.stop_decel)
                control.stopScript()
            finally:
                control.disconnect()
        if receive is not None:
            receive.disconnect()
        for camera in self.cameras:
            camera.close()

    def _interfaces(self) -> tuple[Any, Any]:
        if self._control is None or self._receive is None:
            raise RuntimeError("URRobot is not connected: call connect() first")
        if not self._control.isConnected():
            raise ConnectionError(f"lost the RTDE control connection to {self.ip}")
        return self._control, self._receive

    # ------------------------------------------------------------------ Robot API
    def observe(self) -> RobotObservation:
        """Measured TCP pose and speed, plus the gripper entry (hook reading or last command)."""
        _, receive = self._interfaces()
        pose = np.asarray(receive.getActualTCPPose(), dtype=np.float64)
        speed = np.asarray(receive.getActualTCPSpeed(), dtype=np.float64)
        if pose.shape != (6,) or speed.shape != (6,):
            raise RuntimeError(f"unexpected RTDE data: pose {pose.shape}, speed {speed.shape}")
        gripper = self._gripper_state_fn() if self._gripper_state_fn is not None else self._gripper_cmd
        state = np.empty(STATE_DIM, dtype=np.float32)
        state[0:6] = pose
        state[6:12] = speed
        state[12] = gripper
        images = {c.spec.name: c.read() for c in self.cameras}
        return RobotObservation(state=state, stamp=time.monotonic(), images=images)

    def reset(self, seed: int | None = None) -> RobotObservation:
        """Leave servo mode, move to ``home_pose`` with a blocking ``moveL``, open the gripper. ``seed`` is
        unused: a real scene is not drawn from a generator."""
        control, _ = self._interfaces()
        if self._servoing:
            control.servoStop(self.stop_decel)
        self._target, self._servoing = None, False
        if control.moveL(self.home_pose.tolist(), self.move_speed, self.move_accel) is False:
            raise RuntimeError("moveL to the home pose failed (protective stop? pose unreachable?)")
        self._set_gripper(-1.0)
        return self.observe()

    def next_target(self, action: np.ndarray, measured: np.ndarray) -> np.ndarray:
        """The servo target pose [6] that ``command(action)`` will send, given the measured TCP pose [6].

        Public so its arithmetic can be checked directly; it has no side effects.
        """
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
        if self._target is None:
            anchor_pos = measured[:3]
            outside = np.maximum(self._low - anchor_pos, 0.0) + np.maximum(anchor_pos - self._high, 0.0)
            if np.any(outside > _ANCHOR_TOLERANCE_M):
                raise RuntimeError(
                    f"TCP at {anchor_pos} is outside the workspace box {self._low}..{self._high}; reset() first"
                )
            base = np.concatenate([np.clip(anchor_pos, self._low, self._high), measured[3:]])
        else:
            base = self._target
        lim = self.step_limit_m
        pos = np.clip(base[:3] + _clip_norm(a[:3] * self.metres_per_unit, lim), self._low, self._high)
        lead = pos - measured[:3]
        pos = np.clip(measured[:3] + _clip_norm(lead, self.max_lead_m), self._low, self._high)
        # The lead limit can pull the target back towards the arm; cap that move by the step limit too.
        pos = base[:3] + _clip_norm(pos - base[:3], lim)
        return np.concatenate([pos, base[3:]])

    def command(self, action: np.ndarray) -> None:
        """Servo the TCP target by ``action[:3] * metres_per_unit`` for one control period; gripper hook with
        ``action[3]``."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (ACTION_DIM,) or not np.all(np.isfinite(a)):
            raise ValueError(f"action must be {ACTION_DIM} finite numbers, got {action}")
        control, receive = self._interfaces()
        measured = np.asarray(receive.getActualTCPPose(), dtype=np.float64)
        target = self.next_target(a, measured)
        if control.servoL(target.tolist(), *self.servo_args) is False:
            raise RuntimeError("servoL was refused by the controller (protective stop? connection?)")
        self._target, self._servoing = target, True
        self._set_gripper(float(np.clip(a[3], -1.0, 1.0)))

    def hold(self) -> None:
        """Keep the current pose: re-send the servo target while servoing, else do nothing (the arm is
        standing still after ``reset()``/``stop()``); see the module docstring for why not ``servoStop``."""
        control, _ = self._interfaces()
        if self._servoing and self._target is not None:
            if control.servoL(self._target.tolist(), *self.servo_args) is False:
                raise RuntimeError("servoL (hold) was refused by the controller")

    def stop(self) -> None:
        """Decelerate to a standstill now: ``servoStop`` in servo mode, ``stopL`` otherwise. The next
        ``command`` re-anchors the target on the measured pose."""
        control, _ = self._interfaces()
        if self._servoing:
            control.servoStop(self.stop_decel)
        else:
            control.stopL(self.stop_decel)
        self._target, self._servoing = None, False

    def _set_gripper(self, value: float) -> None:
        self._gripper_cmd = value
        if self._gripper_fn is not None:
            self._gripper_fn(value)


def _clip_norm(v: np.ndarray, limit: float) -> np.ndarray:
    """``v`` scaled down (direction kept) so its length is at most ``limit``."""
    n = float(np.linalg.norm(v))
    return v * (limit / n) if n > limit else v
