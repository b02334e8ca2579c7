"""The faults of issue 15, one test each, against a real server on loopback (the simulated arm).

Each test failed on the server before the fix: stalled bodies and floods starved the e-stop, EStop never called
``stop()``, queued commands answered OK after an e-stop, nothing watched the measured motion, resets teleported the
hand, a negative seed latched the e-stop, reasons were logged verbatim and overwritten, a dead control loop went
unnoticed, a second server shared a busy port and ``::1`` was not bracketed, overload refusals went uncounted.
Timing bounds are loose where the shared 2-core VM can stall a thread; the 50 ms EStop bound is checked on the
median of several calls and on every call with a looser bound.
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from robot_rl.real.client import BridgeError, ControlLoopDead, EStopLatched, RobotClient, RobotHolding
from robot_rl.real.drivers.sim_arm import SimArm
from robot_rl.real.guard import SERVICE, format_address, is_loopback, load_token, safe_text
from robot_rl.real.proto import pb
from robot_rl.real.server import RobotServer, ServerConfig, StartupError
from robot_rl.real.supervisor import SupervisorConfig

TOKEN = "fault-token"
HZ = 50.0
AUTH = (("authorization", f"Bearer {TOKEN}"),)
REPO = Path(__file__).resolve().parents[2]


class Arm(SimArm):
    """The simulated arm, recording commands and stops, with a hook that offsets the measured hand."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.commands: list[np.ndarray] = []
        self.stop_times: list[float] = []
        self.offset = np.zeros(3)  # added to the measured hand: something pushed the arm / the servo overshot
        self.offset_step = np.zeros(3)  # added to ``offset`` every tick
        self.trace: list[np.ndarray] = []  # measured hand after every tick

    def command(self, action: np.ndarray) -> None:
        self.commands.append(np.array(action))
        super().command(action)

    def stop(self) -> None:
        self.stop_times.append(time.monotonic())
        super().stop()

    def _advance(self, action: np.ndarray) -> None:
        super()._advance(action)
        self.offset = self.offset + self.offset_step
        self.trace.append(self._obs.state[:3].astype(np.float64) + self.offset)

    def observe(self):
        obs = super().observe()
        if not np.any(self.offset):
            return obs
        state = obs.state.copy()
        state[:3] += self.offset.astype(state.dtype)
        return type(obs)(state, obs.reward, obs.success, obs.stamp)


def _serve(hz: float = HZ, max_speed_mps: float = 1.0, **config) -> tuple[RobotServer, Arm, RobotClient, str]:
    robot = Arm(task="reach", control_hz=hz, max_speed_mps=max_speed_mps, seed=0)
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN, **config))
    port = server.start()
    address = f"127.0.0.1:{port}"
    return server, robot, RobotClient(address, TOKEN, step_timeout_s=5.0), address


@pytest.fixture
def served():
    server, robot, client, address = _serve(watchdog_s=2.0)
    try:
        yield server, robot, client, address
    finally:
        client.close()
        server.stop()


def _channel(address: str) -> grpc.Channel:
    # A connection of its own (gRPC would otherwise share one TCP connection between channels).
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


class _Stall:
    """Calls that send their headers and never a body, with no deadline: what held every worker before."""

    def __init__(self, address: str, n: int, metadata=(), method: str = "Step", per_channel: int = 4) -> None:
        self._release = threading.Event()
        self.channels = [_channel(address) for _ in range((n + per_channel - 1) // per_channel)]
        self.futures = []
        for i in range(n):
            call = self.channels[i // per_channel].stream_unary(SERVICE + method)
            self.futures.append(call.future(self._body(), metadata=metadata))

    def _body(self) -> Iterator[bytes]:
        self._release.wait(30.0)
        return
        yield b""  # a generator that yields nothing until released

    def close(self) -> None:
        self._release.set()
        for f in self.futures:
            f.cancel()
        for ch in self.channels:
            ch.close()


def _estop_latencies(client: RobotClient, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        client.estop(f"probe {i}")
        out.append(time.perf_counter() - t)
        client.clear_estop()
    return out


def _assert_fast(latencies: list[float]) -> None:
    assert statistics.median(latencies) < 0.05, latencies
    assert max(latencies) < 0.5, latencies  # a hypervisor stall, not starvation (which was: refused or never)


# -- 1. the e-stop cannot be starved ---------------------------------------------------------------------------
def test_stalled_bodies_cannot_starve_the_estop(served):
    server, robot, client, address = served
    client.step([0.0, 0.0, 0.0, -1.0])
    unauthenticated = _Stall(address, 12)  # before: 8 of these held every worker, EStop refused 10 of 10
    authenticated = _Stall(address, 12, metadata=AUTH)  # valid token, no body: fills the bulk slots
    try:
        deadline = time.monotonic() + 3.0
        while server._gate.in_flight()["bulk"] < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server._gate.in_flight()["bulk"] == 8  # every bulk slot held by a stalled call
        _assert_fast(_estop_latencies(client, 5))
        assert server.status().estops == 5
        # The stalled calls are cancelled after body_timeout_s (1 s): the bulk slots come back.
        time.sleep(1.5)
        client.step([0.0, 0.0, 0.0, -1.0])
        refused = server.status().rejected
        assert refused["stalled_body"] >= 8 and refused["unauthenticated"] >= 12
    finally:
        unauthenticated.close()
        authenticated.close()


def test_floods_cannot_starve_the_estop(served):
    server, robot, client, address = served
    stop = threading.Event()
    seen: list[grpc.StatusCode] = []

    def flood(authenticated: bool) -> None:
        ch = _channel(address)
        call = ch.unary_unary(SERVICE + "GetStatus")
        while not stop.is_set():
            try:
                call(b"", timeout=1.0, metadata=AUTH if authenticated else ())
            except grpc.RpcError as e:
                seen.append(e.code())
        ch.close()

    threads = [threading.Thread(target=flood, args=(i % 2 == 0,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        latencies = _estop_latencies(client, 10)  # before: 3 of 40 EStops refused under a flood
    finally:
        stop.set()
        for t in threads:
            t.join(5.0)
    _assert_fast(latencies)
    status = server.status()
    assert status.estops == 10
    # Every refusal the flooders saw was counted by the server (UNIMPLEMENTED: refused beyond the refusal slots).
    code = grpc.StatusCode
    assert status.rejected["unauthenticated"] >= seen.count(code.UNAUTHENTICATED) + seen.count(code.UNIMPLEMENTED)
    assert status.rejected["overload_bulk"] >= seen.count(code.RESOURCE_EXHAUSTED)


# -- 2. EStop stops the driver, and answers after it did ----------------------------------------------------------
def test_estop_stops_the_driver_before_it_answers(served):
    server, robot, client, _ = served
    client.reset(seed=1)
    for _ in range(12):
        client.step([1.0, 0.0, 0.0, -1.0])  # full speed: the servo target leads the hand
    sent = time.monotonic()
    status = client.estop("stop now")
    answered = time.monotonic()
    assert robot.stop_times and sent <= robot.stop_times[-1] <= answered
    assert status.state == "estop" and status.stops >= 1 and status.estop_ack_s < 0.5
    ee0 = robot.observe().state[:3].copy()
    time.sleep(0.5)
    travel = np.linalg.norm(robot.observe().state[:3] - ee0)
    assert travel < 0.005, travel  # before: the hand travelled on to its target (14 mm here, up to 22 mm)


# -- 3. queued commands after an e-stop get errors ----------------------------------------------------------------
def test_queued_step_and_reset_fail_after_an_estop():
    # 100 ms ticks: room to queue a call before its tick; 0.2 m/s: a reset takes many ticks.
    server, robot, client, address = _serve(hz=10.0, max_speed_mps=0.2)
    other = RobotClient(address, TOKEN, step_timeout_s=5.0, reset_timeout_s=10.0)
    try:
        results: dict[str, object] = {}

        def call(name, fn, *args):
            try:
                results[name] = fn(*args)
            except BridgeError as e:
                results[name] = e

        client.step([0.0, 0.0, 0.0, -1.0])  # returns just after a tick: the next one is ~100 ms away
        t = threading.Thread(target=call, args=("step", other.step, [1.0, 0.0, 0.0, -1.0]))
        t.start()
        time.sleep(0.02)
        client.estop("queued step")
        t.join(5.0)
        assert isinstance(results["step"], EStopLatched)  # before: OK, although not executed
        assert all(np.linalg.norm(a[:3]) == 0.0 for a in robot.commands)
        client.clear_estop()

        target = client.step(None).observation.state[20:23].copy()
        assert np.linalg.norm(robot.reset_position(7) - robot.observe().state[:3]) > 0.05
        t = threading.Thread(target=call, args=("reset", other.reset, 7))  # a reset is a motion of many ticks
        t.start()
        time.sleep(0.25)
        client.estop("queued reset")
        t.join(10.0)
        assert isinstance(results["reset"], EStopLatched)  # before: OK, and the scene was not reset
        assert np.allclose(robot.observe().state[20:23], target)  # not reset indeed
        assert server.status().rejected["estop"] == 2
    finally:
        other.close()
        client.close()
        server.stop()


# -- 4. the supervisor watches the measured state ----------------------------------------------------------------
def test_a_measured_speed_breach_holds_the_robot():
    # 20 Hz with a 0.2 m/s limit: full-speed reversals make the simulated hand overshoot the limit by up to 1.8x
    # (before: 15.6 mm per tick against 10, unnoticed). A soft tolerance of 1.2x makes every run of this test breach.
    # The speed governor, which keeps such reversals within the limit (test_governor.py), is off: this is the
    # supervisor's reaction to a robot that overshoots anyway.
    server, robot, client, _ = _serve(hz=20.0, max_speed_mps=0.2, supervisor=SupervisorConfig(speed_tolerance=1.2),
                                      speed_governor=False)
    try:
        client.reset(seed=0)
        rng = np.random.default_rng(0)
        held = executed = 0
        deadline = time.monotonic() + 15.0
        while executed < 60 and time.monotonic() < deadline:
            try:
                client.step(np.r_[rng.choice([-1.0, 1.0], 3), -1.0])
                executed += 1
            except RobotHolding as e:
                assert e.code == grpc.StatusCode.UNAVAILABLE and "supervisor hold" in str(e)
                held += 1
                time.sleep(0.05)
        status = server.status()
        assert status.breaches["speed_soft"] >= 1 and held >= 1
        assert status.estops == 0  # soft: held, not latched
    finally:
        client.close()
        server.stop()


def test_a_normal_controller_does_not_breach():
    server, robot, client, _ = _serve(hz=20.0)
    try:
        for seed in (0, 1):
            obs = client.reset(seed=seed)
            for _ in range(40):
                obs = client.step(np.r_[np.clip(obs.state[26:29] / 0.01, -1, 1), -1.0]).observation
        status = server.status()
        assert dict(status.breaches) == {}
        assert status.loop_priority  # what the OS granted the control thread (SCHED_FIFO when root), reported
    finally:
        client.close()
        server.stop()


def test_measured_envelope_breach_holds_then_latches(served):
    server, robot, client, _ = served
    client.reset(seed=0)
    floor = robot.spec.cartesian.workspace_low[2]
    robot.offset_step = np.array([0.0, 0.0, -0.004])  # the measured hand sinks 4 mm per tick (0.2 m/s)
    deadline = time.monotonic() + 10.0
    holding = False
    while time.monotonic() < deadline:
        try:
            client.step([0.0, 0.0, 0.0, -1.0])
        except RobotHolding:
            holding = True
        except EStopLatched:
            break
    status = server.status()
    assert holding and status.breaches["envelope_soft"] >= 1  # 10 mm outside: hold
    assert status.state == "estop" and status.breaches["envelope_hard"] >= 1  # 30 mm outside: stop and latch
    assert "outside the workspace box" in status.estop_reason and robot.stop_times
    assert robot.observe().state[2] < floor - 0.03


def test_after_clearing_the_hand_may_come_back_in_but_not_go_further_out(served):
    server, robot, client, _ = served
    client.reset(seed=0)
    robot.offset = np.array([0.0, 0.0, -(robot.observe().state[2] - robot.spec.cartesian.workspace_low[2]) - 0.05])
    with pytest.raises(BridgeError):
        for _ in range(3):
            client.step([0.0, 0.0, 0.0, -1.0])  # 50 mm under the floor: hard breach, latched
    assert server.status().state == "estop"
    client.clear_estop()
    for _ in range(3):
        robot.offset = robot.offset + np.array([0.0, 0.0, 0.002])  # coming back in: allowed
        client.step([0.0, 0.0, 0.5, -1.0])
    assert server.status().state == "running"
    robot.offset = robot.offset - np.array([0.0, 0.0, 0.02])  # further out again: latched
    with pytest.raises(EStopLatched):
        for _ in range(3):
            client.step([0.0, 0.0, 0.0, -1.0])


def test_reset_moves_the_hand_within_the_speed_limit(served):
    server, robot, client, _ = served
    client.reset(seed=0)
    for _ in range(60):
        client.step([-0.5, 0.5, 0.3, -1.0])  # far from where seed 5 starts (not at full reach: see below)
    start = robot.reset_position(5)
    far = np.linalg.norm(robot.observe().state[:3] - start)
    assert far > 0.15
    robot.trace.clear()
    breaches = dict(server.status().breaches)
    obs = client.reset(seed=5)
    limit = server.supervisor.step_limit_m
    trace = np.array(robot.trace)
    steps = np.linalg.norm(np.diff(trace, axis=0), axis=1)
    assert steps.max() <= limit  # before: the hand jumped ~0.2-0.46 m in one tick
    assert np.linalg.norm(obs.state[:3] - trace[-1]) <= server.config.reset_tolerance_m + 1e-3  # the final reset
    assert np.linalg.norm(obs.state[:3] - start) < 1e-6  # the episode starts where the driver's reset puts it
    assert server.status().resets >= 2 and dict(server.status().breaches) == breaches


# -- 5. every field validated; bad seeds are the caller's error, not a fault ------------------------------------
def test_bad_requests_are_invalid_arguments_not_estops(served):
    server, robot, client, address = served
    ch = _channel(address)
    reset = ch.unary_unary(SERVICE + "Reset", request_serializer=pb.ResetRequest.SerializeToString,
                           response_deserializer=pb.StepReply.FromString)
    step = ch.unary_unary(SERVICE + "Step", request_serializer=pb.StepRequest.SerializeToString,
                          response_deserializer=pb.StepReply.FromString)
    bad = [(reset, pb.ResetRequest(has_seed=True, seed=-3)),  # before: latched the e-stop as a driver fault
           (reset, pb.ResetRequest(has_seed=False, seed=5)),
           (step, pb.StepRequest(hold=True, action=[0.0, 0.0, 0.0, 0.0]))]
    for call, request in bad:
        with pytest.raises(grpc.RpcError) as e:
            call(request, timeout=5.0, metadata=AUTH)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
    status = server.status()
    assert status.state != "estop" and status.estops == 0
    assert status.rejected["invalid_request"] == 3
    client.reset(seed=2)


# -- 6. reasons: cut, escaped, the first kept -----------------------------------------------------------------------
def test_estop_reasons_are_cut_escaped_and_the_first_is_kept(served, caplog):
    server, robot, client, _ = served
    forged = "pressed\n12:00:00 INFO e-stop cleared\r\x1b[2J" + "x" * 65_000
    with caplog.at_level(logging.WARNING, logger="robot_rl.real.server"):
        status = client.estop(forged)
        client.estop("second reason")
    assert "\n" not in status.estop_reason and "\x1b" not in status.estop_reason
    assert status.estop_reason.startswith("pressed\\n12:00:00") and len(status.estop_reason) < 300
    assert server.status().estop_reason == status.estop_reason  # the second EStop did not overwrite it
    for record in caplog.records:
        assert "\n" not in record.getMessage() and len(record.getMessage()) < 400
    client.clear_estop()
    robot_fail = []
    original = robot.command

    def failing(action):
        if not robot_fail:
            robot_fail.append(1)
            raise RuntimeError("encoder lost\nforged line")
        original(action)

    robot.command = failing
    with pytest.raises(BridgeError):
        client.step([0.1, 0.0, 0.0, -1.0])
    client.estop("operator, later")
    reason = server.status().estop_reason
    assert reason.startswith("driver error") and "encoder lost\\nforged line" in reason  # the fault, not "later"


# -- 7. a dead control loop is noticed ---------------------------------------------------------------------------
def test_a_dead_control_loop_stops_the_driver_and_every_call_is_unavailable(served):
    server, robot, client, address = served
    client.step([0.5, 0.0, 0.0, -1.0])
    original = server.loop._tick

    def broken(now: float, lateness: float) -> None:
        raise RuntimeError("a bug in the tick")

    server.loop._tick = broken
    deadline = time.monotonic() + 5.0
    while not server.loop_error and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "a bug in the tick" in server.loop_error and robot.stop_times  # the driver was stopped
    for call in (client.status, client.heartbeat, client.clear_estop, lambda: client.step([0, 0, 0, 0]),
                 lambda: client.estop("late"), lambda: RobotClient(address, TOKEN).spec()):
        with pytest.raises(ControlLoopDead) as e:
            call()
        assert e.value.code == grpc.StatusCode.UNAVAILABLE and "a bug in the tick" in str(e.value)
    assert server.status().health == "dead"
    server.loop._tick = original


# -- 8. start-up failures: one line, nothing left running ---------------------------------------------------------
def _control_threads() -> int:
    return sum(t.name.startswith("control-loop") for t in threading.enumerate())


def test_a_busy_port_fails_cleanly_and_the_first_server_keeps_its_clients(served):
    server, robot, client, address = served
    port = server.port
    threads = _control_threads()
    second = Arm(task="reach", control_hz=HZ)
    connected = []
    second.connect = lambda: connected.append(1)  # type: ignore[method-assign]
    with pytest.raises(StartupError) as e:
        RobotServer(second, ServerConfig(port=port, token=TOKEN)).start()
    assert "in use" in str(e.value) and "\n" not in str(e.value)
    assert connected == [] and _control_threads() == threads  # nothing connected, no second loop
    for _ in range(12):  # before: 11 of 12 new clients reached the second robot
        fresh = RobotClient(address, TOKEN)
        assert fresh.spec().name == robot.spec.name
        fresh.close()
    assert server.status().state != "dead"


def test_serve_robot_on_a_busy_port_exits_with_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        env = {**os.environ, "ROBOT_RL_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "robot_rl.cli", "serve-robot", f"port={port}", "run_for=1"]
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "in use" in lines[0], r.stderr


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_ipv6_loopback_is_bracketed():
    assert is_loopback("::1") and is_loopback("[::1]") and not is_loopback("0.0.0.0")
    assert format_address("::1", 5) == "[::1]:5" and format_address("127.0.0.1", 5) == "127.0.0.1:5"
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback address here")
    config = ServerConfig(host="::1", port=0, token=None, allow_unauthenticated=True)
    with RobotServer(SimArm(task="reach", control_hz=HZ), config) as server:  # before: bind traceback
        client = RobotClient(f"[::1]:{server.port}", "", step_timeout_s=5.0)
        assert client.step([0.0, 0.0, 0.0, -1.0]).applied_action is not None
        client.close()


# -- 9. status is cheap; every refusal is counted ------------------------------------------------------------------
def test_overload_refusals_are_counted_and_status_is_cheap(served):
    server, robot, client, address = served
    stalled = _Stall(address, 8, metadata=AUTH)
    try:
        deadline = time.monotonic() + 3.0
        while server._gate.in_flight()["bulk"] < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        refused = 0
        for _ in range(20):
            with pytest.raises(BridgeError) as e:
                client.heartbeat()
            refused += e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused == 20
        assert server.status().rejected["overload_bulk"] == 20  # before: refused by gRPC, counted nowhere
    finally:
        stalled.close()
    for ring in (server.loop.jitter, server.loop.work, server.loop.queue):  # a full timing window
        for x in np.random.default_rng(0).random(30_000) * 1e-3:
            ring.append(float(x))
    t = time.perf_counter()
    for _ in range(200):
        server.status()
    assert (time.perf_counter() - t) / 200 < 0.005  # percentiles are cached, not recomputed per call


# -- 10. the token's sources ----------------------------------------------------------------------------------------
def test_token_sources(tmp_path):
    f = tmp_path / "token"
    f.write_text("secret-from-file\n")
    f.chmod(0o600)
    assert load_token(token_file=str(f), env={}) == ("secret-from-file", [])
    f.chmod(0o644)
    token, warnings = load_token(token_file=str(f), env={})
    assert token == "secret-from-file" and "chmod 600" in warnings[0]
    token, warnings = load_token(token="on-the-command-line", env={})
    assert token == "on-the-command-line" and "process list" in warnings[0]
    assert load_token(env={"ROBOT_RL_TOKEN": "from-env"}) == ("from-env", [])
    with pytest.raises(ValueError, match="empty"):
        (tmp_path / "empty").write_text("")
        load_token(token_file=str(tmp_path / "empty"), env={})
    with pytest.raises(ValueError, match="not both"):
        load_token(token="a", token_file=str(f), env={})
    assert safe_text("a\nb\x00", 10) == "a\\nb\\x00"


def test_supervisor_config_is_validated():
    with pytest.raises(ValueError):
        ServerConfig(token=TOKEN, supervisor=SupervisorConfig(margin_m=0.05, hard_margin_m=0.01)).validate()
    with pytest.raises(ValueError):
        ServerConfig(token=TOKEN, estop_calls=0).validate()
