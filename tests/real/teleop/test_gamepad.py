"""Gamepad teleop with an injected fake joystick: SDL axis signs, deadman, toggles, events."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from robot_rl.real.teleop.base import Event
from robot_rl.real.teleop.gamepad import GamepadMapping, GamepadTeleop

A, B, X_BTN, Y_BTN, LB, BACK, START = 0, 1, 2, 3, 4, 6, 7


class FakeJoystick:
    """Xbox-style layout as SDL's joystick API reports it on Linux: 6 axes, 11 buttons."""

    def __init__(self, num_axes: int = 6, num_buttons: int = 11) -> None:
        self.axes = [0.0] * num_axes
        self.buttons = [0] * num_buttons

    def get_axis(self, i: int) -> float:
        return self.axes[i]

    def get_button(self, i: int) -> int:
        return self.buttons[i]

    def get_numaxes(self) -> int:
        return len(self.axes)

    def get_numbuttons(self) -> int:
        return len(self.buttons)


def make(**kwargs):
    js = FakeJoystick()
    pad = GamepadTeleop(joystick=js, **kwargs)
    pad.connect()
    return pad, js


@pytest.mark.parametrize(
    "axis, value, expected",
    [
        (1, -1.0, [1, 0, 0]),  # left stick UP: SDL reads -1; must be robot +x, not -x
        (1, 1.0, [-1, 0, 0]),  # stick pulled back
        (0, -1.0, [0, 1, 0]),  # stick left -> robot left (+y)
        (0, 1.0, [0, -1, 0]),
        (4, -1.0, [0, 0, 1]),  # right stick up -> up
        (4, 1.0, [0, 0, -1]),
    ],
)
def test_sticks_in_robot_base_frame(axis, value, expected):
    pad, js = make()
    js.axes[axis] = value
    np.testing.assert_allclose(pad.read().action, [*expected, -1.0])


def test_rotated_frame_operator_beside_robot():
    pad, js = make(frame=90.0)
    js.axes[1] = -1.0  # stick up = operator forward -> robot +y when standing on the robot's right
    np.testing.assert_allclose(pad.read().action[:3], [0, 1, 0], atol=1e-7)


def test_deadband_and_partial_deflection():
    pad, js = make(deadband=0.1)
    js.axes[1], js.axes[0] = -0.08, 0.05  # stick drift at rest
    np.testing.assert_array_equal(pad.read().action[:3], [0, 0, 0])
    js.axes[1] = -0.55
    assert pad.read().action[0] == pytest.approx(0.5)  # (0.55 - 0.1) / 0.9


def test_scale_and_clipping():
    pad, js = make(scale=2.0, deadband=0.0)
    js.axes[1] = -0.25
    assert pad.read().action[0] == pytest.approx(0.5)
    js.axes[1] = -0.9
    assert pad.read().action[0] == 1.0


def test_deadman_active_only_while_held():
    pad, js = make()
    js.axes[1] = -1.0
    assert not pad.read().active  # moving the stick alone does not take over
    js.buttons[LB] = 1
    assert pad.read().active
    assert pad.read().active
    js.buttons[LB] = 0
    assert not pad.read().active


def test_gripper_toggles_on_press_edge():
    pad, js = make()
    assert pad.read().action[3] == -1.0
    js.buttons[A] = 1
    assert pad.read().action[3] == 1.0
    assert pad.read().action[3] == 1.0  # still held: no second toggle
    js.buttons[A] = 0
    assert pad.read().action[3] == 1.0
    js.buttons[A] = 1
    assert pad.read().action[3] == -1.0
    pad.reset()
    js.buttons[A] = 1  # held across the reset: no toggle
    assert pad.read().action[3] == -1.0


@pytest.mark.parametrize(
    "button, event",
    [
        (Y_BTN, Event.SUCCESS),
        (X_BTN, Event.FAILURE),
        (B, Event.RERECORD),
        (BACK, Event.REWIND),
        (START, Event.ESTOP),
    ],
)
def test_event_buttons_fire_once_per_press(button, event):
    pad, js = make()
    assert pad.read().events == frozenset()
    js.buttons[button] = 1
    assert pad.read().events == {event}
    assert pad.read().events == frozenset()
    js.buttons[button] = 0
    pad.read()
    js.buttons[button] = 1
    assert pad.read().events == {event}


def test_custom_mapping_and_pump():
    calls = []
    mapping = GamepadMapping(
        forward_axis=3,
        left_axis=2,
        up_axis=0,
        deadman_button=1,
        gripper_button=0,
        event_buttons={2: Event.ESTOP},
    )
    js = FakeJoystick(num_axes=4, num_buttons=3)
    pad = GamepadTeleop(joystick=js, mapping=mapping, pump=lambda: calls.append(1))
    js.axes[3], js.buttons[1], js.buttons[2] = -1.0, 1, 1
    cmd = pad.read()
    np.testing.assert_allclose(cmd.action[:3], [1, 0, 0])
    assert cmd.active and cmd.events == {Event.ESTOP}
    assert calls == [1]


def test_mapping_that_does_not_fit_the_pad_is_refused():
    with pytest.raises(ValueError, match="axes"):
        GamepadTeleop(joystick=FakeJoystick(num_axes=2, num_buttons=11))
    with pytest.raises(ValueError, match="buttons"):
        GamepadTeleop(joystick=FakeJoystick(num_axes=6, num_buttons=4))


def test_read_before_connect():
    with pytest.raises(RuntimeError, match="connect"):
        GamepadTeleop().read()


def test_missing_pygame_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygame", None)  # makes `import pygame` raise ImportError
    with pytest.raises(ImportError, match="pip install pygame"):
        GamepadTeleop().connect()


def test_importing_the_teleop_package_does_not_import_device_libraries():
    code = (
        "import sys, real.teleop, real.teleop.gamepad, real.teleop.spacemouse\n"
        "bad = [m for m in ('pygame', 'pyspacemouse', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])
