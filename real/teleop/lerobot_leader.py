"""LeRobot's teleoperators as a ``Teleop``: a leader arm (SO-101 / SO-100 / Koch / OMX: joint positions) for
``driver=lerobot`` (``robot_rl.real.drivers.lerobot_arm``), or an end-effector device (LeRobot's gamepad and
keyboard: ``delta_x``, ``delta_y``, ``delta_z`` and a gripper command) for a Cartesian robot (the simulated arm,
``ur_rtde``).

**UNTESTED ON HARDWARE, AND NOT RUN AGAINST LEROBOT ITSELF HERE** (LeRobot cannot be installed beside the pinned
torch; see the driver's docstring). Written against LeRobot 0.4.x's ``Teleoperator`` API (``action_features``,
``connect(calibrate)``, ``is_connected``, ``is_calibrated``, ``get_action()``, ``disconnect()``, and, where a device
has it, ``get_teleop_events()``); tested against a double of it (``tests/real/test_lerobot_arm.py``).

A leader arm says where the follower's joints should be; the bridge's actions are goal *moves* in [-1, 1] per joint,
``step_per_unit`` units each (the driver's). So the action is the leader's lead over the follower's measured joints
(``read(state)``) in steps, clipped to [-1, 1]: the follower chases the leader at most one step per control tick,
which is what the driver would let it do anyway, and an operator's fast swing is followed at the arm's safe speed.

An end-effector device's deltas are the Cartesian action's first three numbers, divided by ``delta_scale`` (the
device's step size; LeRobot's default 1.0) and clipped to [-1, 1], in the robot's base frame as LeRobot's own
end-effector control reads them (x forward, y left, z up, the frame this bridge uses); LeRobot's gripper command
(0 close, 1 stay, 2 open) becomes the fourth, +1 closed and -1 open, kept while it says stay (open at the start
of each episode).

Who is driving (``active``): a device that reports LeRobot's ``TeleopEvents`` (``get_teleop_events()``) decides with
its ``is_intervention`` flag, and its ``success``/``failure``/``rerecord_episode`` events label the episode. A bare
leader arm has no button, so it is active while it leads the follower by more than ``engage_steps`` steps on some
joint: move the leader away from where the follower is and you take over; let the follower catch up and rest, and
the policy drives again. ``always_active=True`` makes every read an intervention (pure teleoperation, demos).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from robot_rl.real.lerobot_devices import build_lerobot_device

from .base import Event, Teleop, TeleopCommand

_EVENTS = {"success": Event.SUCCESS, "failure": Event.FAILURE, "rerecord_episode": Event.RERECORD}
_DELTAS = ("delta_x", "delta_y", "delta_z")
_GRIPPER = {0: 1.0, 2: -1.0}  # LeRobot's GripperAction: CLOSE 0, STAY 1, OPEN 2 -> this bridge's +1 closed, -1 open


def _feature_names(features: Any) -> list[str]:
    """The action names of a LeRobot ``action_features``: a leader arm's ``{name: float}``, or the end-effector
    devices' ``{"dtype": ..., "shape": ..., "names": {name: index}}``."""
    if isinstance(features, Mapping) and isinstance(features.get("names"), Mapping):
        return sorted(features["names"], key=lambda k: features["names"][k])
    return list(features)


class LeRobotTeleop(Teleop):
    """A LeRobot leader arm driving ``driver=lerobot`` (module docstring). ``joints`` are the follower's action
    joints in the driver's order (``LeRobotArm.joints``; default: the teleoperator's ``action_features``, which for
    LeRobot's leader/follower pairs name the same joints in the same order) and ``state_index`` where each sits in
    the robot's state vector (default: the first ``len(joints)`` entries, the driver's layout for an SO-101).
    ``teleop_type`` (``so101_leader``, ...) with ``port``/``id``/``teleop_config`` builds the device by name."""

    def __init__(
        self,
        teleoperator: Any = None,
        *,
        joints: Sequence[str] | None = None,
        teleop_type: str | None = None,
        teleop_config: Mapping[str, Any] | None = None,
        port: str | None = None,
        id: str | None = None,  # noqa: A002  (LeRobot's config field)
        step_per_unit: float = 2.0,
        state_index: Sequence[int] | None = None,
        engage_steps: float = 2.0,
        always_active: bool = False,
        delta_scale: float = 1.0,
    ) -> None:
        if (teleoperator is None) == (teleop_type is None):
            raise ValueError("pass either teleoperator (a LeRobot teleoperator object) or teleop_type "
                             "(e.g. so101_leader)")
        if teleoperator is None:
            teleoperator = build_lerobot_device("teleoperator", str(teleop_type), teleop_config, what="teleop=lerobot",
                                                port=port, id=id)
        elif port is not None or id is not None or teleop_config:
            raise ValueError("port, id and teleop_config configure a teleoperator built from teleop_type, not an object")
        names = _feature_names(teleoperator.action_features)
        self.cartesian = joints is None and all(d in names for d in _DELTAS)
        if self.cartesian:
            self.joints = []
            self.has_gripper = "gripper" in names
            self.action_dim = 4
        else:
            self.joints = list(names if joints is None else joints)
            missing = [j for j in self.joints if j not in names]
            if not self.joints or missing:
                raise ValueError(f"the teleoperator must report every follower joint (or delta_x, delta_y, delta_z); "
                                 f"missing {missing or 'all'} in its action_features {names}")
            self.action_dim = len(self.joints)
        if not (np.isfinite(step_per_unit) and step_per_unit > 0):
            raise ValueError(f"step_per_unit must be > 0, got {step_per_unit}")
        if not (np.isfinite(delta_scale) and delta_scale > 0):
            raise ValueError(f"delta_scale must be > 0, got {delta_scale}")
        if not (np.isfinite(engage_steps) and engage_steps >= 0):
            raise ValueError(f"engage_steps must be >= 0, got {engage_steps}")
        index = list(range(len(self.joints))) if state_index is None else [int(i) for i in state_index]
        if not self.cartesian and len(index) != len(self.joints):
            raise ValueError(f"state_index needs one entry per joint ({len(self.joints)}), got {len(index)}")
        self.teleoperator = teleoperator
        self.delta_scale = float(delta_scale)
        self._gripper = -1.0
        self.step = float(step_per_unit)
        self.engage = float(engage_steps)
        self.always_active = bool(always_active)
        self._index = np.array(index)

    def connect(self) -> None:
        if not self.teleoperator.is_connected:
            self.teleoperator.connect(calibrate=False)  # LeRobot's calibration asks on stdin
        if not self.teleoperator.is_calibrated:
            self.teleoperator.disconnect()
            raise RuntimeError("the LeRobot teleoperator is not calibrated: run LeRobot's calibration for it first "
                               "(lerobot-calibrate --teleop.type=... --teleop.port=... --teleop.id=...)")

    def disconnect(self) -> None:
        if self.teleoperator.is_connected:
            self.teleoperator.disconnect()

    def reset(self) -> None:
        self._gripper = -1.0

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        raw = self.teleoperator.get_action()
        if self.cartesian:
            deltas = np.array([float(raw[d]) for d in _DELTAS]) / self.delta_scale
            if not np.all(np.isfinite(deltas)):
                raise ValueError(f"non-finite deltas from the teleoperator: {deltas}")
            if self.has_gripper:
                self._gripper = _GRIPPER.get(int(raw.get("gripper", 1)), self._gripper)
            action = np.append(np.clip(deltas, -1.0, 1.0), self._gripper).astype(np.float32)
            moving = bool(np.any(action[:3] != 0.0))
        else:
            if state is None:
                raise ValueError("LeRobotTeleop.read needs the robot's state: a leader arm's action is its lead "
                                 "over the follower")
            leader = np.array([float(raw[j]) for j in self.joints])
            follower = np.asarray(state, dtype=np.float64)[self._index]
            lead = (leader - follower) / self.step
            if not np.all(np.isfinite(lead)):
                raise ValueError(f"non-finite leader or follower joints: leader {leader}, follower {follower}")
            action = np.clip(lead, -1.0, 1.0).astype(np.float32)
            moving = bool(np.max(np.abs(lead)) > self.engage)
        events: set[Event] = set()
        get_events = getattr(self.teleoperator, "get_teleop_events", None)
        if callable(get_events):
            reported = {getattr(k, "value", k): v for k, v in dict(get_events()).items()}
            active = bool(reported.get("is_intervention", False))
            events = {e for name, e in _EVENTS.items() if reported.get(name)}
            if reported.get("terminate_episode") and not events:
                events = {Event.FAILURE}  # LeRobot's gamepad ends a failed episode with terminate_episode alone
        else:
            active = moving
        if self.always_active:
            active = True
        return TeleopCommand(action=action, active=active, events=frozenset(events))
