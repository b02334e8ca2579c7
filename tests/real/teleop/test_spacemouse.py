"""SpaceMouse teleop with an injected read function: axis convention, activity, buttons, device opening."""

import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
from robot_rl.real.teleop.base import Event
from robot_rl.real.teleop.spacemouse import SpaceMouseTeleop


class Puck:
    """Stands in for pyspacemouse: ``read()`` returns the current state object."""

    def __init__(self) -> None:
        self.state = SimpleNamespace(t=0.0, x=0.0, y=0.0, z=0.0, roll=0.0, pitch=0.0, yaw=0.0, buttons=[0, 0])
        self.t = 10.0

    def read(self):
        return SimpleNamespace(**vars(self.state))

    def clock(self) -> float:
        return self.t


def make(**kwargs):
    puck = Puck()
    sm = SpaceMouseTeleop(read_fn=puck.read, clock=puck.clock, **kwargs)
    sm.connect()
    return sm, puck


@pytest.mark.parametrize(
    "axis, value, expected",
    [
        ("y", 1.0, [1, 0, 0]),  # puck pushed away from the operator (who faces the workspace) -> robot +x
        ("y", -1.0, [-1, 0, 0]),  # pulled towards the operator
        ("x", 1.0, [0, -1, 0]),  # pushed right -> robot's right = -y
        ("x", -1.0, [0, 1, 0]),
        ("z", 1.0, [0, 0, 1]),  # lifted -> up
        ("z", -1.0, [0, 0, -1]),
    ],
)
def test_puck_in_robot_base_frame(axis, value, expected):
    sm, puck = make(deadband=0.0)
    setattr(puck.state, axis, value)
    cmd = sm.read()
    np.testing.assert_allclose(cmd.action, [*expected, -1.0])
    assert cmd.action.dtype == np.float32 and cmd.active


@pytest.mark.parametrize("frame, expected", [("robot_right", [0, 1, 0]), ("facing_robot", [-1, 0, 0])])
def test_rotated_frames(frame, expected):
    sm, puck = make(frame=frame)
    puck.state.y = 1.0  # away from the operator
    np.testing.assert_allclose(sm.read().action[:3], expected, atol=1e-7)


def test_rotations_are_ignored():
    sm, puck = make()
    puck.state.roll = puck.state.pitch = puck.state.yaw = 1.0
    cmd = sm.read()
    np.testing.assert_array_equal(cmd.action[:3], [0, 0, 0])
    assert not cmd.active


def test_deadband_scale_and_clipping():
    sm, puck = make(deadband=0.1, scale=1.5)
    puck.state.y = 0.08  # a puck that does not quite centre
    cmd = sm.read()
    assert cmd.action[0] == 0.0 and not cmd.active
    puck.state.y = 0.4
    assert sm.read().action[0] == pytest.approx(1.5 * 0.3 / 0.9)
    puck.state.y = 0.9
    assert sm.read().action[0] == 1.0


def test_active_while_deflected_plus_linger():
    sm, puck = make(linger_s=0.3)
    assert not sm.read().active
    puck.state.x = 0.5
    assert sm.read().active
    puck.state.x = 0.0  # passing through the centre
    puck.t += 0.2
    cmd = sm.read()
    assert cmd.active and np.all(cmd.action[:3] == 0)
    puck.t += 0.2  # 0.4 s after the last deflection
    assert not sm.read().active


def test_gripper_button_toggles_on_press_and_takes_over_briefly():
    sm, puck = make(linger_s=0.3)
    puck.state.buttons = [1, 0]
    cmd = sm.read()
    assert cmd.action[3] == 1.0 and cmd.active  # the toggle must reach the robot
    assert sm.read().action[3] == 1.0  # held: no second toggle
    puck.state.buttons = [0, 0]
    puck.t += 1.0
    cmd = sm.read()
    assert cmd.action[3] == 1.0 and not cmd.active
    puck.state.buttons = [1, 0]
    assert sm.read().action[3] == -1.0
    sm.reset()
    assert sm.read().action[3] == -1.0


def test_event_buttons():
    sm, puck = make()
    puck.state.buttons = [0, 1]
    assert sm.read().events == {Event.SUCCESS}
    assert sm.read().events == frozenset()
    sm2, puck2 = make(button_events={2: Event.ESTOP, 3: Event.REWIND})
    puck2.state.buttons = [0, 0, 1, 1]
    assert sm2.read().events == {Event.ESTOP, Event.REWIND}


def test_old_pyspacemouse_button_attribute():
    sm = SpaceMouseTeleop(read_fn=lambda: SimpleNamespace(x=0.0, y=0.0, z=0.0, button=[0, 1]))
    assert sm.read().events == {Event.SUCCESS}


def test_raw_axis_matrix_must_be_a_rotation():
    with pytest.raises(ValueError, match="reflection"):
        SpaceMouseTeleop(read_fn=lambda: None, raw_to_operator=np.diag([1.0, 1.0, -1.0]))
    # The raw HID convention (+y towards the user, +z down) is a proper rotation of the legacy one.
    hid = np.array([[0.0, -1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    sm = SpaceMouseTeleop(
        read_fn=lambda: SimpleNamespace(x=0.0, y=-1.0, z=0.0, buttons=[]), raw_to_operator=hid
    )
    np.testing.assert_allclose(sm.read().action[:3], [1, 0, 0])  # HID y = -1 is away from the user


def test_missing_pyspacemouse_explains_install_and_permissions(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspacemouse", None)
    with pytest.raises(ImportError) as info:
        SpaceMouseTeleop().connect()
    message = str(info.value)
    assert "pip install pyspacemouse" in message
    assert "udev" in message and "hidraw" in message and "256f" in message


def test_opens_device_through_pyspacemouse(monkeypatch):
    closed = []
    device = SimpleNamespace(
        read=lambda: SimpleNamespace(x=0.0, y=0.7, z=0.0, buttons=[0, 0]), close=lambda: closed.append(1)
    )
    fake = types.ModuleType("pyspacemouse")
    fake.open = lambda: device
    monkeypatch.setitem(sys.modules, "pyspacemouse", fake)
    sm = SpaceMouseTeleop(deadband=0.0)
    with sm:
        assert sm.read().action[0] == pytest.approx(0.7)
    assert closed == [1]
    sm.disconnect()  # safe twice
    assert closed == [1]

    fake.open = lambda: None  # no device / no permission
    with pytest.raises(RuntimeError, match="udev"):
        SpaceMouseTeleop().connect()


def test_read_before_connect():
    with pytest.raises(RuntimeError, match="connect"):
        SpaceMouseTeleop().read()
