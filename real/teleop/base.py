"""The ``Teleop`` interface: a device that can drive the robot and label episodes.

A device is one file in ``real/teleop/`` with one class implementing ``Teleop``. ``read(state)`` returns a
``TeleopCommand``: an action in the **policy's action frame** (normalised to [-1, 1]; for the Cartesian arm the
first three numbers are a displacement of the hand in the robot's base frame, the fourth the gripper), whether
the operator is active (holding the take-over button, or moving the device), and the events pressed since the
last read. Devices map their own axes into that frame with ``robot_rl.real.teleop.frames``; every device's mapping is
tested, because a wrong frame silently corrupts intervention data.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field

import numpy as np


class Event(str, enum.Enum):
    """Operator events. ``SUCCESS`` / ``FAILURE`` end and label the episode, ``RERECORD`` ends it and discards
    it, ``REWIND`` starts a RaC-style rewind (the operator drives back to a familiar state before correcting),
    ``ESTOP`` latches the robot's emergency stop."""

    SUCCESS = "success"
    FAILURE = "failure"
    RERECORD = "rerecord"
    REWIND = "rewind"
    ESTOP = "estop"


@dataclass
class TeleopCommand:
    action: np.ndarray  # float32 [action_dim] in [-1, 1], policy action frame
    active: bool = False  # the operator is driving: this action replaces the policy's
    events: frozenset[Event] = field(default_factory=frozenset)


class Teleop(abc.ABC):
    """A teleoperation device; see the module docstring."""

    action_dim: int = 4

    def connect(self) -> None:
        """Open the device (default: nothing to do)."""
        return None

    def disconnect(self) -> None:
        """Release the device; safe to call twice (default: nothing to do)."""
        return None

    def reset(self) -> None:
        """A new episode starts (scripted devices reset their plan; default: nothing to do)."""
        return None

    @abc.abstractmethod
    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """The operator's current command. ``state`` is the robot's latest state vector; human devices ignore
        it, scripted operators use it to decide what to do."""

    def __enter__(self) -> Teleop:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
