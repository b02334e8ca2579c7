"""URRobot against fake ``rtde_control`` / ``rtde_receive`` modules: pose arithmetic, limits, hold/stop."""

import sys
import types

import numpy as np
import pytest
from robot_rl.real.drivers.ur_rtde import STATE_DIM, URRobot

HOME = [0.4, -0.1, 0.3, 0.0, 3.14, 0.0]
LOW, HIGH = (0.2, -0.3, 0.05), (0.6, 0.3, 0.5)


class FakeArm:
    """The robot behind both fake interfaces: records calls; the TCP follows servo targets by ``follow``."""

    def __init__(self) -> None:
        self.pose = np.array([0.3, 0.0, 0.2, 0.1, 3.0, 0.0])
        self.speed = np.arange(6) * 0.01
        self.calls: list[tuple] = []
        self.follow = 1.0  # fraction of the way to the target per servoL (0 = blocked arm)
        self.connected = True
        self.servo_result = True

    def log(self, name, *args):
        self.calls.append((name, *args))

    def names(self):
        return [c[0] for c in self.calls]

    def servo_poses(self):
        return [np.array(c[1]) for c in self.calls if c[0] == "servoL"]


def install_fakes(monkeypatch) -> FakeArm:
    arm = FakeArm()

    class RTDEControlInterface:
        def __init__(self, ip):
            arm.log("control_init", ip)

        def isConnected(self):
            return arm.connected

        def servoL(self, pose, speed, acceleration, time, lookahead_time, gain):
            arm.log("servoL", list(pose), speed, acceleration, time, lookahead_time, gain)
            target = np.asarray(pose)
            arm.pose = arm.pose + arm.follow * (target - arm.pose)
            return arm.servo_result

        def servoStop(self, a=10.0):
            arm.log("servoStop", a)
            return True

        def stopL(self, a=10.0, asynchronous=False):
            arm.log("stopL", a)

        def moveL(self, pose, speed=0.25, acceleration=1.2, asynchronous=False):
            arm.log("moveL", list(pose), speed, acceleration)
            arm.pose = np.asarray(pose, dtype=float)
            return True

        def stopScript(self):
            arm.log("stopScript")

        def disconnect(self):
            arm.log("control_disconnect")

    class RTDEReceiveInterface:
        def __init__(self, ip):
            arm.log("receive_init", ip)

        def isConnected(self):
            return arm.connected

        def getActualTCPPose(self):
            return arm.pose.tolist()

        def getActualTCPSpeed(self):
            return arm.speed.tolist()

        def disconnect(self):
            arm.log("receive_disconnect")

    control = types.ModuleType("rtde_control")
    control.RTDEControlInterface = RTDEControlInterface
    receive = types.ModuleType("rtde_receive")
    receive.RTDEReceiveInterface = RTDEReceiveInterface
    monkeypatch.setitem(sys.modules, "rtde_control", control)
    monkeypatch.setitem(sys.modules, "rtde_receive", receive)
    return arm


def make(monkeypatch, **kwargs):
    arm = install_fakes(monkeypatch)
    kwargs.setdefault("control_hz", 20.0)
    robot = URRobot("10.0.0.2", HOME, LOW, HIGH, **kwargs)
    robot.connect()
    return robot, arm


def test_spec_comes_from_the_constructor(monkeypatch):
    robot, arm = make(monkeypatch, metres_per_unit=0.02, max_step_m=0.015, max_speed_mps=0.4, time_limit=200)
    spec = robot.spec
    assert spec.state_dim == STATE_DIM == 13 and spec.action_dim == 4 and spec.control_hz == 20.0
    assert spec.action_low == (-1.0,) * 4 and spec.action_high == (1.0,) * 4 and spec.time_limit == 200
    c = spec.cartesian
    assert c.workspace_low == LOW and c.workspace_high == HIGH
    assert (c.metres_per_unit, c.max_step_m, c.max_speed_mps) == (0.02, 0.015, 0.4)
    assert c.ee_slice == (0, 3) and spec.state_layout["ee_pos"] == (0, 3)
    assert arm.calls[:2] == [("receive_init", "10.0.0.2"), ("control_init", "10.0.0.2")]


def test_reset_moves_home_and_observe_reports_pose_and_speed(monkeypatch):
    grips = []
    robot, arm = make(monkeypatch, move_speed=0.05, move_accel=0.3, gripper=grips.append)
    obs = robot.reset()
    assert arm.calls[-1] == ("moveL", HOME, 0.05, 0.3)
    assert grips == [-1.0]
    assert obs.state.dtype == np.float32 and obs.state.shape == (13,)
    np.testing.assert_allclose(obs.state[:6], HOME, rtol=1e-6)
    np.testing.assert_allclose(obs.state[6:12], arm.speed, rtol=1e-6)
    assert obs.state[12] == -1.0 and obs.stamp > 0


def test_command_pose_arithmetic(monkeypatch):
    grips = []
    robot, arm = make(
        monkeypatch, metres_per_unit=0.025, servo_lookahead_s=0.05, servo_gain=500, gripper=grips.append
    )
    robot.reset()
    robot.command(np.array([0.4, -0.2, 0.0, 0.5]))
    name, pose, speed, accel, t, lookahead, gain = arm.calls[-1]
    assert name == "servoL"
    np.testing.assert_allclose(pose, [0.41, -0.105, 0.3, 0.0, 3.14, 0.0])  # orientation kept
    assert t == pytest.approx(0.05) and lookahead == 0.05 and gain == 500
    assert grips[-1] == 0.5 and robot.observe().state[12] == 0.5
    # The next target builds on the previous target, not on the (lagging) measured pose.
    arm.follow = 0.5
    robot.command(np.array([0.0, 0.0, -1.0, 0.5]))
    robot.command(np.array([0.0, 0.0, -1.0, 0.5]))
    np.testing.assert_allclose(arm.servo_poses()[-1], [0.41, -0.105, 0.25, 0.0, 3.14, 0.0])


def test_orientation_is_held_even_if_measured_orientation_drifts(monkeypatch):
    robot, arm = make(monkeypatch)
    robot.reset()
    robot.command(np.array([0.1, 0.0, 0.0, 0.0]))
    arm.pose[3:] += 0.05
    robot.command(np.array([0.1, 0.0, 0.0, 0.0]))
    np.testing.assert_allclose(arm.servo_poses()[-1][3:], HOME[3:])


@pytest.mark.parametrize("follow", [1.0, 0.3, 0.0])
def test_commands_never_exceed_the_limits(monkeypatch, follow):
    robot, arm = make(monkeypatch, metres_per_unit=0.05, max_step_m=0.02, max_speed_mps=0.3)
    robot.reset()
    arm.follow = follow
    step_limit = min(0.02, 0.3 / 20.0)
    rng = np.random.default_rng(0)
    prev = np.array(HOME)
    for i in range(300):
        # Mostly saturating actions (also out of range), pushing towards the box walls in bursts.
        direction = rng.choice([-1.0, 1.0], size=3) * (3.0 if i % 50 < 40 else rng.uniform(0, 1, 3))
        measured = arm.pose.copy()
        robot.command(np.concatenate([direction, [0.0]]))
        pose = arm.servo_poses()[-1]
        assert np.all(pose[:3] >= np.array(LOW) - 1e-12) and np.all(pose[:3] <= np.array(HIGH) + 1e-12)
        assert np.linalg.norm(pose[:3] - prev[:3]) <= step_limit + 1e-12
        # The lead limit is soft (the step cap wins), but the target never runs away from the arm.
        assert np.linalg.norm(pose[:3] - measured[:3]) <= robot.max_lead_m + step_limit + 1e-9
        np.testing.assert_allclose(pose[3:], HOME[3:])
        prev = pose


@pytest.mark.parametrize("pushed_to", [[0.55, 0.25, 0.45], [0.4, -0.1, 0.62], [0.7, 0.4, 0.0]])
def test_limits_hold_when_the_arm_is_pushed_away_from_its_target(monkeypatch, pushed_to):
    """Someone shoves the arm (possibly out of the box): the lead limit pulls the target towards it, but the
    target still moves at most one step per command and stays in the box."""
    robot, arm = make(monkeypatch, max_lead_m=0.03)
    robot.reset()
    arm.follow = 0.0
    robot.command(np.array([0.0, 0.0, 0.0, 0.0]))
    prev = arm.servo_poses()[-1]
    arm.pose[:3] = pushed_to
    for _ in range(30):
        robot.command(np.array([0.0, 0.0, 0.0, 0.0]))
        pose = arm.servo_poses()[-1]
        assert np.linalg.norm(pose[:3] - prev[:3]) <= robot.step_limit_m + 1e-12
        assert np.all(pose[:3] >= np.array(LOW) - 1e-12) and np.all(pose[:3] <= np.array(HIGH) + 1e-12)
        prev = pose
    # It has converged on the box point within max_lead of where the arm is.
    inside = np.clip(pushed_to, LOW, HIGH)
    assert np.linalg.norm(prev[:3] - inside) <= 0.03 + 1e-9


def test_step_limit_comes_from_speed_and_rate(monkeypatch):
    robot, arm = make(monkeypatch, metres_per_unit=0.025, max_step_m=0.025, max_speed_mps=0.2)
    robot.reset()
    robot.command(np.array([1.0, 0.0, 0.0, 0.0]))
    assert arm.servo_poses()[-1][0] == pytest.approx(HOME[0] + 0.01)  # 0.2 m/s at 20 Hz


def test_blocked_arm_does_not_wind_up(monkeypatch):
    robot, arm = make(monkeypatch, max_lead_m=0.03)
    robot.reset()
    arm.follow = 0.0
    for _ in range(20):
        robot.command(np.array([1.0, 0.0, 0.0, 0.0]))
    assert arm.servo_poses()[-1][0] == pytest.approx(HOME[0] + 0.03)


def test_hold_resends_the_target_and_does_not_stop_servoing(monkeypatch):
    robot, arm = make(monkeypatch)
    robot.reset()
    robot.hold()  # nothing to servo to yet: the arm stands still after moveL
    assert "servoL" not in arm.names()
    robot.command(np.array([0.5, 0.5, 0.0, 0.0]))
    target = arm.servo_poses()[-1]
    n = len(arm.calls)
    robot.hold()
    robot.hold()
    assert [c[0] for c in arm.calls[n:]] == ["servoL", "servoL"]
    for pose in arm.servo_poses()[-2:]:
        np.testing.assert_array_equal(pose, target)
    assert "servoStop" not in arm.names() and "stopL" not in arm.names()


def test_stop_uses_servo_stop_then_reanchors_on_the_measured_pose(monkeypatch):
    robot, arm = make(monkeypatch, stop_decel=3.0)
    robot.reset()
    arm.follow = 0.0
    robot.command(np.array([1.0, 0.0, 0.0, 0.0]))
    robot.stop()
    assert arm.calls[-1] == ("servoStop", 3.0)
    n = len(arm.calls)
    robot.hold()  # stopped: nothing is sent
    assert len(arm.calls) == n
    arm.pose[:3] = [0.35, 0.05, 0.2]  # where the arm came to rest
    robot.command(np.array([0.0, 0.0, 0.0, 0.0]))
    np.testing.assert_allclose(arm.servo_poses()[-1][:3], [0.35, 0.05, 0.2])  # not the old target
    robot.reset()
    robot.stop()  # not servoing: stopL
    assert arm.calls[-1] == ("stopL", 3.0)


def test_refuses_to_anchor_outside_the_box(monkeypatch):
    robot, arm = make(monkeypatch)
    arm.pose[:3] = [0.9, 0.0, 0.2]
    with pytest.raises(RuntimeError, match="outside the workspace"):
        robot.command(np.zeros(4))
    assert "servoL" not in arm.names()


def test_rejects_bad_actions(monkeypatch):
    robot, arm = make(monkeypatch)
    robot.reset()
    with pytest.raises(ValueError):
        robot.command(np.array([np.nan, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError):
        robot.command(np.zeros(3))
    assert "servoL" not in arm.names()


def test_controller_refusal_and_lost_connection(monkeypatch):
    robot, arm = make(monkeypatch)
    robot.reset()
    arm.servo_result = False
    with pytest.raises(RuntimeError, match="refused"):
        robot.command(np.zeros(4))
    arm.connected = False
    with pytest.raises(ConnectionError):
        robot.hold()


def test_not_connected_and_disconnect(monkeypatch):
    arm = install_fakes(monkeypatch)
    robot = URRobot("10.0.0.2", HOME, LOW, HIGH)
    with pytest.raises(RuntimeError, match="connect"):
        robot.observe()
    with robot:
        robot.reset()
        robot.command(np.zeros(4))
    assert arm.names()[-4:] == ["servoStop", "stopScript", "control_disconnect", "receive_disconnect"]
    n = len(arm.calls)
    robot.disconnect()  # safe twice
    assert len(arm.calls) == n


def test_connect_fails_cleanly_when_the_controller_is_unreachable(monkeypatch):
    arm = install_fakes(monkeypatch)
    arm.connected = False
    robot = URRobot("10.0.0.2", HOME, LOW, HIGH)
    with pytest.raises(ConnectionError):
        robot.connect()
    assert "control_disconnect" in arm.names() and "receive_disconnect" in arm.names()


def test_gripper_state_hook(monkeypatch):
    robot, arm = make(monkeypatch, gripper_state=lambda: 0.042)
    assert robot.reset().state[12] == pytest.approx(0.042)


def test_missing_ur_rtde_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "rtde_control", None)
    with pytest.raises(ImportError, match="pip install ur_rtde"):
        URRobot("10.0.0.2", HOME, LOW, HIGH).connect()


def test_constructor_validation():
    with pytest.raises(ValueError, match="outside"):
        URRobot("ip", [0.9, 0, 0.3, 0, 0, 0], LOW, HIGH)
    with pytest.raises(ValueError, match="home_pose"):
        URRobot("ip", [0.4, 0, 0.3], LOW, HIGH)
    with pytest.raises(ValueError, match="servo_gain"):
        URRobot("ip", HOME, LOW, HIGH, servo_gain=50)
    with pytest.raises(ValueError, match="lookahead"):
        URRobot("ip", HOME, LOW, HIGH, servo_lookahead_s=0.5)
    with pytest.raises(ValueError):
        URRobot("ip", HOME, HIGH, LOW)  # box upside down
    with pytest.raises(ValueError, match="move_speed"):
        URRobot("ip", HOME, LOW, HIGH, move_speed=0.6, max_speed_mps=0.5)  # reset() would exceed the speed limit


def test_camera_hook_declares_and_reads_frames(monkeypatch):
    from robot_rl.real.cameras import CallableCamera, OpenCVCamera, make_cameras

    frames = iter(np.full((4, 6, 3), i, np.uint8) for i in range(100))
    opened = []

    class Cam(CallableCamera):
        def open(self):
            opened.append(self.spec.name)

    robot, _ = make(monkeypatch, cameras=[Cam("wrist", 4, 6, lambda: next(frames))])
    assert [(c.name, c.shape) for c in robot.spec.cameras] == [("wrist", (4, 6, 3))]
    assert opened == ["wrist"]
    a, b = robot.observe().images["wrist"], robot.observe().images["wrist"]
    assert a.shape == (4, 6, 3) and a[0, 0, 0] == 0 and b[0, 0, 0] == 1  # the latest frame, a fresh array each time
    robot.spec.check_images(robot.observe().images)
    # {name: source} builds OpenCV cameras without importing OpenCV (opened only by connect()).
    cams = make_cameras({"front": 0, "wrist": "rtsp://cam/1"}, (96, 128))
    assert all(isinstance(c, OpenCVCamera) for c in cams) and cams[1].spec.shape == (96, 128, 3)
    with pytest.raises(TypeError, match="Camera objects"):
        make_cameras([lambda: None])
