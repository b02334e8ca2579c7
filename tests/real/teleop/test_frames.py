"""The operator-frame -> robot-base-frame transform, deadband, scale and clipping (real.teleop.frames)."""

import numpy as np
import pytest
from robot_rl.real.teleop.frames import PRESETS, AxisShaping, DeviceFrame, to_action

FORWARD, LEFT, UP = np.eye(3)
X, Y, Z = np.eye(3)


def test_default_frame_is_operator_behind_the_robot():
    frame = DeviceFrame()
    np.testing.assert_allclose(frame.to_base(FORWARD), X)
    np.testing.assert_allclose(frame.to_base(LEFT), Y)
    np.testing.assert_allclose(frame.to_base(UP), Z)
    assert DeviceFrame.coerce(None).to_base(FORWARD) @ X == pytest.approx(1.0)


@pytest.mark.parametrize(
    "preset, forward, left",
    [
        ("behind_robot", X, Y),
        ("facing_robot", -X, -Y),
        ("robot_right", Y, -X),  # standing on the robot's -y side, facing +y
        ("robot_left", -Y, X),
    ],
)
def test_presets_map_forward_and_left_to_the_right_robot_axes(preset, forward, left):
    frame = DeviceFrame.preset(preset)
    np.testing.assert_allclose(frame.to_base(FORWARD), forward, atol=1e-12)
    np.testing.assert_allclose(frame.to_base(LEFT), left, atol=1e-12)
    np.testing.assert_allclose(frame.to_base(UP), Z, atol=1e-12)


def test_yaw_90_operator_beside_robot():
    frame = DeviceFrame.from_yaw(90.0)
    # Device forward -> robot +y exactly (no 1e-17 leakage into x), device left -> robot -x.
    assert np.array_equal(frame.to_base(FORWARD), Y)
    assert np.array_equal(frame.to_base(LEFT), -X)
    np.testing.assert_array_equal(DeviceFrame.coerce(90).rotation, DeviceFrame.preset("robot_right").rotation)
    np.testing.assert_array_equal(DeviceFrame.coerce("robot_right").rotation, frame.rotation)


def test_arbitrary_yaw_is_counter_clockwise_from_x():
    frame = DeviceFrame.from_yaw(30.0)
    c, s = np.cos(np.deg2rad(30)), np.sin(np.deg2rad(30))
    np.testing.assert_allclose(frame.to_base(FORWARD), [c, s, 0.0])
    np.testing.assert_allclose(frame.to_base(LEFT), [-s, c, 0.0])


def test_rejects_reflections_and_non_rotations():
    with pytest.raises(ValueError, match="reflection"):
        DeviceFrame(np.diag([1.0, -1.0, 1.0]))  # a mirrored y axis: the classic sign bug
    with pytest.raises(ValueError, match="orthonormal"):
        DeviceFrame(np.diag([2.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="3x3"):
        DeviceFrame(np.eye(2))
    with pytest.raises(ValueError, match="3x3"):
        DeviceFrame(np.full((3, 3), np.nan))
    with pytest.raises(ValueError, match="preset"):
        DeviceFrame.preset("on_the_ceiling")
    with pytest.raises(TypeError):
        DeviceFrame.coerce([1, 2, 3])


def test_rotation_is_read_only_copy():
    m = np.eye(3)
    frame = DeviceFrame(m)
    m[0, 0] = 5.0  # mutating the input does not change the frame
    assert frame.rotation[0, 0] == 1.0
    with pytest.raises(ValueError):
        frame.rotation[0, 0] = 2.0


def test_presets_table_is_complete():
    assert set(PRESETS) == {"behind_robot", "facing_robot", "robot_right", "robot_left"}


def test_deadband_zeroes_small_readings_and_is_continuous():
    shaping = AxisShaping(deadband=0.1)
    np.testing.assert_array_equal(shaping.apply([0.05, -0.1, 0.0]), [0.0, 0.0, 0.0])
    out = shaping.apply([0.1 + 1e-9, -1.0, 0.55])
    assert out[0] == pytest.approx(0.0, abs=1e-8)  # no jump at the deadband edge
    assert out[1] == pytest.approx(-1.0)  # full deflection is still full scale
    assert out[2] == pytest.approx(0.5)  # (0.55 - 0.1) / 0.9
    assert not shaping.outside_deadband([0.1, -0.05, 0.0])
    assert shaping.outside_deadband([0.0, 0.0, -0.2])


def test_per_axis_deadband_and_scale():
    shaping = AxisShaping(deadband=(0.0, 0.5, 0.2), scale=(0.5, 2.0, 1.0))
    np.testing.assert_allclose(shaping.apply([1.0, 0.75, 0.1]), [0.5, 1.0, 0.0])
    with pytest.raises(ValueError):
        AxisShaping(deadband=1.0)
    with pytest.raises(ValueError):
        AxisShaping(deadband=-0.1)


def test_to_action_shape_dtype_gripper_and_clipping():
    a = to_action([0.5, 0.0, -0.25], gripper=1.0)
    assert a.dtype == np.float32 and a.shape == (4,)
    np.testing.assert_allclose(a, [0.5, 0.0, -0.25, 1.0])
    # Scale pushes past 1 -> clipped; gripper out of range -> clipped.
    a = to_action([1.0, -1.0, 0.0], gripper=3.0, shaping=AxisShaping(scale=2.0))
    np.testing.assert_allclose(a, [1.0, -1.0, 0.0, 1.0])


def test_to_action_clips_after_rotation():
    # Forward + left at full scale, operator at 45 degrees: all of it lands on robot +y (sqrt 2), clipped to 1.
    a = to_action([1.0, 1.0, 0.0], gripper=-1.0, frame=DeviceFrame.from_yaw(45.0))
    np.testing.assert_allclose(a, [0.0, 1.0, 0.0, -1.0], atol=1e-6)


def test_to_action_rejects_non_finite():
    with pytest.raises(ValueError, match="non-finite"):
        to_action([np.nan, 0.0, 0.0], gripper=0.0)
