"""``driver=lerobot`` and ``teleop=lerobot`` against doubles of LeRobot 0.4's ``Robot`` and ``Teleoperator``.

LeRobot itself cannot be installed beside the pinned torch (it asks for torch < 2.11), so the doubles implement its
documented interface (``observation_features``, ``action_features``, ``connect(calibrate)``, ``get_observation``,
``send_action`` returning what was sent, ``get_action``, ``get_teleop_events``) with an SO-101's joint names, and
move like position servos: each joint goes towards its goal at a bounded speed, in the double's clock.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from robot_rl.real.client import BridgeError, EStopLatched, RobotClient
from robot_rl.real.drivers import make_driver
from robot_rl.real.drivers.lerobot_arm import LeRobotArm
from robot_rl.real.server import RobotServer, ServerConfig
from robot_rl.real.teleop import Event, make_teleop

JOINTS = [f"{m}.pos" for m in ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")]
LIMITS = {j: (-90.0, 90.0) for j in JOINTS[:5]} | {"gripper.pos": (0.0, 100.0)}
TOKEN = "test-token"


class Clock:
    """A clock the test advances (``sleep``), shared by the double and the driver."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


class ServoArm:
    """A LeRobot ``Robot`` double: six position servos reaching for their goals at ``speed`` units per second."""

    name = "so101_follower"

    def __init__(self, clock=time.monotonic, speed: float = 150.0, camera: tuple[int, int] | None = None,
                 calibrated: bool = True) -> None:
        self.clock, self.speed, self.camera, self.calibrated = clock, speed, camera, calibrated
        self.pos = np.zeros(len(JOINTS))
        self.pos[5] = 50.0
        self.goal = self.pos.copy()
        self.connected = False
        self.connect_calls: list[bool] = []
        self.sent: list[dict[str, float]] = []
        self.blocked: set[int] = set()
        self.cap: float | None = None  # LeRobot's max_relative_target
        self._t = None

    @property
    def observation_features(self) -> dict:
        cams = {"front": (*self.camera, 3)} if self.camera else {}
        return {j: float for j in JOINTS} | cams

    @property
    def action_features(self) -> dict:
        return {j: float for j in JOINTS}

    @property
    def is_connected(self) -> bool:
        return self.connected

    @property
    def is_calibrated(self) -> bool:
        return self.calibrated

    def connect(self, calibrate: bool = True) -> None:
        self.connect_calls.append(calibrate)
        self.connected = True

    def calibrate(self) -> None:
        raise AssertionError("a server must never start LeRobot's interactive calibration")

    def _advance(self) -> None:
        now = self.clock()
        if self._t is not None:
            move = np.clip(self.goal - self.pos, -self.speed * (now - self._t), self.speed * (now - self._t))
            move[list(self.blocked)] = 0.0
            self.pos = self.pos + move
        self._t = now

    def get_observation(self) -> dict:
        assert self.connected, "LeRobot raises DeviceNotConnectedError here"
        self._advance()
        obs = {j: float(p) for j, p in zip(JOINTS, self.pos, strict=True)}
        if self.camera:
            obs["front"] = np.full((*self.camera, 3), int(self.pos[0]) % 256, np.uint8)
        return obs

    def send_action(self, action: dict) -> dict:
        assert self.connected
        self._advance()
        goal = np.array([action[j] for j in JOINTS])
        if self.cap is not None:
            goal = np.clip(goal, self.pos - self.cap, self.pos + self.cap)
        self.goal = goal
        self.sent.append(dict(zip(JOINTS, goal.tolist(), strict=True)))
        return dict(zip(JOINTS, goal.tolist(), strict=True))

    def disconnect(self) -> None:
        self.connected = False


class Leader:
    """A LeRobot ``Teleoperator`` double: a leader arm at ``pos``, with or without LeRobot's teleop events."""

    def __init__(self, events: dict | None = None) -> None:
        self.pos = np.zeros(len(JOINTS))
        self.events = events
        self.connected = False
        if events is not None:
            self.get_teleop_events = lambda: self.events

    action_features = property(lambda self: {j: float for j in JOINTS})
    is_connected = property(lambda self: self.connected)
    is_calibrated = property(lambda self: True)

    def connect(self, calibrate: bool = True) -> None:
        assert calibrate is False
        self.connected = True

    def get_action(self) -> dict:
        return {j: float(p) for j, p in zip(JOINTS, self.pos, strict=True)}

    def disconnect(self) -> None:
        self.connected = False


def _arm(clock: Clock, **kwargs) -> tuple[LeRobotArm, ServoArm]:
    double = ServoArm(clock=clock, camera=kwargs.pop("camera", None))
    arm = LeRobotArm(double, joint_limits=LIMITS, clock=clock, sleep=clock.sleep, **kwargs)
    arm.connect()
    return arm, double


def test_spec_state_and_cameras_come_from_the_robots_features():
    arm, double = _arm(Clock(), camera=(48, 64))
    assert double.connect_calls == [False]  # never LeRobot's interactive calibration from a server
    assert arm.spec.action_dim == 6 and arm.spec.state_dim == 6
    assert arm.spec.state_layout["gripper"] == (5, 6)
    assert [(c.name, c.shape) for c in arm.spec.cameras] == [("front", (48, 64, 3))]
    obs = arm.observe()
    assert obs.state.dtype == np.float32 and obs.state[5] == 50.0
    arm.spec.check_images(obs.images)


def test_actions_move_goals_by_steps_inside_the_limits_and_never_far_ahead_of_the_arm():
    clock = Clock()
    arm, double = _arm(clock, step_per_unit=2.0, max_lead_steps=2.0, control_hz=20.0)
    arm.observe()
    arm.command(np.array([1.0, -0.5, 0, 0, 0, 0]))
    assert double.goal[:2] == pytest.approx([2.0, -1.0])
    double.blocked = {0}  # something holds the shoulder: its goal may lead the measured joint by 2 steps only
    for _ in range(10):
        clock.sleep(0.05)
        arm.observe()
        arm.command(np.array([1.0, 0, 0, 0, 0, 0]))
    assert double.goal[0] == pytest.approx(4.0)
    double.blocked = set()
    double.pos[1] = 89.5
    double.goal[1] = 89.5
    arm._goal = None
    arm.observe()
    arm.command(np.array([0, 1.0, 0, 0, 0, 1.0]))
    assert double.goal[1] == 90.0  # the limit, not 91.5
    assert double.goal[5] == 52.0


def test_hold_keeps_the_goal_and_stop_halts_where_the_arm_is():
    clock = Clock()
    arm, double = _arm(clock, step_per_unit=2.0, max_lead_steps=5.0, speed_tolerance=10.0)
    arm.observe()
    for _ in range(4):
        arm.command(np.array([1.0, 0, 0, 0, 0, 0]))  # goal 8 ahead, the arm has not moved yet
    arm.hold()
    assert double.goal[0] == pytest.approx(8.0)
    clock.sleep(0.02)  # the servo moved 3 of the 8
    arm.stop()
    assert double.goal[0] == pytest.approx(3.0)
    clock.sleep(1.0)
    arm.hold()
    assert arm.observe().state[0] == pytest.approx(3.0)


def test_a_joint_driven_past_its_limit_is_a_fault_but_bringing_it_back_is_not():
    clock = Clock()
    arm, double = _arm(clock, limit_margin=5.0, speed_tolerance=1e6)
    arm.observe()
    double.pos[2] = 94.0  # outside by 4: within the margin
    arm.observe()
    double.pos[2] = 96.0  # something pushed it further, beyond the margin
    with pytest.raises(RuntimeError, match="elbow_flex.pos measured at 96.00, outside its limits"):
        arm.observe()
    double.pos[2] = 95.5  # coming back in
    arm.observe()
    arm.command(np.array([0, 0, 1.0, 0, 0, 0]))
    assert double.goal[2] <= 90.0  # a goal is never outside the limits, whatever the action


def test_a_joint_moving_faster_than_the_step_limit_allows_is_a_fault():
    clock = Clock()
    arm, double = _arm(clock, step_per_unit=2.0, control_hz=20.0, speed_tolerance=2.5)  # limit 100 units/s
    arm.observe()
    clock.sleep(0.05)
    double.pos[0] = double.goal[0] = 4.0  # 80 units/s
    arm.observe()
    clock.sleep(0.05)
    double.pos[0] = double.goal[0] = 10.0  # 120 units/s
    with pytest.raises(RuntimeError, match="shoulder_pan.pos moved at 120.0 units/s"):
        arm.observe()
    double.pos[3] = float("nan")
    with pytest.raises(RuntimeError, match="not finite"):
        arm.observe()


def test_reset_walks_home_at_its_speed_and_fails_when_a_joint_does_not_arrive():
    clock = Clock()
    home = dict(zip(JOINTS, [30.0, -20.0, 10.0, 0.0, 0.0, 20.0], strict=True))
    arm, double = _arm(clock, home=home, reset_speed=40.0, control_hz=20.0)
    obs = arm.reset()
    assert obs.state == pytest.approx(np.array(list(home.values())), abs=2.0)
    steps = np.diff([s["shoulder_pan.pos"] for s in double.sent])
    assert np.max(np.abs(steps)) <= 2.0 + 1e-9  # 40 units/s at 20 Hz
    assert clock.t == pytest.approx(0.75 + 0.05, abs=0.11)  # 30 units at 40/s, then settling
    double.blocked = {1}
    arm2 = LeRobotArm(double, joint_limits=LIMITS, home=dict(home, **{"shoulder_lift.pos": 40.0}), clock=clock,
                      sleep=clock.sleep, reset_timeout_s=3.0)
    with pytest.raises(RuntimeError, match="reset: shoulder_lift.pos at -20.00 did not reach home 40 within 3 s"):
        arm2.reset()


def test_lerobots_own_cap_on_the_goal_is_what_the_driver_tracks():
    clock = Clock()
    arm, double = _arm(clock, step_per_unit=2.0, max_lead_steps=5.0)
    double.cap = 1.0
    arm.observe()
    arm.command(np.array([1.0, 0, 0, 0, 0, 0]))
    arm.command(np.array([1.0, 0, 0, 0, 0, 0]))
    assert double.goal[0] == pytest.approx(1.0)  # capped at 1 from the (unmoved) arm both times, not 4


def test_bad_configuration_gets_one_line_errors():
    double = ServoArm()
    with pytest.raises(ValueError, match="joint_limits .* is required"):
        LeRobotArm(double)
    with pytest.raises(ValueError, match=r"missing \['gripper.pos'\]"):
        LeRobotArm(double, joint_limits={j: LIMITS[j] for j in JOINTS[:5]})
    with pytest.raises(ValueError, match="low < high"):
        LeRobotArm(double, joint_limits=LIMITS | {"gripper.pos": (10.0, 0.0)})
    with pytest.raises(ValueError, match="outside joint_limits"):
        LeRobotArm(double, joint_limits=LIMITS, home=dict.fromkeys(JOINTS, 95.0))
    with pytest.raises(ValueError, match="either robot"):
        LeRobotArm(joint_limits=LIMITS)
    with pytest.raises(ValueError, match="step_per_unit must be > 0"):
        LeRobotArm(double, joint_limits=LIMITS, step_per_unit=0.0)
    uncalibrated = ServoArm(calibrated=False)
    with pytest.raises(RuntimeError, match="not calibrated: run LeRobot's calibration"):
        LeRobotArm(uncalibrated, joint_limits=LIMITS).connect()
    assert not uncalibrated.connected


def test_arm_file_and_building_by_name_without_lerobot(tmp_path, capsys):
    from robot_rl.real.drivers.lerobot_arm import load_arm_file

    path = tmp_path / "arm.json"
    path.write_text('{"joint_limits": {"shoulder_pan.pos": [-90, 90]}, "home": {"shoulder_pan.pos": 5}}')
    assert load_arm_file(path) == ({"shoulder_pan.pos": (-90, 90)}, {"shoulder_pan.pos": 5})
    (tmp_path / "bad.json").write_text('{"shoulder_pan.pos": [-90, 90]}')
    with pytest.raises(ValueError, match="expected"):
        load_arm_file(tmp_path / "bad.json")
    arm = LeRobotArm(ServoArm(), arm_file=str(_write_arm(tmp_path)))
    assert arm.home is not None and arm.high[5] == 100.0
    try:
        import lerobot  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="driver=lerobot needs LeRobot"):
            make_driver("lerobot", robot_type="so101_follower", port="/dev/null", arm_file=str(path))
        from robot_rl.cli import main

        code = main(["serve-robot", "driver=lerobot", "driver_args.robot_type=so101_follower",
                     "driver_args.port=/dev/ttyACM0", f"driver_args.arm_file={path}", "allow_unauthenticated=true"])
        err = capsys.readouterr().err
        assert code == 2 and "driver=lerobot needs LeRobot" in err and err.count("\n") == 1, err


def _write_arm(tmp_path):
    import json

    path = tmp_path / "so101.json"
    path.write_text(json.dumps({"joint_limits": LIMITS, "home": dict.fromkeys(JOINTS, 0.0) | {"gripper.pos": 50.0}}))
    return path


def test_a_lerobot_arm_served_over_the_bridge_moves_reports_frames_and_latches_on_a_fault():
    double = ServoArm(camera=(24, 32))
    arm = LeRobotArm(double, joint_limits=LIMITS, control_hz=50.0, step_per_unit=1.0,
                     home=dict(zip(JOINTS, [5.0, 0.0, 0.0, 0.0, 0.0, 50.0], strict=True)))
    server = RobotServer(arm, ServerConfig(port=0, token=TOKEN, watchdog_s=0.5))
    port = server.start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)
    try:
        spec = client.spec()
        assert spec.action_dim == 6 and spec.cartesian is None
        obs = client.reset(seed=0)
        assert obs.state[0] == pytest.approx(5.0, abs=2.0)
        assert obs.images["front"].shape == (24, 32, 3)
        for _ in range(20):
            r = client.step([1.0, 0.0, 0.0, 0.0, 0.0, -1.0])
        assert r.observation.state[0] > 15.0 and r.observation.state[5] < 40.0
        with pytest.raises(BridgeError, match="outside its limits"):
            double.pos[1] = double.goal[1] = -120.0  # pushed far past its limit
            for _ in range(5):
                client.step([0.0] * 6)
        assert server.status().state == "estop"
        assert double.goal[1] == pytest.approx(-120.0, abs=1.0)  # stopped where it is, not pulled back in
        with pytest.raises(EStopLatched):
            client.step([0.0] * 6)
    finally:
        client.close()
        server.stop()
    assert not double.connected  # the server disconnects its driver


def test_a_leader_arm_leads_the_follower_one_step_at_a_time():
    leader = Leader()
    device = make_teleop("lerobot", teleoperator=leader, step_per_unit=2.0, engage_steps=1.0)
    device.connect()
    follower = np.array([0, 0, 0, 0, 0, 50.0], np.float32)
    leader.pos = follower.astype(np.float64).copy()
    leader.pos[5] = 51.0
    cmd = device.read(follower)
    assert cmd.action == pytest.approx([0, 0, 0, 0, 0, 0.5]) and not cmd.active  # resting near the follower
    leader.pos[0] = 30.0
    cmd = device.read(follower)
    assert cmd.action[0] == 1.0 and cmd.active  # moved away: the operator takes over, the follower chases
    with pytest.raises(ValueError, match="needs the robot's state"):
        device.read(None)


def test_lerobots_teleop_events_decide_who_drives_and_label_the_episode():
    leader = Leader(events={"is_intervention": False, "success": False})
    device = make_teleop("lerobot", teleoperator=leader)
    state = np.zeros(6, np.float32)
    leader.pos[0] = 30.0
    assert not device.read(state).active  # far apart, but the device says nobody intervenes
    leader.events = {"is_intervention": True, "success": True, "rerecord_episode": False}
    cmd = device.read(state)
    assert cmd.active and cmd.events == {Event.SUCCESS}
    with pytest.raises(ValueError, match="missing"):
        make_teleop("lerobot", teleoperator=leader, joints=["elbow.pos"])


class GamepadPerson:
    """A LeRobot gamepad (``GamepadTeleop``'s ``action_features``, ``get_action`` and ``get_teleop_events``, its
    default step size 1.0) in the hands of a person who follows the arm task's scripted expert while watching the
    scene (``watch(state)``), and presses success when the task is done."""

    action_features = {"dtype": "float32", "shape": (4,), "names": {"delta_x": 0, "delta_y": 1, "delta_z": 2,
                                                                    "gripper": 3}}
    is_connected = True
    is_calibrated = True

    def __init__(self, task: str) -> None:
        from robot_rl.real.teleop.scripted import ScriptedTeleop

        self.expert = ScriptedTeleop(task, mode="always")
        self.state: np.ndarray | None = None
        self.done = False

    def watch(self, state: np.ndarray, success: bool) -> None:
        self.state, self.done = state, success

    def get_action(self) -> dict:
        a = self.expert.read(self.state).action
        return {"delta_x": a[0], "delta_y": a[1], "delta_z": a[2], "gripper": 0 if a[3] > 0 else 2}

    def get_teleop_events(self) -> dict:
        return {"is_intervention": True, "terminate_episode": self.done, "success": self.done,
                "rerecord_episode": False}


def test_an_episode_of_the_served_sim_arm_driven_through_lerobots_gamepad_interface():
    """Issue 61's check: one sim-arm episode driven through the LeRobot teleop adapter, over the bridge."""
    from robot_rl.real.drivers.sim_arm import SimArm

    server = RobotServer(SimArm(task="reach", control_hz=50.0, seed=0), ServerConfig(port=0, token=TOKEN))
    port = server.start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)
    pad = GamepadPerson("reach")
    device = make_teleop("lerobot", teleoperator=pad)
    assert device.cartesian and device.action_dim == 4
    try:
        obs = client.reset(seed=1)
        device.reset()
        labels, steps = set(), 0
        while steps < 200:
            pad.watch(obs.state, obs.success)
            cmd = device.read(obs.state)
            assert cmd.active
            if cmd.events:
                labels = set(cmd.events)
                break
            obs = client.step(cmd.action).observation
            steps += 1
    finally:
        client.close()
        server.stop()
    assert labels == {Event.SUCCESS}, f"no success after {steps} steps"
    assert steps < 150


def test_lerobots_gripper_command_is_held_while_it_says_stay():
    pad = GamepadPerson("reach")
    device = make_teleop("lerobot", teleoperator=pad, delta_scale=0.5)
    pad.get_action = lambda: {"delta_x": 0.25, "delta_y": -2.0, "delta_z": 0.0, "gripper": 0}
    assert device.read().action == pytest.approx([0.5, -1.0, 0.0, 1.0])
    pad.get_action = lambda: {"delta_x": 0.0, "delta_y": 0.0, "delta_z": 0.0, "gripper": 1}
    assert device.read().action[3] == 1.0  # stay: still closed
    device.reset()
    assert device.read().action[3] == -1.0  # a new episode starts open
    pad.get_teleop_events = lambda: {"is_intervention": False, "terminate_episode": True, "success": False,
                                     "rerecord_episode": False}
    assert device.read().events == {Event.FAILURE}


def test_building_by_name_imports_the_device_modules_that_register_their_types(tmp_path, monkeypatch):
    """LeRobot's packages do not import their devices, whose modules register the config type names: a stand-in
    package laid out as LeRobot 0.4's (``robots/config.py``, ``robots/utils.py``, one device subpackage)."""
    import sys

    root = tmp_path / "lerobot" / "robots"
    (root / "arm_x").mkdir(parents=True)
    (tmp_path / "lerobot" / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "config.py").write_text(
        "class RobotConfig:\n    _known = {}\n"
        "    @classmethod\n    def register(cls, name):\n"
        "        def wrap(sub):\n            cls._known[name] = sub\n            return sub\n        return wrap\n"
        "    @classmethod\n    def get_choice_class(cls, name):\n        return cls._known[name]\n"
        "    @classmethod\n    def get_known_choices(cls):\n        return dict(cls._known)\n")
    (root / "utils.py").write_text("def make_robot_from_config(config):\n    return ('built', config.port)\n")
    (root / "arm_x" / "__init__.py").write_text(
        "from ..config import RobotConfig\n\n@RobotConfig.register('arm_x')\nclass ArmX:\n"
        "    def __init__(self, port, id=None):\n        self.port = port\n")
    (root / "broken").mkdir()
    (root / "broken" / "__init__.py").write_text("import a_missing_sdk\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "lerobot" or m.startswith("lerobot.")]:
        monkeypatch.delitem(sys.modules, name)
    from robot_rl.real.lerobot_devices import build_lerobot_device

    assert build_lerobot_device("robot", "arm_x", {}, what="driver=lerobot", port="/dev/x") == ("built", "/dev/x")
    with pytest.raises(ValueError, match="unknown LeRobot robot type 'arm_y'; choose one of: arm_x"):
        build_lerobot_device("robot", "arm_y", {}, what="driver=lerobot")
    for name in [m for m in sys.modules if m == "lerobot" or m.startswith("lerobot.")]:
        monkeypatch.delitem(sys.modules, name)
