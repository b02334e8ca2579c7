"""3Dconnexion SpaceMouse teleop through ``pyspacemouse`` (raw HID, no 3Dconnexion driver needed).

Why a SpaceMouse: it is a 3-D joystick, so one hand commands all three translation axes at once and the puck
springs back to zero when released, which makes "hands off = stop" natural.

Raw axes (pyspacemouse's default, "legacy" convention; see ``robot_rl.real.teleop.frames``): ``x`` = puck pushed
right, ``y`` = pushed away from the operator, ``z`` = pulled up, each about -1..1 (most pucks saturate
below 1, hence ``scale``). Mapped to the operator frame as forward = y, left = -x, up = z. If you open the
device with another pyspacemouse ``axis_convention`` the signs change; pass ``raw_to_operator`` to match.
Rotations (roll, pitch, yaw) are ignored: the arm tasks command translation only.

When the operator is active: while the puck is deflected beyond the deadband on any translation axis, and
for ``linger_s`` seconds after the last such deflection or gripper toggle. The linger keeps control with the
operator while the puck passes through the centre during a direction change, and lets a gripper toggle made
with the puck at rest reach the robot (a toggle while the policy drives would otherwise be thrown away).
There is no take-over button because the puck itself is the "I am driving" signal.

Buttons (pressed edge; a SpaceMouse Compact/Wireless has two, LEFT = 0 and RIGHT = 1): button 0 toggles the
gripper (starts open), button 1 sends SUCCESS; ``button_events`` maps more buttons on bigger models. The
other events come from a second device (e.g. the keyboard).

Linux setup (a permission error or "device not found" usually means one of these is missing):

1. ``pip install pyspacemouse`` (it uses ``easyhid``, which needs the hidapi C library:
   ``sudo apt-get install libhidapi-dev`` on Debian/Ubuntu);
2. give your user access to the hidraw device with a udev rule, e.g. the file
   ``/etc/udev/rules.d/99-spacemouse.rules`` containing
   ``KERNEL=="hidraw*", ATTRS{idVendor}=="256f", MODE="0666"`` (256f is 3Dconnexion's USB vendor id; older
   models use 046d, Logitech's);
3. ``sudo udevadm control --reload-rules && sudo udevadm trigger``, then re-plug the device.

Tests inject a read function returning objects with ``x, y, z`` and ``buttons`` instead of opening a device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .base import Event, Teleop, TeleopCommand
from .frames import AxisShaping, DeviceFrame, to_action

INSTALL_HINT = (
    "the SpaceMouse teleop needs pyspacemouse: pip install pyspacemouse. On Linux it also needs hidapi "
    "(sudo apt-get install libhidapi-dev) and access to the hidraw device: add a udev rule such as "
    'KERNEL=="hidraw*", ATTRS{idVendor}=="256f", MODE="0666" in /etc/udev/rules.d/99-spacemouse.rules, then '
    "run sudo udevadm control --reload-rules && sudo udevadm trigger and re-plug the device"
)

# Operator frame (forward, left, up) from the raw (x, y, z) of pyspacemouse's default convention.
LEGACY_TO_OPERATOR = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def _import_pyspacemouse() -> Any:
    try:
        import pyspacemouse
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return pyspacemouse


class SpaceMouseTeleop(Teleop):
    """SpaceMouse device (see the module docstring for axes, activity and buttons).

    Args:
        read_fn: returns the device state (``x, y, z`` floats and ``buttons``, a list of 0/1); None = open the
            first SpaceMouse with pyspacemouse on ``connect()``.
        frame: where the operator stands (``DeviceFrame``, preset name or yaw in degrees).
        deadband: per operator axis; readings inside it count as "puck at rest".
        scale: action per unit of puck reading (pucks rarely reach 1.0, so > 1 gives full speed earlier).
        linger_s: seconds the operator stays active after the last deflection or gripper toggle.
        gripper_button: button index that toggles the gripper.
        button_events: button index -> event sent on its press.
        raw_to_operator: 3x3 matrix from raw (x, y, z) to the operator frame (forward, left, up).
        clock: monotonic time source (injectable for tests).
    """

    def __init__(
        self,
        read_fn: Callable[[], Any] | None = None,
        frame: DeviceFrame | str | float | None = None,
        deadband: float | tuple[float, float, float] = 0.1,
        scale: float | tuple[float, float, float] = 1.0,
        linger_s: float = 0.3,
        gripper_button: int = 0,
        button_events: Mapping[int, Event] | None = None,
        raw_to_operator: np.ndarray | Sequence[Sequence[float]] = LEGACY_TO_OPERATOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if linger_s < 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s}")
        self.frame = DeviceFrame.coerce(frame)
        self.shaping = AxisShaping(deadband=deadband, scale=scale)
        self.linger_s = float(linger_s)
        self.gripper_button = int(gripper_button)
        self.button_events = dict(button_events) if button_events is not None else {1: Event.SUCCESS}
        # Validated as a proper rotation: a mirrored mapping is the bug this whole layer guards against.
        self.raw_to_operator = DeviceFrame(np.asarray(raw_to_operator, dtype=np.float64)).rotation
        self._read_fn = read_fn
        self._device: Any = None
        self._clock = clock
        self._gripper = -1.0
        self._last_active_at = -np.inf
        self._prev_buttons: list[bool] = []

    def connect(self) -> None:
        """Open the first SpaceMouse with pyspacemouse unless a read function was injected."""
        if self._read_fn is not None:
            return
        psm = _import_pyspacemouse()
        try:
            device = psm.open()
        except Exception as err:  # pyspacemouse raises different errors across versions and platforms
            raise RuntimeError(f"could not open a SpaceMouse ({err}); {INSTALL_HINT}") from err
        if not device:
            raise RuntimeError(f"no SpaceMouse found (or no permission to open it); {INSTALL_HINT}")
        self._device = device
        # Newer pyspacemouse returns a device object with read(); older ones keep the device module-level.
        self._read_fn = device.read if hasattr(device, "read") else psm.read

    def disconnect(self) -> None:
        """Close the device if this object opened it; safe to call twice."""
        if self._device is not None:
            close = getattr(self._device, "close", None)
            if close is not None:
                close()
            else:
                _import_pyspacemouse().close()
            self._device = None
            self._read_fn = None

    def reset(self) -> None:
        """New episode: gripper open, operator inactive until the puck moves again."""
        self._gripper = -1.0
        self._last_active_at = -np.inf

    def _edges(self, buttons: Sequence[Any]) -> set[int]:
        """Indices of buttons that went from released to pressed since the last read."""
        down = [bool(b) for b in buttons]
        prev = self._prev_buttons + [False] * (len(down) - len(self._prev_buttons))
        self._prev_buttons = down
        return {i for i, (now, was) in enumerate(zip(down, prev, strict=False)) if now and not was}

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """Puck translation -> motion; deflection (plus ``linger_s``) -> active; button presses -> gripper
        toggle and events."""
        if self._read_fn is None:
            raise RuntimeError("SpaceMouseTeleop.read() before connect()")
        raw_state = self._read_fn()
        now = self._clock()
        raw = np.array([float(raw_state.x), float(raw_state.y), float(raw_state.z)])
        operator = self.raw_to_operator @ raw
        buttons = getattr(raw_state, "buttons", None)
        if buttons is None:  # pyspacemouse before 1.0.4 calls the list `button`
            buttons = getattr(raw_state, "button", [])
        pressed = self._edges(buttons)
        if self.shaping.outside_deadband(operator):
            self._last_active_at = now
        if self.gripper_button in pressed:
            self._gripper = -self._gripper
            self._last_active_at = now
        events = frozenset(event for button, event in self.button_events.items() if button in pressed)
        active = (now - self._last_active_at) <= self.linger_s
        action = to_action(operator, self._gripper, self.frame, self.shaping)
        return TeleopCommand(action=action, active=active, events=events)
