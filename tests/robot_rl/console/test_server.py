"""The console server's security and its one-line refusals, without a browser: a Host header that is not loopback
(DNS rebinding) and a WebSocket from another site's page are refused, actions other than the e-stop need the token,
the e-stop does not (and latches the server through the bridge's EStop), a clear needs confirmation, and settings
that would expose the robot (off loopback without TLS or a token) are one line before anything is served."""

from __future__ import annotations

import contextlib
import http.client
import json

import pytest
from robot_rl.real.client import RobotClient
from robot_rl.real.drivers.sim_arm import SimArm
from robot_rl.real.server import RobotServer, ServerConfig
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from robot_rl.cli import main
from robot_rl.console import ConsoleError, attach, check_bind
from tests.robot_rl.console.support import TOKEN, console_args


@pytest.fixture
def console():
    """A console (no session) for the plain simulated reach arm served on loopback; yields (attached, server)."""
    server = RobotServer(SimArm(task="reach", control_hz=50.0, seed=0), ServerConfig(port=0, token=TOKEN))
    port = server.start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN)
    on = attach(console_args(f"127.0.0.1:{port}"), client, client.spec(), log=lambda m: None)
    try:
        yield on, server
    finally:
        on.close()
        client.close()
        server.stop()


def _get(on, path: str, host: str | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", on.server.port, timeout=5)
    headers = {"Host": host} if host else {}
    conn.request("GET", path, headers=headers)
    return conn.getresponse()


@contextlib.contextmanager
def _ws(on, origin: str | None = "same"):
    url = on.server.url.replace("http://", "ws://") + "ws"
    if origin == "same":
        origin = on.server.url.rstrip("/")
    with connect(url, origin=origin, open_timeout=5) as ws:
        hello = json.loads(ws.recv(timeout=5))
        assert hello["type"] == "hello" and hello["token_required"]
        yield ws


def _answer(ws, kind: str) -> dict:
    """The next message of type `kind` (ticks and status go by in between)."""
    while True:
        message = json.loads(ws.recv(timeout=10))
        if message["type"] in (kind, "error"):
            return message


def test_pages_are_served_with_a_policy_that_forbids_framing_and_other_paths_are_404(console):
    on, _ = console
    for path in ("/", "/console.js"):
        response = _get(on, path)
        assert response.status == 200
        assert "frame-ancestors 'none'" in response.getheader("Content-Security-Policy")
        assert response.getheader("X-Content-Type-Options") == "nosniff"
    assert _get(on, "/").getheader("Content-Type").startswith("text/html")
    assert _get(on, "/video/0/front.mp4").status == 404
    assert _get(on, "/../../etc/passwd").status == 404


def test_a_host_that_is_not_loopback_is_refused(console):
    on, _ = console
    response = _get(on, "/", host=f"attacker.example:{on.server.port}")  # a rebound DNS name
    assert response.status == 403 and b"not this console" in response.read()
    assert _get(on, "/", host=f"localhost:{on.server.port}").status == 200


def test_a_websocket_from_another_sites_page_is_refused(console):
    on, _ = console
    with pytest.raises(InvalidStatus) as refused:
        with _ws(on, origin="http://attacker.example"):
            pass
    assert refused.value.response.status_code == 403
    with _ws(on):  # the console's own page is welcome
        pass


def test_the_estop_needs_no_token_but_labels_and_clearing_do(console):
    on, server = console
    with _ws(on) as ws:
        ws.send(json.dumps({"type": "label", "label": "success", "episode": 0}))
        assert "wrong or missing token" in _answer(ws, "label_ack")["message"]
        ws.send(json.dumps({"type": "estop", "id": 7}))
        answer = _answer(ws, "estop_ack")
        assert answer == {"type": "estop_ack", "id": 7, "ok": True}
        assert server.status().state == "estop"  # latched by the bridge's own EStop
        ws.send(json.dumps({"type": "clear_estop", "token": TOKEN}))  # not confirmed
        assert "confirm" in _answer(ws, "clear_ack")["message"]
        ws.send(json.dumps({"type": "clear_estop", "token": "guess", "confirm": True}))
        assert "wrong or missing token" in _answer(ws, "clear_ack")["message"]
        assert server.status().state == "estop"
        ws.send(json.dumps({"type": "clear_estop", "token": TOKEN, "confirm": True}))
        assert _answer(ws, "clear_ack") == {"type": "clear_ack", "ok": True}
        assert server.status().state != "estop"
        ws.send(json.dumps({"type": "label", "label": "success", "episode": 0, "token": TOKEN}))
        assert "not in progress" in _answer(ws, "label_ack")["message"]  # no session: nothing to label
        ws.send("not json")
        assert "not a console message" in _answer(ws, "nothing")["message"]


def test_settings_that_would_expose_the_robot_are_one_line(tmp_path, capsys):
    with pytest.raises(ConsoleError, match="off loopback the console needs TLS"):
        check_bind("0.0.0.0", TOKEN, None, None)
    with pytest.raises(ConsoleError, match="needs the robot's token"):
        check_bind("0.0.0.0", None, "cert.pem", "key.pem")
    with pytest.raises(ConsoleError, match="go together"):
        check_bind("127.0.0.1", TOKEN, "cert.pem", None)
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(ConsoleError, match="cannot load them"):
        check_bind("127.0.0.1", TOKEN, str(tmp_path / "bad.pem"), str(tmp_path / "bad.pem"))
    assert check_bind("127.0.0.1", None, None, None) is None  # loopback, plain HTTP: as the bridge allows
    assert main(["deploy", "checkpoint=x", "console=true", "console_port=70000"]) == 2
    assert capsys.readouterr().err.strip() == "robot-rl: error: console_port=70000: must be in [0, 65535]"


def test_a_busy_port_is_one_line(console):
    on, _ = console
    client = RobotClient(on.server.client.address, TOKEN)
    try:
        with pytest.raises(ConsoleError, match=f"cannot listen on 127.0.0.1:{on.server.port}"):
            attach(console_args(client.address, console_port=on.server.port), client, client.spec())
    finally:
        client.close()
