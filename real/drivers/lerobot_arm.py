"""Any LeRobot robot (SO-100/SO-101, Koch, OMX, ...) behind the bridge, in joint space.

**UNTESTED ON HARDWARE, AND NOT RUN AGAINST LEROBOT ITSELF HERE.** Written against LeRobot 0.4.x's ``Robot`` API
(``lerobot.robots.robot.Robot``: ``observation_features``, ``action_features``, ``connect(calibrate)``,
``is_connected``, ``is_calibrated``, ``get_observation()``, ``send_action(action) -> action sent``,
``disconnect()``). LeRobot cannot be installed beside this project's pinned torch 2.13 (its releases up to 0.4.4 ask
for torch < 2.11, and its robot modules import torchvision through ``lerobot.processor``), so the tests drive a
double with the same interface whose joints are first-order position servos (``tests/real/test_lerobot_arm.py``).
Before the first run on an arm: calibrate it with LeRobot's own tool (``lerobot-calibrate``), start with narrow
``joint_limits`` and a small ``step_per_unit``, and keep the arm's power switch at hand.

How it moves. LeRobot arms take absolute joint goals (``"shoulder_pan.pos"``: degrees, or -100..100 without
``use_degrees``; the gripper 0..100). A normalised action ``a`` in [-1, 1] per joint (the order of
``action_features``) moves each joint's *goal* by ``a * step_per_unit`` per control step, kept inside
``joint_limits`` and at most ``max_lead_steps`` steps ahead of the measured joint, so a blocked joint does not
wind up a goal that would snap the arm on release. Relative goals make the policy's action mean the same thing in
every pose, as the Cartesian arm's displacements do.

Safety on what the arm does (measured), as a second line behind the server's clamp on what it is told: every
observation is checked, and the driver raises (a driver fault: the server stops it and latches the e-stop) when a
measured joint is not finite, is outside its limit by more than ``limit_margin`` and further out than at the
previous observation (moving back in stays allowed, so an arm that starts outside can be brought back), or moved
faster than ``speed_tolerance`` times its step limit (``step_per_unit * control_hz`` per second).

``hold()`` re-sends the goal (a position servo keeps it anyway; re-sending also restores it after a bus glitch).
``stop()`` sets the goal to the measured joints (without the checks, and even outside the limits), so the arm halts
where it is instead of finishing its way to an earlier goal or being pulled back in; torque stays on (a torque-off stop would drop the arm). This is a software stop, not a safety-rated
one. ``reset()`` walks the goal to ``home`` at ``reset_speed`` units per second (blocking, like ``ur_rtde``'s
``moveL``) and fails if the measured joints do not arrive within ``reset_timeout_s``; without ``home`` it only
re-anchors the goal on the measured pose (the operator places the arm).

State vector: every scalar entry of ``observation_features`` in its order (for the SO-101: six joint positions);
``state_layout`` names each one. Cameras: every ``(height, width, 3)`` entry of ``observation_features`` is a camera
(LeRobot's cameras give RGB uint8 frames), served as the observation group ``pixels/<name>``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from robot_rl.real.lerobot_devices import build_lerobot_device
from robot_rl.real.robot import CameraSpec, Robot, RobotObservation, RobotSpec


def load_arm_file(path: str | Path) -> tuple[dict[str, tuple[float, float]], dict[str, float] | None]:
    """Joint limits and the home pose from a JSON file (the command line's ``driver_args.arm_file``)::

        {"joint_limits": {"shoulder_pan.pos": [-90, 90], ...}, "home": {"shoulder_pan.pos": 0, ...}}

    ``home`` may be left out (``reset`` then only re-anchors on the measured pose)."""
    try:
        raw = json.loads(Path(path).expanduser().read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"arm_file {path}: {err}") from err
    if not isinstance(raw, dict) or not isinstance(raw.get("joint_limits"), dict) or set(raw) - {"joint_limits", "home"}:
        raise ValueError(f"arm_file {path}: expected {{\"joint_limits\": {{joint: [low, high]}}, \"home\": "
                         f"{{joint: value}}}} (home optional)")
    home = raw.get("home")
    if home is not None and not isinstance(home, dict):
        raise ValueError(f"arm_file {path}: home must be an object of joint: value")
    return {str(k): tuple(v) for k, v in raw["joint_limits"].items()}, home


class LeRobotArm(Robot):
    """A LeRobot ``Robot`` in joint space (module docstring). Pass ``robot`` (a LeRobot robot object, connected or
    not) or ``robot_type`` with its config's fields as ``robot_config`` (``port`` and ``id``, the fields every
    arm has, also as keys of their own: ``driver_args.port=/dev/ttyACM0``); ``joint_limits`` must cover every
    action joint (``arm_file``: the limits and ``home`` from a JSON file, ``load_arm_file``)."""

    def __init__(
        self,
        robot: Any = None,
        *,
        robot_type: str | None = None,
        robot_config: Mapping[str, Any] | None = None,
        port: str | None = None,
        id: str | None = None,  # noqa: A002  (LeRobot's config field)
        joint_limits: Mapping[str, tuple[float, float]] | None = None,
        arm_file: str | None = None,
        home: Mapping[str, float] | None = None,
        control_hz: float = 20.0,
        step_per_unit: float = 2.0,
        max_lead_steps: float = 2.0,
        limit_margin: float = 5.0,
        speed_tolerance: float = 2.5,
        reset_speed: float = 20.0,
        reset_tolerance: float = 2.0,
        reset_timeout_s: float = 15.0,
        time_limit: int | None = None,
        name: str | None = None,
        clock: Any = time.monotonic,
        sleep: Any = time.sleep,
    ) -> None:
        if (robot is None) == (robot_type is None):
            raise ValueError("pass either robot (a LeRobot robot object) or robot_type (e.g. so101_follower)")
        if robot is None:
            robot = build_lerobot_device("robot", str(robot_type), robot_config, what="driver=lerobot", port=port, id=id)
        elif port is not None or id is not None or robot_config:
            raise ValueError("port, id and robot_config configure a robot built from robot_type, not a robot object")
        if arm_file is not None:
            if joint_limits is not None or home is not None:
                raise ValueError("pass joint_limits and home, or arm_file, not both")
            joint_limits, home = load_arm_file(arm_file)
        if not joint_limits:
            raise ValueError("joint_limits (or arm_file) is required: {joint: [low, high]} in the robot's units, "
                             "e.g. degrees for an SO-101 calibrated with use_degrees")
        for key, value in (("control_hz", control_hz), ("step_per_unit", step_per_unit),
                           ("max_lead_steps", max_lead_steps), ("speed_tolerance", speed_tolerance),
                           ("reset_speed", reset_speed), ("reset_tolerance", reset_tolerance),
                           ("reset_timeout_s", reset_timeout_s)):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{key} must be > 0, got {value}")
        if not (np.isfinite(limit_margin) and limit_margin >= 0):
            raise ValueError(f"limit_margin must be >= 0, got {limit_margin}")
        self.robot = robot
        self.joints = list(robot.action_features)
        features = dict(robot.observation_features)
        self.state_keys = [k for k, v in features.items() if not isinstance(v, tuple)]
        missing = [j for j in self.joints if j not in self.state_keys]
        if not self.joints or missing:
            raise ValueError(f"every action joint must be measured in observation_features; not measured: {missing}"
                             if self.joints else "the robot declares no action_features")
        unknown = sorted(set(joint_limits) - set(self.joints))
        absent = [j for j in self.joints if j not in joint_limits]
        if unknown or absent:
            raise ValueError(f"joint_limits must name exactly the robot's joints {self.joints}; "
                             f"missing {absent}, unknown {unknown}")
        self.low = np.array([float(joint_limits[j][0]) for j in self.joints])
        self.high = np.array([float(joint_limits[j][1]) for j in self.joints])
        if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)) and np.all(self.low < self.high)):
            raise ValueError(f"joint_limits must be finite [low, high] with low < high, got {dict(joint_limits)}")
        self.home = None
        if home is not None:
            if sorted(home) != sorted(self.joints):
                raise ValueError(f"home must give every joint {self.joints}, got {sorted(home)}")
            self.home = np.array([float(home[j]) for j in self.joints])
            if np.any(self.home < self.low) or np.any(self.home > self.high):
                raise ValueError(f"home {dict(home)} is outside joint_limits")
        cameras = []
        for key, shape in features.items():
            if isinstance(shape, tuple):
                if len(shape) != 3 or shape[2] != 3:
                    raise ValueError(f"camera {key!r}: LeRobot frames must be (height, width, 3), got {shape}")
                cameras.append(CameraSpec(key, int(shape[0]), int(shape[1])))  # CameraSpec checks the name
        self._joint_index = np.array([self.state_keys.index(j) for j in self.joints])
        self.step = float(step_per_unit)
        self.max_lead = float(max_lead_steps) * self.step
        self.margin = float(limit_margin)
        self.max_speed = float(speed_tolerance) * self.step * float(control_hz)  # units per second
        self.reset_speed, self.reset_tolerance, self.reset_timeout_s = reset_speed, reset_tolerance, reset_timeout_s
        self._clock, self._sleep = clock, sleep
        self.spec = RobotSpec(
            name=name or f"lerobot_{getattr(robot, 'name', type(robot).__name__)}",
            state_dim=len(self.state_keys),
            action_dim=len(self.joints),
            control_hz=float(control_hz),
            action_low=(-1.0,) * len(self.joints),
            action_high=(1.0,) * len(self.joints),
            time_limit=time_limit,
            state_layout={k.removesuffix(".pos"): (i, i + 1) for i, k in enumerate(self.state_keys)},
            cameras=tuple(cameras),
        )
        self._goal: np.ndarray | None = None
        self._last: tuple[float, np.ndarray] | None = None  # (stamp, measured joints) of the previous observation

    # connection ------------------------------------------------------------------------------------------------
    def connect(self) -> None:
        if not self.robot.is_connected:
            # calibrate=False: LeRobot's calibration asks questions on stdin, which a server cannot answer
            self.robot.connect(calibrate=False)
        if not self.robot.is_calibrated:
            self.robot.disconnect()
            raise RuntimeError(f"{self.spec.name} is not calibrated: run LeRobot's calibration for it first "
                               "(lerobot-calibrate --robot.type=... --robot.port=... --robot.id=...)")

    def disconnect(self) -> None:
        if self.robot.is_connected:
            self.robot.disconnect()

    # observation -----------------------------------------------------------------------------------------------
    def observe(self) -> RobotObservation:
        raw = self.robot.get_observation()
        stamp = float(self._clock())
        try:
            state = np.array([float(raw[k]) for k in self.state_keys], dtype=np.float32)
        except KeyError as err:
            raise RuntimeError(f"the robot's observation lacks {err.args[0]!r}") from err
        joints = state[self._joint_index].astype(np.float64)
        self._check_measured(stamp, joints)
        images = {c.name: np.ascontiguousarray(raw[c.name], dtype=np.uint8) for c in self.spec.cameras}
        return RobotObservation(state=state, stamp=stamp, images=images)

    def _check_measured(self, stamp: float, joints: np.ndarray) -> None:
        """Raise on a measured joint that is not finite, leaves its limits (further), or moves too fast."""
        if not np.all(np.isfinite(joints)):
            raise RuntimeError(f"measured joints are not finite: {dict(zip(self.joints, joints.tolist(), strict=True))}")
        out = np.maximum(self.low - joints, joints - self.high)  # > 0: outside by that much
        previous = self._last
        self._last = (stamp, joints)
        worse = out > self.margin
        if previous is not None:
            worse &= out > np.maximum(self.low - previous[1], previous[1] - self.high)
        if np.any(worse):
            j = int(np.flatnonzero(worse)[0])
            raise RuntimeError(f"joint {self.joints[j]} measured at {joints[j]:.2f}, outside its limits "
                               f"[{self.low[j]:g}, {self.high[j]:g}] by more than limit_margin {self.margin:g}")
        if previous is not None and stamp > previous[0]:
            speed = np.abs(joints - previous[1]) / (stamp - previous[0])
            fast = np.flatnonzero(speed > self.max_speed)
            if fast.size:
                j = int(fast[0])
                raise RuntimeError(f"joint {self.joints[j]} moved at {speed[j]:.1f} units/s, above the limit "
                                   f"{self.max_speed:.1f} (speed_tolerance x step_per_unit x control_hz)")

    def _measured_joints(self) -> np.ndarray:
        return self.observe().state[self._joint_index].astype(np.float64)

    def _read_joints(self) -> np.ndarray:
        """The measured joints without the checks (``stop()`` must halt whatever the arm did)."""
        raw = self.robot.get_observation()
        joints = np.array([float(raw[j]) for j in self.joints])
        self._last = (float(self._clock()), joints)
        return joints

    # motion ----------------------------------------------------------------------------------------------------
    def _send(self, goal: np.ndarray) -> None:
        sent = self.robot.send_action({j: float(g) for j, g in zip(self.joints, goal, strict=True)})
        # LeRobot may cap the goal further (max_relative_target) and returns what it sent: track that goal
        if isinstance(sent, Mapping) and all(j in sent for j in self.joints):
            goal = np.array([float(sent[j]) for j in self.joints])
        self._goal = goal

    def command(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (len(self.joints),) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {len(self.joints)} finite numbers, got {action}")
        measured = self._last[1] if self._last is not None else self._measured_joints()
        base = measured if self._goal is None else self._goal
        goal = base + np.clip(action, -1.0, 1.0) * self.step
        goal = np.clip(goal, measured - self.max_lead, measured + self.max_lead)
        self._send(np.clip(goal, self.low, self.high))

    def hold(self) -> None:
        if self._goal is not None:
            self._send(self._goal)

    def stop(self) -> None:
        joints = self._read_joints()
        if not np.all(np.isfinite(joints)):  # nowhere to halt at: keep the last goal rather than send garbage
            joints = self._goal if self._goal is not None else None
        if joints is not None:
            self._send(joints)  # where it is, even outside the limits: halting in place is the safe move

    def reset(self, seed: int | None = None) -> RobotObservation:
        measured = self._measured_joints()
        self._goal = None
        if self.home is None:
            return self.observe()
        period = 1.0 / self.spec.control_hz
        step = self.reset_speed * period
        goal = np.clip(measured, self.low, self.high)
        deadline = self._clock() + self.reset_timeout_s
        while True:
            goal = goal + np.clip(self.home - goal, -step, step)
            self._send(goal)
            self._sleep(period)
            measured = self._measured_joints()
            if np.all(goal == self.home) and np.max(np.abs(measured - self.home)) <= self.reset_tolerance:
                break
            if self._clock() > deadline:
                far = int(np.argmax(np.abs(measured - self.home)))
                raise RuntimeError(f"reset: {self.joints[far]} at {measured[far]:.2f} did not reach home "
                                   f"{self.home[far]:g} within {self.reset_timeout_s:g} s")
        self._goal = None
        return self.observe()
