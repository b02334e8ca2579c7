"""The robot bridge end to end on loopback: a real gRPC server serving the simulated arm, real clients.

What must hold whatever a client sends: nothing unsafe reaches the driver, bad messages get an error status and
the server keeps serving at its rate, the watchdog holds the arm after a client stalls, the e-stop latches.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from functools import partial

import grpc
import numpy as np
import pytest
import torch
from robot_rl.real.client import BridgeError, EStopLatched, RobotClient, Unauthenticated, make_env
from robot_rl.real.drivers.sim_arm import SimArm
from robot_rl.real.proto import pb
from robot_rl.real.safety import CLAMP_STEP, CLAMP_WORKSPACE
from robot_rl.real.server import RobotServer, ServerConfig

TOKEN = "test-token"
HZ = 50.0


class RecordingArm(SimArm):
    """The simulated arm, remembering every command that reached it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.commands: list[np.ndarray] = []
        self.fail_next = False

    def command(self, action: np.ndarray) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("simulated controller fault")
        self.commands.append(np.array(action))
        super().command(action)


@pytest.fixture
def served():
    robot = RecordingArm(task="reach", control_hz=HZ, seed=0)
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN, watchdog_s=0.2))
    port = server.start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)  # a shared VM can stall longer than 0.5 s
    try:
        yield server, robot, client, f"127.0.0.1:{port}"
    finally:
        client.close()
        server.stop()


def _ee(client: RobotClient) -> np.ndarray:
    return client.step(None).observation.state[:3].astype(np.float64)


def test_steps_move_the_arm_and_report_what_was_applied(served):
    server, robot, client, _ = served
    obs = client.reset(seed=3)
    start = obs.state[:3].copy()
    before = len(robot.commands)  # the reset itself is a motion: the server drove the hand to the start pose
    for _ in range(10):
        r = client.step([0.0, 0.0, 1.0, -1.0])
    assert r.applied_action is not None and r.applied_action.shape == (4,)
    assert r.observation.state[2] > start[2] + 0.02  # went up
    assert len(robot.commands) == before + 10
    assert server.status().commands == 10


@pytest.mark.parametrize(
    "action, reason",
    [([float("nan"), 0, 0, 0], "nonfinite"), ([0, float("inf"), 0, 0], "nonfinite"), ([0.1] * 3, "shape"),
     ([0.1] * 7, "shape")],
)
def test_bad_actions_are_rejected_and_never_reach_the_driver(served, action, reason):
    server, robot, client, _ = served
    before = len(robot.commands)
    with pytest.raises(BridgeError) as e:
        client.step(action)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    time.sleep(3 / HZ)
    assert len(robot.commands) == before
    assert client.status().rejected[reason] == 1
    client.step([0, 0, 0, 0])  # the server still serves
    assert len(robot.commands) == before + 1


def test_malformed_and_oversized_messages_get_errors_and_the_server_keeps_its_rate(served):
    server, robot, client, address = served
    channel = grpc.insecure_channel(address)
    raw = channel.unary_unary("/robot_rl.bridge.v1.RobotBridge/Step")  # no serializer: raw bytes on the wire
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\xff\xff\xff\xff\x0f garbage", timeout=1.0, metadata=metadata)
    assert e.value.code() in {grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT}
    huge = pb.StepRequest(action=[0.0] * 20_000).SerializeToString()  # 160 kB > the 64 kB limit
    with pytest.raises(grpc.RpcError) as e:
        raw(huge, timeout=1.0, metadata=metadata)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    unknown = channel.unary_unary("/robot_rl.bridge.v1.RobotBridge/Shutdown")
    with pytest.raises(grpc.RpcError) as e:
        unknown(b"", timeout=1.0, metadata=metadata)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    channel.close()
    assert robot.commands == []
    ticks = server.status().ticks
    time.sleep(1.0)
    # The control loop kept ticking. (Loose bound: on a shared VM the hypervisor can steal whole periods.)
    assert server.status().ticks - ticks >= 0.5 * HZ
    client.step([0.0, 0.0, 0.0, 0.0])


def test_unauthenticated_calls_are_refused(served):
    server, robot, _, address = served
    for token in (None, "wrong-token", TOKEN + "x"):
        bad = RobotClient(address, token or "")
        calls = (bad.spec, partial(bad.step, [0, 0, 0, 0]), bad.clear_estop, partial(bad.estop, "x"))
        for call in calls:
            with pytest.raises(Unauthenticated):
                call()
        bad.close()
    assert robot.commands == []
    assert server.status().rejected["unauthenticated"] == 12
    status = server.status()
    assert status.state != "estop" and status.estops == 0  # the unauthenticated EStop did nothing


def test_server_refuses_to_start_without_a_token_unless_told_and_only_on_loopback():
    with pytest.raises(ValueError, match="token"):
        ServerConfig(token=None).validate()
    with pytest.raises(ValueError, match="non-loopback"):
        ServerConfig(host="0.0.0.0", token=None, allow_unauthenticated=True).validate()
    ServerConfig(host="127.0.0.1", token=None, allow_unauthenticated=True).validate()


def test_workspace_and_step_clamps(served):
    server, robot, client, _ = served
    client.reset(seed=0)
    for _ in range(60):  # drive straight down into the table: the box floor stops it
        r = client.step([0.0, 0.0, -1.0, 0.0])
    assert r.clamp_flags & CLAMP_WORKSPACE
    floor = robot.spec.cartesian.workspace_low[2]
    assert r.observation.state[2] > floor - 0.005
    max_step = server.safety.max_step_m
    mpu = robot.spec.cartesian.metres_per_unit
    for a in robot.commands:
        assert np.linalg.norm(a[:3] * mpu) <= max_step + 1e-9
        assert np.all(np.abs(a) <= 1.0)
    assert server.status().clamped["workspace"] > 0


def test_speed_limit_clamps_the_step():
    robot = RecordingArm(task="reach", control_hz=HZ, max_speed_mps=0.2)
    # the filter's clamp alone (the speed governor, which scales below it, is tested in test_governor.py)
    with RobotServer(robot, ServerConfig(port=0, token=TOKEN, speed_governor=False)) as server:
        client = RobotClient(f"127.0.0.1:{server.port}", TOKEN, step_timeout_s=5.0)
        r = client.step([1.0, 1.0, 0.0, 0.0])
        assert r.clamp_flags & CLAMP_STEP
        step = np.linalg.norm(r.applied_action[:3]) * robot.spec.cartesian.metres_per_unit
        assert step == pytest.approx(0.2 / HZ, rel=1e-6)
        client.close()


def test_watchdog_holds_the_arm_after_the_client_stalls(served):
    server, robot, client, _ = served
    client.reset(seed=1)
    for _ in range(5):
        client.step([1.0, 0.0, 0.0, -1.0])  # moving fast
    commands = len(robot.commands)
    time.sleep(0.6)  # the client stalls (watchdog 0.2 s)
    status = server.status()
    assert status.state == "holding" and status.watchdog_trips >= 1
    ee0 = robot.observe().state[:3].copy()
    time.sleep(0.3)
    ee1 = robot.observe().state[:3].copy()
    assert np.linalg.norm(ee1 - ee0) < 1e-3  # held: neither drifting on with the last command nor sagging
    assert len(robot.commands) == commands  # holding is not commanding
    client.step([0.0, 0.0, 0.0, -1.0])  # a new command resumes
    assert server.status().state == "running"


def test_heartbeats_keep_the_watchdog_quiet_and_their_absence_trips_it():
    # A watchdog long enough that a hypervisor stall on a shared VM cannot trip it between heartbeats.
    with RobotServer(SimArm(task="reach", control_hz=HZ), ServerConfig(port=0, token=TOKEN, watchdog_s=1.5)) as s:
        client = RobotClient(f"127.0.0.1:{s.port}", TOKEN)
        for _ in range(15):
            client.heartbeat()
            time.sleep(0.1)
        assert s.status().watchdog_trips == 0
        time.sleep(2.0)
        assert s.status().watchdog_trips == 1 and s.status().state == "holding"
        client.close()


def test_estop_latches_until_cleared(served):
    server, robot, client, _ = served
    client.reset(seed=2)
    client.step([1.0, 0.0, 0.0, 0.0])
    client.estop("operator pressed the button")
    commands = len(robot.commands)
    ee0 = robot.observe().state[:3].copy()
    for _ in range(3):
        with pytest.raises(EStopLatched):
            client.step([1.0, 0.0, 0.0, 0.0])
        with pytest.raises(EStopLatched):
            client.reset()
        client.heartbeat()
        time.sleep(0.3)  # longer than the watchdog: the latch must not time out by itself
    assert server.status().state == "estop"
    assert len(robot.commands) == commands
    assert np.linalg.norm(robot.observe().state[:3] - ee0) < 0.01  # stopped where it was
    client.clear_estop()
    client.step([0.0, 0.0, 0.0, 0.0])
    assert len(robot.commands) == commands + 1
    status = server.status()
    assert status.estops == 1 and status.rejected["estop"] == 6


def test_driver_fault_latches_the_estop(served):
    server, robot, client, _ = served
    robot.fail_next = True
    with pytest.raises(BridgeError, match="controller fault"):
        client.step([0.1, 0.0, 0.0, 0.0])
    assert server.status().state == "estop"
    with pytest.raises(EStopLatched):
        client.step([0.1, 0.0, 0.0, 0.0])


def test_a_late_command_is_withdrawn_not_executed_later(served):
    server, robot, client, address = served
    slow = RobotClient(address, TOKEN, step_timeout_s=0.001)  # deadline shorter than a tick
    fails = 0
    for _ in range(20):
        try:
            slow.step([1.0, 0.0, 0.0, 0.0])
        except BridgeError as e:
            # On a loaded machine a 1 ms deadline can pass while the HTTP/2 stream is still being set up; the
            # transport then resets it (RST_STREAM, UNAVAILABLE) before the server sees it: also never executed.
            # The server's clock for a call's deadline starts when its header arrives, later than the client's, so
            # a retry can reach it while the previous call still counts as waiting there: refused as busy, never
            # executed either.
            assert e.code == grpc.StatusCode.DEADLINE_EXCEEDED or (
                e.code == grpc.StatusCode.UNAVAILABLE and "RST_STREAM" in str(e)) or (
                e.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "already queued" in str(e)), e
            fails += 1
    # A command taken by a tick at the very moment its deadline passes may still run, in that tick, with its reply
    # lost in transit (so applied can exceed 20 - fails); let the tick in progress finish before counting.
    time.sleep(1 / HZ)
    applied = len(robot.commands)
    time.sleep(5 / HZ)
    # Nothing queued by a timed-out call runs after that.
    assert len(robot.commands) == applied
    assert fails > 0 and applied < 20
    # Calls whose deadline passed in the server's queue were withdrawn there (gRPC drops the ones that expire
    # before they reach the servicer at all).
    assert applied <= 20 - server.status().rejected["deadline"]
    slow.close()


def test_batched_env_over_the_bridge(served):
    _, _, _, address = served
    env = make_env(address, TOKEN, seed=0, step_timeout_s=5.0)
    obs = env.reset()
    assert obs["state"].shape == (1, 29)
    for _ in range(60):  # a proportional controller: reach ends with success well inside 60 ticks
        action = torch.zeros(1, 4)
        action[:, :3] = (obs["state"][:, 26:29] / 0.01).clamp(-1, 1)
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated.any():
            break
    assert bool(terminated.all()) and bool(info["success"].all()) if "success" in info else bool(terminated.all())
    assert float(reward) > -0.05
    env.close()


def test_the_dynamic_track_task_is_served_and_caught_over_the_bridge():
    """arm:track on the served sim arm (20 Hz, real time): the target moves between ticks, and the scripted expert
    catches it through the client as in simulation."""
    from robot_rl.envs.arm import make_expert

    server = RobotServer(SimArm(task="track", seed=0), ServerConfig(port=0, token=TOKEN))
    env = make_env(f"127.0.0.1:{server.start()}", TOKEN, seed=0, step_timeout_s=5.0)
    try:
        expert = make_expert("arm:track", 1)
        obs = env.reset()
        targets = [obs["state"][0, 20:23].clone()]
        caught = False
        for _ in range(60):
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            targets.append(obs["state"][0, 20:23].clone())
            if terminated.any() or truncated.any():
                caught = bool(terminated.all() and info["success"].all())
                break
        assert caught
        moved = float((targets[1] - targets[0]).norm())  # one tick: 15 cm/s for 50 ms
        assert moved == pytest.approx(0.0075, rel=0.01)
    finally:
        env.close()
        server.stop()


def test_spec_carries_the_tasks_mirror_symmetry(served):
    from robot_rl.envs.arm import ArmEnv
    from robot_rl.envs.arm.constants import PROPRIO_MIRROR_SIGN
    from robot_rl.real.robot import CameraSpec, RobotSpec

    _, _, client, _ = served
    assert client.spec().mirror_state_sign == () == client.spec().mirror_action_sign  # reach declares none
    robot = SimArm(task="push", control_hz=HZ, seed=0)
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN))
    push = RobotClient(f"127.0.0.1:{server.start()}", TOKEN, step_timeout_s=5.0)
    try:
        state_sign, action_sign, _ = ArmEnv("push").reflection()
        spec = push.spec()
        assert spec.mirror_state_sign == tuple(state_sign.tolist()) and -1.0 in spec.mirror_state_sign
        assert spec.mirror_action_sign == tuple(action_sign.tolist()) and len(spec.mirror_action_sign) == 4
        assert spec.mirror_cameras == ()
    finally:
        push.close()
        server.stop()
    # with cameras: the proprioception's signs (or the full state's beside the frames) and both cameras mirrored
    for full_state in (False, True):
        robot = SimArm(task="push", control_hz=HZ, seed=0, pixels=True, pixel_size=(16, 16), full_state=full_state)
        server = RobotServer(robot, ServerConfig(port=0, token=TOKEN))
        push = RobotClient(f"127.0.0.1:{server.start()}", TOKEN, step_timeout_s=5.0)
        try:
            spec = push.spec()
            assert spec.mirror_state_sign == tuple((state_sign if full_state else PROPRIO_MIRROR_SIGN).tolist())
            assert spec.mirror_action_sign == tuple(action_sign.tolist())
            assert spec.mirror_cameras == ("front", "wrist")
        finally:
            push.close()
            server.stop()
    base = {"name": "r", "state_dim": 2, "action_dim": 1, "control_hz": 10.0, "action_low": (-1.0,),
            "action_high": (1.0,)}
    with pytest.raises(ValueError, match="both be empty or have state_dim"):
        RobotSpec(**base, mirror_state_sign=(1.0, -1.0))
    with pytest.raises(ValueError, match="must be \\+1 or -1"):
        RobotSpec(**base, mirror_state_sign=(1.0, 0.0), mirror_action_sign=(1.0,))
    signs = {"mirror_state_sign": (1.0, -1.0), "mirror_action_sign": (-1.0,)}
    front = (CameraSpec("front", 8, 8),)
    with pytest.raises(ValueError, match="mirror_cameras needs mirror_state_sign"):
        RobotSpec(**base, cameras=front, mirror_cameras=("front",))
    with pytest.raises(ValueError, match="mirror_cameras must be distinct names of the robot's cameras"):
        RobotSpec(**base, cameras=front, mirror_cameras=("wrist",), **signs)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    cfg = ServerConfig(port=0, token=TOKEN, tls_cert=str(cert), tls_key=str(key))
    with RobotServer(SimArm(task="reach", control_hz=HZ), cfg) as server:
        client = RobotClient(f"localhost:{server.port}", TOKEN, tls_root_cert=str(cert), step_timeout_s=5.0)
        assert client.step([0.0, 0.0, 0.0, 0.0]).applied_action is not None
        client.close()
        plain = RobotClient(f"localhost:{server.port}", TOKEN, timeout_s=1.0)
        with pytest.raises(BridgeError):
            plain.spec()
        plain.close()


def test_a_command_past_its_deadline_does_not_make_the_next_one_busy(served):
    """Under load a client's retry after DEADLINE_EXCEEDED was refused with RESOURCE_EXHAUSTED ('already queued'):
    the expired command still sat in the queue because its waiting worker had not yet woken to withdraw it."""
    from robot_rl.real.control_loop import Pending

    server, robot, client, _ = served
    stale = Pending("step", action=np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32))
    stale.expires = time.monotonic() - 0.01  # its caller gave up; its worker has not withdrawn it yet
    with server.loop._lock:
        server.loop._pending = stale
    commands = len(robot.commands)
    client.step([0.0, 0.0, 0.0, 0.0])  # the retry: accepted, applied
    assert len(robot.commands) == commands + 1  # only the retry ran, never the stale command
    assert stale.done.is_set() and stale.error[0] == grpc.StatusCode.DEADLINE_EXCEEDED


class _Refused(grpc.RpcError):
    """What gRPC raises when the server's HTTP/2 layer refuses a stream before processing it."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "Stream removed (RST_STREAM (Received RST_STREAM with error code 7))"


def test_an_estop_refused_by_the_transport_is_sent_again(served):
    """Beside a camera-frame flood an EStop failed once with UNAVAILABLE (REFUSED_STREAM: never processed), and
    the client gave up at once: an operator's e-stop must be tried until its deadline."""
    server, _, client, _ = served
    real_estop, attempts = client._stub.EStop, []

    def refused_once(request, **kwargs):
        attempts.append(kwargs["timeout"])
        if len(attempts) == 1:
            raise _Refused()
        return real_estop(request, **kwargs)

    client._stub.EStop = refused_once
    client.estop("pressed")
    assert len(attempts) == 2 and server.status().state == "estop"
    client.clear_estop()

    def always_refused(request, **kwargs):  # a server that is really gone: the error once the deadline has passed
        raise _Refused()

    client._stub.EStop, client.timeout_s = always_refused, 0.2
    t0 = time.monotonic()
    with pytest.raises(BridgeError, match="unavailable"):
        client.estop("pressed")
    assert 0.15 < time.monotonic() - t0 < 1.0


@pytest.mark.parametrize("practice_reset", ["home", "expert"])
def test_the_served_sim_arm_practises_without_a_reset_of_its_scene(practice_reset):
    """serve-robot practice=true: a client's reset puts no scene back by hand: the cube stays where the last episode
    left it (home) or the scripted reset controller pushes it to a fresh start (expert); the reset motion takes the
    hand home and a new target is drawn, as on a robot."""
    import copy

    from robot_rl.envs.arm.constants import PRACTICE_RESET_TOL

    robot = SimArm(task="push", control_hz=HZ, seed=0, practice=True, practice_reset=practice_reset)
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN))
    client = RobotClient(f"127.0.0.1:{server.start()}", TOKEN, step_timeout_s=5.0)
    try:
        first = client.reset(seed=0).state
        for _ in range(10):
            last = client.step(np.array([0.3, 0.3, 0.0, 1.0], np.float32)).observation.state
        home = robot.reset_position()
        goal = robot.env.arm_task.start_cube(copy.deepcopy(robot.env._rng))[0].numpy()
        after = client.reset().state
        np.testing.assert_allclose(after[:3], home, atol=0.01)  # the reset motion took the hand home
        if practice_reset == "home":
            np.testing.assert_allclose(after[7:10], last[7:10], atol=1e-3)  # the cube was not put back
        else:  # the reset controller pushed it to the start a full reset would have drawn
            assert np.linalg.norm(after[7:9] - goal[:2]) < PRACTICE_RESET_TOL < np.linalg.norm(last[7:9] - goal[:2])
            assert robot.env.reset_motion_steps > 0
        assert not np.allclose(after[20:23], first[20:23])  # a new target
        assert robot.human_resets == 0
    finally:
        client.close()
        server.stop()


def test_a_tick_never_executes_a_command_whose_caller_stopped_waiting(served):
    """The tick itself withdraws an expired command (its caller gave up, its worker has not yet woken): under load
    the next tick executed it, a command nobody awaited, moving the arm late."""
    from robot_rl.real.control_loop import Pending

    server, robot, _, _ = served
    stale = Pending("step", action=np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32))
    stale.expires = time.monotonic() - 0.01
    commands = len(robot.commands)
    with server.loop._lock:
        server.loop._pending = stale
    assert stale.done.wait(2.0)  # answered by the next tick (20 ms at 50 Hz), without a retry to withdraw it
    assert stale.error[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(0.1)
    assert len(robot.commands) == commands  # never executed
