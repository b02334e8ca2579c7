"""The faults of issue 55 (the bridge's second round), one or more tests each, against real servers on loopback.

Each of these failed on the server before the fix (``c773dad``): idle connections from one peer exhausted the
server's descriptors and kept a new EStop out; a blocked stderr froze the control loop and the e-stop; a ClearEStop
sent before an EStop undid it; the measured hand moved faster than the stated limit without a breach; shutdown only
held the robot and a client's Step after a restart was answered OK; weak configurations started silently; floods
answered legitimate calls UNIMPLEMENTED, malformed bodies INTERNAL with a traceback, a bad TLS key "could not bind",
one EStop called ``stop()`` twice and stalled EStop headers drove ~180 ``stop()`` calls a second.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from robot_rl.real.client import BridgeError, EpisodeChanged, EStopLatched, RobotClient
from robot_rl.real.guard import SERVICE, load_token
from robot_rl.real.proto import pb
from robot_rl.real.server import RobotServer, ServerConfig, StartupError

from bench.bridge_abuse import drop_closed
from tests.real.test_bridge_faults import AUTH, HZ, TOKEN, Arm, _serve, _Stall

REPO = Path(__file__).resolve().parents[2]
LONG_TOKEN = "a-long-enough-token-0123456789"


@pytest.fixture
def served() -> Iterator[tuple[RobotServer, Arm, RobotClient, str]]:
    server, robot, client, address = _serve()
    try:
        yield server, robot, client, address
    finally:
        client.close()
        server.stop()


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0)])


def _raise_own_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"needs {need} open files for the attacker's sockets; hard limit {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


class _IdleFlood:
    """The issue's attacker: TCP connections that never send a byte, kept at ``n`` open from ``source``, each
    reopened as soon as the server closes it (the attacker reconnects)."""

    def __init__(self, port: int, n: int, source: str) -> None:
        self.port, self.n, self.source = port, n, source
        self.stop = threading.Event()
        self.opened = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _connect(self) -> socket.socket | None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((self.source, 0))
            s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return None
        self.opened += 1
        return s

    def _run(self) -> None:
        try:
            self._flood()
        except BaseException as e:
            self.error = e

    def _flood(self) -> None:

        held: list[socket.socket] = []
        while not self.stop.is_set():
            while len(held) < self.n and not self.stop.is_set():
                s = self._connect()
                if s is None:
                    break
                held.append(s)
            drop_closed(held)  # the ones the server closed; then top up again
        for s in held:
            s.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10.0)
        assert self.error is None, self.error  # the attack ran to the end


# -- 1. connection exhaustion --------------------------------------------------------------------------------------
def _serve_robot_cli(*keys: str, env: dict[str, str] | None = None, fd_limit: int | None = None,
                     stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE) -> tuple[subprocess.Popen, int]:
    """``robot-rl serve-robot`` in a subprocess (optionally with a soft and hard open-file limit); returns it and
    its port, read from the first line it prints."""
    def limit() -> None:
        if fd_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("ROBOT_RL_TOKEN", None) if env is None or "ROBOT_RL_TOKEN" not in env else None
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl", "serve-robot", "port=0", "status_every=0", *keys],
                            cwd=REPO, env=full_env, stdout=stdout, stderr=stderr, preexec_fn=limit)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "serving" not in line:
        proc.kill()
        raise AssertionError(f"serve-robot did not start: {line!r} {proc.stderr.read().decode() if proc.stderr else ''}")
    return proc, int(line.split(" on ")[1].split()[0].rsplit(":", 1)[1])


def test_idle_connections_from_one_peer_cannot_keep_a_new_estop_out():
    """Before: with the common soft limit of 1024 descriptors, ~1,100 idle connections filled the server's
    descriptors and an EStop from a new connection timed out 10 of 10."""
    _raise_own_fd_limit(4096)
    proc, port = _serve_robot_cli(f"token={LONG_TOKEN}", fd_limit=1024)
    flood = _IdleFlood(port, 1100, source="127.0.0.2")  # an attacker on another address (127/8 is all loopback)
    try:
        deadline = time.monotonic() + 10.0
        while flood.opened < 1100 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        answered = 0
        for i in range(10):  # each EStop from a new connection, as an operator reaching for the stop would
            with RobotClient(f"127.0.0.1:{port}", LONG_TOKEN, timeout_s=3.0) as operator:
                try:
                    operator.estop(f"probe {i}")
                    answered += 1
                    operator.clear_estop()
                except BridgeError:
                    pass
        status = RobotClient(f"127.0.0.1:{port}", LONG_TOKEN).status()
    finally:
        flood.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(15.0)
    assert answered == 10
    assert flood.opened >= 1100
    # the attacker's connections were refused beyond its per-peer share, or closed for sending nothing
    refused = sum(status.rejected.get(f"connection_{k}", 0)
                  for k in ("per_peer", "handshake_timeout", "evicted_in_handshake"))
    assert refused > 0, dict(status.rejected)
    assert status.fd_limit >= 1024 and "per peer" in status.transport


def test_silent_connections_are_closed_and_an_open_one_keeps_its_estop():
    server, robot, operator, address = _serve(handshake_timeout_s=0.5)
    try:
        operator.status()  # the operator's connection is open before the attack
        flood = _IdleFlood(server.port, 200, source="127.0.0.1")  # from the operator's own address
        try:
            time.sleep(1.5)
            t = time.perf_counter()
            operator.estop("operator")
            assert time.perf_counter() - t < 0.5
            operator.clear_estop()
            rejected = server.status().rejected
            # closed at their deadline, or sooner to make room for the flood's next ones
            assert sum(rejected.get(f"connection_{k}", 0)
                       for k in ("handshake_timeout", "per_peer", "evicted_in_handshake")) > 0, dict(rejected)
        finally:
            flood.close()
    finally:
        operator.close()
        server.stop()


def test_an_operators_idle_connection_is_not_recycled():
    """Before: the server closed connections idle for 300 s and recycled every one after 30 min, so an operator's
    idle client had to reconnect, which a flood could refuse."""
    options = dict(ServerConfig().grpc_options())
    assert "grpc.max_connection_idle_ms" not in options and "grpc.max_connection_age_ms" not in options
    assert options["grpc.server_handshake_timeout_ms"] <= 2000
    assert options["grpc.max_allowed_incoming_connections"] >= 1


# -- 2. output nobody reads ----------------------------------------------------------------------------------------
class _BlockedHandler(logging.Handler):
    """A log destination that never returns: a terminal paused with Ctrl-S, a pipe nobody drains."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.entered.set()
        self.release.wait(60.0)


def test_a_blocked_log_output_does_not_stall_the_loop_or_the_estop():
    """Before: the next log line (watchdog, breach, e-stop) blocked the control loop while it held the server's
    lock, and gRPC's polling thread when an e-stop latched: no driver call for as long as the output was blocked,
    EStop and GetStatus timed out."""
    handler = _BlockedHandler()
    logger = logging.getLogger("robot_rl.real")
    logger.addHandler(handler)
    server, robot, client, _ = _serve(watchdog_s=0.05)
    try:
        client.estop("first")  # logs: the handler blocks from here on
        assert handler.entered.wait(2.0)
        client.clear_estop()
        ticks0 = client.status().ticks
        latencies = []
        for i in range(30):
            time.sleep(0.06)  # the watchdog trips (and logs) between probes
            t = time.perf_counter()
            client.estop(f"probe {i}")
            latencies.append(time.perf_counter() - t)
            client.clear_estop()
        status = client.status()
        assert status.ticks - ticks0 >= 0.5 * HZ * 30 * 0.06  # the loop kept its rate (it made driver calls)
        assert status.health == "ok" and status.watchdog_trips > 0
        assert max(latencies) < 0.5, latencies
    finally:
        handler.release.set()
        logger.removeHandler(handler)
        client.close()
        server.stop()


def test_serve_robot_with_an_undrained_stderr_keeps_answering_estops():
    """The same from the command line: stderr and stdout on pipes nobody reads (after the banner), and enough
    e-stops with long reasons to fill a 64 KiB pipe several times over."""
    proc, port = _serve_robot_cli("allow_unauthenticated=true", "status_every=0.05", "watchdog_s=0.05")
    try:
        client = RobotClient(f"127.0.0.1:{port}", timeout_s=2.0)
        reason = "r" * 200
        latencies = []
        for _ in range(400):  # ~3 log lines each, ~500 bytes: 200 kB against a 64 KiB pipe
            t = time.perf_counter()
            client.estop(reason)
            latencies.append(time.perf_counter() - t)
            client.clear_estop()
        ticks = client.status().ticks
        time.sleep(0.5)
        status = client.status()
        client.close()
    finally:
        proc.kill()
        proc.wait(10.0)
    assert max(latencies) < 1.0, max(latencies)
    assert status.ticks > ticks and status.health == "ok"


# -- 3. ClearEStop ordering ----------------------------------------------------------------------------------------
def _delayed_clear(address: str, metadata=AUTH) -> tuple[threading.Event, grpc.Future, grpc.Channel]:
    """A ClearEStop whose headers leave now and whose body is held until the returned event is set."""
    ch = _channel(address)
    release = threading.Event()

    def body() -> Iterator[bytes]:
        release.wait(10.0)
        yield pb.Empty().SerializeToString()

    future = ch.stream_unary(SERVICE + "ClearEStop").future(body(), metadata=metadata, timeout=10.0)
    return release, future, ch


def test_a_clear_sent_before_an_estop_cannot_undo_it(served):
    """Before: ClearEStop acted when its body arrived and cleared whatever latch existed then: a clear delayed in
    the network undid an operator's later e-stop 5 of 5 times."""
    server, robot, client, address = served
    for i in range(5):
        release, future, ch = _delayed_clear(address)
        time.sleep(0.1)  # its headers are in: admitted before the e-stop
        client.estop(f"operator {i}")
        release.set()
        with pytest.raises(grpc.RpcError) as e:
            future.result(timeout=5.0)
        ch.close()
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "e-stop was requested after this ClearEStop" in e.value.details()
        assert client.status().state == "estop"
        with pytest.raises(EStopLatched):
            client.step([0.1, 0, 0, 0])
        client.clear_estop()  # a clear sent after the e-stop clears it
        assert client.status().state == "running"


# -- 5. shutdown and restart ---------------------------------------------------------------------------------------
def test_stop_stops_the_robot_before_disconnecting():
    """Before: stop() (SIGTERM, Ctrl-C) called hold() then disconnect(); the simulated arm kept moving (30 mm)."""
    calls: list[str] = []

    class Recording(Arm):
        def stop(self) -> None:
            calls.append("stop")
            super().stop()

        def disconnect(self) -> None:
            calls.append("disconnect")
            super().disconnect()

    robot = Recording(task="reach", control_hz=HZ, seed=0)
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN))
    port = server.start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)
    client.reset(seed=0)
    for _ in range(5):
        client.step([1.0, 1.0, 0.0, -1.0])  # full speed: the servo target leads the hand
    client.close()
    server.stop()
    assert "stop" in calls and calls.index("stop") < calls.index("disconnect")
    hand = robot.observe().state[:3].copy()
    for _ in range(10):  # time goes on after the server left: the hand stays (stop() froze the servo targets)
        robot.hold()
    assert np.linalg.norm(robot.observe().state[:3] - hand) < 0.005


def test_serve_robot_stops_the_robot_on_sigterm():
    proc, port = _serve_robot_cli("allow_unauthenticated=true")
    client = RobotClient(f"127.0.0.1:{port}")
    client.reset(seed=0)
    client.step([1.0, 0.0, 0.0, -1.0])
    client.close()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15.0)
    assert proc.returncode == 0, err.decode()
    assert "robot stopped" in out.decode()


def test_a_step_after_a_server_restart_fails_until_the_client_resets():
    """Before: after a restart on the same port an old client's Step was answered OK without a Reset."""
    server, robot, client, address = _serve()
    port = server.port
    client.reset(seed=0)
    client.step([0.1, 0.0, 0.0, -1.0])
    server.stop()
    server2 = RobotServer(Arm(task="reach", control_hz=HZ, seed=0), ServerConfig(port=port, token=TOKEN))
    server2.start()
    try:
        for _ in range(2):  # refused every time, with the same clear error, until it resets
            with pytest.raises(EpisodeChanged) as e:
                client.step([0.1, 0.0, 0.0, -1.0])
            assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "reset" in str(e.value)
        assert server2.status().commands == 0
        client.reset(seed=1)
        client.step([0.1, 0.0, 0.0, -1.0])
    finally:
        client.close()
        server2.stop()


def test_a_step_after_another_client_reset_the_robot_fails_until_it_resets(served):
    server, robot, client, address = served
    client.reset(seed=0)
    client.step([0.1, 0.0, 0.0, -1.0])
    with RobotClient(address, TOKEN, step_timeout_s=5.0) as other:
        other.reset(seed=3)
    with pytest.raises(EpisodeChanged):
        client.step([0.1, 0.0, 0.0, -1.0])
    client.step(None)  # a hold moves nothing: allowed
    client.reset()
    client.step([0.1, 0.0, 0.0, -1.0])
    assert client.status().episode == 3  # three resets since start


# -- 6. weak configurations ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("host, token, tls, message", [
    ("0.0.0.0", LONG_TOKEN, False, "in clear"),
    ("0.0.0.0", "x", True, "at least 16"),
    ("127.0.0.1", "   ", False, "empty or whitespace"),
    ("0.0.0.0", " " + LONG_TOKEN, True, "printable"),
])
def test_weak_configurations_are_refused(host, token, tls, message):
    tls_keys = {"tls_cert": "c.pem", "tls_key": "k.pem"} if tls else {}
    with pytest.raises(ValueError, match=message):
        ServerConfig(host=host, token=token, **tls_keys).validate()


def test_a_plaintext_token_off_loopback_needs_its_opt_in_and_is_warned_about():
    config = ServerConfig(host="0.0.0.0", token=LONG_TOKEN, allow_plaintext_token=True)
    config.validate()
    assert any("in clear" in w for w in config.warnings())


def test_readable_keys_and_writable_token_folders_are_warned_about(tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o644)
    config = ServerConfig(host="127.0.0.1", token=LONG_TOKEN, tls_cert=str(key), tls_key=str(key))
    assert any("readable by other users" in w for w in config.warnings())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    token_file = shared / "token"
    token_file.write_text(LONG_TOKEN)
    token_file.chmod(0o600)
    _, warnings = load_token(token_file=str(token_file), env={})
    assert any("every user can write" in w for w in warnings)


def test_serve_robot_refuses_a_plaintext_token_on_all_interfaces():
    r = subprocess.run([sys.executable, "-m", "robot_rl", "serve-robot", "host=0.0.0.0", "port=0"], cwd=REPO,
                       env={**os.environ, "ROBOT_RL_TOKEN": LONG_TOKEN}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "allow_plaintext_token=true" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- 7. misleading answers -----------------------------------------------------------------------------------------
def test_floods_never_answer_a_legitimate_call_unimplemented(served):
    """Before: beyond 4 refusals in flight, gRPC answered UNIMPLEMENTED "Method not found!" for real methods."""
    server, robot, client, address = served
    stop = threading.Event()

    def flood(metadata) -> None:
        ch = _channel(address)
        call = ch.unary_unary(SERVICE + "Heartbeat")
        while not stop.is_set():
            try:
                call(b"", timeout=2.0, metadata=metadata)
            except grpc.RpcError:
                pass
        ch.close()

    threads = [threading.Thread(target=flood, args=(AUTH if i % 2 else (),), daemon=True) for i in range(16)]
    for t in threads:
        t.start()
    codes: dict[str, int] = {}
    try:
        time.sleep(0.3)
        for _ in range(200):
            try:
                client.heartbeat()
                codes["OK"] = codes.get("OK", 0) + 1
            except BridgeError as e:
                codes[e.code.name] = codes.get(e.code.name, 0) + 1
    finally:
        stop.set()
        for t in threads:
            t.join(5.0)
    assert "UNIMPLEMENTED" not in codes, codes
    assert server.status().rejected.get("unauthenticated", 0) > 0


def test_a_malformed_body_is_invalid_argument_without_a_traceback(served, caplog):
    server, robot, client, address = served
    ch = _channel(address)
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary(SERVICE + "Step")(b"\xff\xff\xff\xff", timeout=2.0, metadata=AUTH)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in e.value.details()
    ch.close()
    assert "Traceback" not in caplog.text and "Exception deserializing" not in caplog.text
    assert server.status().rejected["bad_body"] == 3


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make certificates")
def test_a_bad_tls_key_or_certificate_names_the_file_and_the_problem(tmp_path):
    def make(name: str) -> tuple[Path, Path]:
        cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        return cert, key

    cert_a, key_a = make("a")
    _, key_b = make("b")
    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key\n")
    for cert, key, message in ((cert_a, key_b, "does not belong"), (cert_a, garbage, "not PEM"),
                               (tmp_path / "missing.crt", key_a, "cannot read")):
        server = RobotServer(Arm(task="reach", control_hz=HZ), ServerConfig(port=0, token=TOKEN, tls_cert=str(cert),
                                                                           tls_key=str(key)))
        with pytest.raises(StartupError) as e:
            server.start()
        assert message in str(e.value) and "bind" not in str(e.value)
        assert (str(key) in str(e.value)) or (str(cert) in str(e.value))


def test_one_estop_calls_stop_once(served):
    server, robot, client, address = served
    for i in range(5):
        n = len(robot.stop_times)
        client.estop(f"probe {i}")
        assert len(robot.stop_times) == n + 1
        client.clear_estop()


def test_stalled_estop_headers_cannot_drive_stop_calls_without_bound(served):
    """Before: each stalled EStop's headers latched and requested a stop: ~180 stop() calls a second."""
    server, robot, client, address = served
    client.estop("first")
    n0, t0 = len(robot.stop_times), time.monotonic()
    stalls = []
    while time.monotonic() - t0 < 2.0:
        stalls.append(_Stall(address, 4, metadata=AUTH, method="EStop"))
        time.sleep(0.005)
        if len(stalls) > 8:
            stalls.pop(0).close()
    elapsed = time.monotonic() - t0
    for s in stalls:
        s.close()
    stops = len(robot.stop_times) - n0
    assert server.status().estops == 1  # one latch, many requests
    assert stops <= elapsed / getattr(server.config, "restop_interval_s", 0.2) + 2, stops


# -- 4. motion within the stated limit, on the measured state --------------------------------------------------------
def _random_reversals(client: RobotClient, n: int, seed: int) -> None:
    from robot_rl.real.client import RobotHolding

    rng = np.random.default_rng(seed)
    client.reset(seed=seed)
    for _ in range(n):
        try:
            client.step([*rng.choice([-1.0, 1.0], 3), -1.0])  # a random corner of the action cube each tick
        except RobotHolding:
            time.sleep(0.05)


@pytest.mark.parametrize("max_speed_mps", [1.0, 0.2])
def test_measured_speed_stays_within_the_stated_limit(max_speed_mps):
    """Before: with the default step limit (43.3 mm per tick) the measured hand moved up to 58.1 mm on random
    reversals, 41 of 80 ticks over, and with max_speed_mps=0.2 15.1 mm against 10, none of it counted."""
    server, robot, client, _ = _serve(hz=20.0, max_speed_mps=max_speed_mps)
    try:
        robot.trace.clear()
        _random_reversals(client, 80, seed=0)
        limit = server.supervisor.step_limit_m
        steps = np.linalg.norm(np.diff(np.asarray(robot.trace), axis=0), axis=1) / limit
        status = client.status()
    finally:
        client.close()
        server.stop()
    assert steps.max() <= 1.03, steps.max()  # the governor's measured worst case was 1.018 (test_governor.py)
    assert status.breaches.get("speed_over", 0) <= 1 and status.breaches.get("speed_soft", 0) == 0
    assert status.clamped.get("governor", 0) > 0


def test_a_tick_over_the_stated_limit_is_counted_as_a_breach():
    """Without the governor (a robot that overshoots whatever it is told) every tick over the limit is counted."""
    server, robot, client, _ = _serve(hz=20.0, max_speed_mps=1.0, speed_governor=False)
    try:
        robot.trace.clear()
        _random_reversals(client, 60, seed=0)
        limit = server.supervisor.step_limit_m
        over = int((np.linalg.norm(np.diff(np.asarray(robot.trace), axis=0), axis=1) > limit * (1 + 1e-6)).sum())
        breaches = client.status().breaches
    finally:
        client.close()
        server.stop()
    assert over > 0
    assert breaches.get("speed_over", 0) + breaches.get("speed_soft", 0) + breaches.get("speed_hard", 0) >= over - 1
