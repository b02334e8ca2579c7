"""Gamepad teleop through pygame's joystick API (SDL).

Why a deadman button: a gamepad sitting on a desk reads (almost) zero, but a stick that is bumped or drifts
does not, and the take-over flag decides whose actions the robot executes. So the operator drives only while
holding the deadman button; letting go hands control back to the policy at once.

Raw axes follow SDL (see ``robot_rl.real.teleop.frames``): sticks read -1..1 with +x to the right and **+y pulled
down** towards the operator, so "stick up" is a negative reading; this module negates it so that stick up is
forward (robot +x with the default ``behind_robot`` frame). The default ``GamepadMapping`` is the layout SDL's
joystick API reports for an Xbox-style pad on Linux (xpad driver); other pads number their axes and buttons
differently, so print ``get_axis``/``get_button`` while moving each control and pass your own mapping:

==============  ===============  ==========================
control         default          effect
==============  ===============  ==========================
left stick      axes 0 and 1     left/right, forward/back
right stick y   axis 4           up/down
LB              button 4         deadman (active while held)
A               button 0         toggle gripper (starts open)
Y               button 3         SUCCESS
X               button 2         FAILURE
B               button 1         RERECORD
Back / View     button 6         REWIND
Start / Menu    button 7         ESTOP
==============  ===============  ==========================

Toggles and events fire on the press (the released -> pressed edge), so holding a button sends one event.
Headless use: pygame needs no window for joysticks; this module sets ``SDL_VIDEODRIVER=dummy`` (if unset)
and ``SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS=1`` so the pad is read without a focused window. Tests inject a
fake joystick object and never import pygame.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .base import Event, Teleop, TeleopCommand
from .frames import AxisShaping, DeviceFrame, to_action

_PYGAME_HINT = "the gamepad teleop needs pygame (SDL): pip install pygame"


class JoystickLike(Protocol):
    """The part of ``pygame.joystick.JoystickType`` this device uses."""

    def get_axis(self, index: int) -> float: ...
    def get_button(self, index: int) -> int | bool: ...
    def get_numaxes(self) -> int: ...
    def get_numbuttons(self) -> int: ...


@dataclass(frozen=True)
class GamepadMapping:
    """Which SDL axis/button does what. Axis signs: forward = -axis(forward_axis) because SDL's stick y is
    positive down; same for up; left = -axis(left_axis) because SDL's stick x is positive right."""

    forward_axis: int = 1
    left_axis: int = 0
    up_axis: int = 4
    deadman_button: int = 4
    gripper_button: int = 0
    event_buttons: Mapping[int, Event] = field(
        default_factory=lambda: {
            3: Event.SUCCESS,
            2: Event.FAILURE,
            1: Event.RERECORD,
            6: Event.REWIND,
            7: Event.ESTOP,
        }
    )

    def max_axis(self) -> int:
        return max(self.forward_axis, self.left_axis, self.up_axis)

    def max_button(self) -> int:
        return max([self.deadman_button, self.gripper_button, *self.event_buttons])


def _import_pygame() -> Any:
    try:
        import pygame
    except ImportError as err:
        raise ImportError(_PYGAME_HINT) from err
    return pygame


class GamepadTeleop(Teleop):
    """Gamepad device (see the module docstring for the controls).

    Args:
        joystick: a joystick object (anything with ``get_axis/get_button/get_numaxes/get_numbuttons``); None =
            open pad ``index`` with pygame on ``connect()``.
        index: which pad pygame opens when ``joystick`` is None.
        mapping: axis and button numbers (``GamepadMapping``).
        frame: where the operator stands (``DeviceFrame``, preset name or yaw in degrees).
        deadband: stick deadband per operator axis (sticks rarely rest at exactly 0).
        scale: action magnitude at full stick deflection.
        pump: called before each read to update the joystick state (pygame's ``event.pump``; None with an
            injected joystick).
    """

    def __init__(
        self,
        joystick: JoystickLike | None = None,
        index: int = 0,
        mapping: GamepadMapping | None = None,
        frame: DeviceFrame | str | float | None = None,
        deadband: float | tuple[float, float, float] = 0.1,
        scale: float | tuple[float, float, float] = 1.0,
        pump: Callable[[], None] | None = None,
    ) -> None:
        self.mapping = mapping if mapping is not None else GamepadMapping()
        self.frame = DeviceFrame.coerce(frame)
        self.shaping = AxisShaping(deadband=deadband, scale=scale)
        self.index = int(index)
        self._joystick = joystick
        self._owns_pygame = False
        self._pump = pump
        self._gripper = -1.0
        self._prev_buttons: dict[int, bool] = {}
        if joystick is not None:
            self._check_layout(joystick)

    def _check_layout(self, joystick: JoystickLike) -> None:
        n_axes, n_buttons = joystick.get_numaxes(), joystick.get_numbuttons()
        if self.mapping.max_axis() >= n_axes or self.mapping.max_button() >= n_buttons:
            raise ValueError(
                f"gamepad has {n_axes} axes and {n_buttons} buttons, but the mapping uses axis "
                f"{self.mapping.max_axis()} and button {self.mapping.max_button()}; pass a GamepadMapping "
                "that fits this pad"
            )

    def connect(self) -> None:
        """Open the pad with pygame unless a joystick was injected."""
        if self._joystick is not None:
            return
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")
        pygame = _import_pygame()
        pygame.init()
        pygame.joystick.init()
        count = pygame.joystick.get_count()
        if self.index >= count:
            pygame.quit()
            raise RuntimeError(f"gamepad {self.index} not found: pygame sees {count} joystick(s)")
        joystick = pygame.joystick.Joystick(self.index)
        joystick.init()
        self._check_layout(joystick)
        self._joystick = joystick
        self._pump = pygame.event.pump
        self._owns_pygame = True

    def disconnect(self) -> None:
        """Release the pad (and pygame, if this device started it); safe to call twice."""
        if self._owns_pygame:
            _import_pygame().quit()
            self._owns_pygame = False
            self._joystick = None
            self._pump = None

    def reset(self) -> None:
        """New episode: gripper open. Button edges are kept, so a button held across the reset does not fire
        again."""
        self._gripper = -1.0

    def _pressed(self, button: int) -> bool:
        """True on the released -> pressed edge of ``button``."""
        assert self._joystick is not None
        down = bool(self._joystick.get_button(button))
        was = self._prev_buttons.get(button, False)
        self._prev_buttons[button] = down
        return down and not was

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """Sticks -> motion, deadman -> active, button presses -> gripper toggle and events."""
        if self._joystick is None:
            raise RuntimeError("GamepadTeleop.read() before connect()")
        if self._pump is not None:
            self._pump()
        js, m = self._joystick, self.mapping
        operator = np.array(
            [
                -float(js.get_axis(m.forward_axis)),  # SDL: stick up is negative
                -float(js.get_axis(m.left_axis)),  # SDL: stick right is positive
                -float(js.get_axis(m.up_axis)),
            ]
        )
        if self._pressed(m.gripper_button):
            self._gripper = -self._gripper
        events = frozenset(event for button, event in m.event_buttons.items() if self._pressed(button))
        active = bool(js.get_button(m.deadman_button))
        action = to_action(operator, self._gripper, self.frame, self.shaping)
        return TeleopCommand(action=action, active=active, events=events)
