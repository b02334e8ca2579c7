"""The front door (robot_rl.real.front_door): real sockets on loopback, a unix-socket echo server as the upstream.

Linux routes all of 127.0.0.0/8 to loopback, so a client socket bound to 127.0.0.2 is a second peer IP.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from robot_rl.real.front_door import PREFACE, FrontDoor, FrontDoorLimits, Proxy, listen

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="127.0.0.2 and /proc are Linux's")

TLS_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a TLS 1.2/1.3 ClientHello record's first bytes


class EchoServer:
    """A unix-socket echo server: one thread accepts, one thread per connection echoes."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fd-", dir="/tmp")  # short: sun_path holds 107 bytes
        self.path = os.path.join(self.dir, "grpc.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(256)
        self.accepted = 0
        self.closed = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                pass
        with self._lock:
            self.closed += 1

    def close(self) -> None:
        if self.sock.fileno() != -1:
            self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def front_door(echo: EchoServer) -> Iterator[Callable[..., FrontDoor]]:
    """``front_door(limits=..., tls=..., on_exit=...)``: a started FrontDoor on 127.0.0.1 (any port), stopped after."""
    made: list[FrontDoor] = []

    def make(limits: FrontDoorLimits | None = None, tls: bool = False,
             on_exit: Callable[[str], None] | None = None) -> FrontDoor:
        fd = FrontDoor("127.0.0.1", 0, echo.path, limits or FrontDoorLimits(), tls, on_exit=on_exit)
        fd.stats_interval_s = 0.02  # counters every 20 ms instead of 0.5 s, so that waiting for them is quick
        made.append(fd)
        fd.start()
        return fd

    yield make
    for fd in made:
        fd.stop()


def connect(fd: FrontDoor, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5.0)
    s.bind((source, 0))
    s.connect(("127.0.0.1", fd.port))
    return s


def connect_or_reset(fd: FrontDoor, source: str = "127.0.0.1") -> socket.socket | None:
    """``connect``, or None when the front door refused the connection so fast that the reset beat ``connect``'s
    own check of the result (the kernel completes the TCP handshake before the front door sees the connection)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5.0)
    s.bind((source, 0))
    try:
        s.connect(("127.0.0.1", fd.port))
    except ConnectionResetError:
        s.close()
        return None
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def roundtrip(s: socket.socket, data: bytes) -> bytes:
    s.sendall(data)
    return recv_exactly(s, len(data))


def refused(fd: FrontDoor, source: str) -> bool:
    """A new connection from ``source`` is closed at once, before it sends anything."""
    s = connect_or_reset(fd, source)
    try:
        return closed_within(s, 2.0)
    finally:
        if s is not None:
            s.close()


def closed_within(s: socket.socket | None, timeout_s: float) -> bool:
    """True if the peer closes (FIN or RST) within ``timeout_s``; False if the socket is still open then."""
    if s is None:
        return True  # reset during connect
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def wait_stats(fd: FrontDoor, pred: Callable[[dict], bool], timeout_s: float = 5.0) -> dict:
    end = time.monotonic() + timeout_s
    while True:
        stats = fd.stats()
        if stats and pred(stats):
            return stats
        if time.monotonic() > end:
            raise AssertionError(f"stats never matched: {stats}")
        time.sleep(0.01)


def settled(stats: dict) -> bool:
    """Every accepted connection is accounted for: refused, closed, proxied, or still in its handshake."""
    return stats["accepted"] == (stats["refused_per_peer"] + stats["refused_limit"] + stats["refused_bad_preface"]
                                 + stats["refused_handshake_timeout"] + stats["closed_in_handshake"]
                                 + stats["upstream_errors"] + stats["proxied"] + stats["handshaking"]
                                 + stats["evicted_in_handshake"])


def gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped by whoever adopted it counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def port_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    return False


# -- limits ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "key"), [({"max_connections": 0}, "max_connections"),
                                             ({"max_connections_per_peer": 1.5}, "max_connections_per_peer"),
                                             ({"handshake_timeout_s": 0}, "handshake_timeout_s"),
                                             ({"handshake_timeout_s": float("inf")}, "handshake_timeout_s")])
def test_limits_validate_names_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ValueError, match=f"^{key} must be") as info:
        FrontDoorLimits(**kwargs).validate()
    assert "\n" not in str(info.value)
    FrontDoorLimits().validate()


# -- piping ------------------------------------------------------------------------------------------------


def test_plaintext_pipes_both_ways(front_door, echo: EchoServer) -> None:
    fd = front_door()
    with connect(fd) as s:
        # The preface in pieces: checked as it arrives, forwarded once complete.
        s.sendall(PREFACE[:5])
        time.sleep(0.05)
        s.sendall(PREFACE[5:] + b"hello")
        assert recv_exactly(s, len(PREFACE) + 5) == PREFACE + b"hello"
        assert roundtrip(s, b"x" * 200) == b"x" * 200
        stats = wait_stats(fd, lambda st: st["proxied"] == 1)
        assert (stats["open"], stats["peers"], stats["handshaking"]) == (1, 1, 0)
    # The client's close closes the upstream connection too.
    stats = wait_stats(fd, lambda st: st["open"] == 0)
    assert stats["accepted"] == 1 and settled(stats)
    assert echo.accepted == 1
    end = time.monotonic() + 5
    while echo.closed < 1 and time.monotonic() < end:
        time.sleep(0.01)
    assert echo.closed == 1


def test_large_transfer_with_backpressure(front_door) -> None:
    """A client that does not read stalls its own sends (bounded buffers), then gets every byte back in order."""
    fd = front_door()
    # More than every kernel buffer on the way holds (client->front door->echo->front door->client): two TCP
    # connections' worth of send and receive buffers at their maximum, plus room for the unix sockets.
    kernel = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        try:
            with open(f"/proc/sys/net/ipv4/{name}") as f:
                kernel += int(f.read().split()[2])
        except (OSError, ValueError, IndexError):
            kernel += 8 << 20
    payload = os.urandom(1 << 20) * (2 * kernel // (1 << 20) + 8)
    with connect(fd) as s:
        s.sendall(PREFACE)
        assert recv_exactly(s, len(PREFACE)) == PREFACE
        s.setblocking(False)
        sent, last_progress = 0, time.monotonic()
        while sent < len(payload) and time.monotonic() - last_progress < 0.3:
            try:
                sent += s.send(memoryview(payload)[sent:sent + (1 << 20)])
                last_progress = time.monotonic()
            except BlockingIOError:
                time.sleep(0.01)
        assert sent < len(payload), "nothing pushed back: the front door buffers without bound"
        # Now read while sending the rest: everything comes back intact.
        s.settimeout(10.0)
        sender = threading.Thread(target=lambda: s.sendall(memoryview(payload)[sent:]))
        sender.start()
        assert recv_exactly(s, len(payload)) == payload
        sender.join()


def test_tls_start_pipes_both_ways(front_door) -> None:
    fd = front_door(tls=True)
    with connect(fd) as s:
        s.sendall(TLS_START[:1])
        time.sleep(0.05)
        s.sendall(TLS_START[1:])
        assert recv_exactly(s, len(TLS_START)) == TLS_START
        data = os.urandom(200)
        assert roundtrip(s, data) == data
    stats = wait_stats(fd, lambda st: st["accepted"] == 1 and st["open"] == 0)
    assert stats["proxied"] == 1 and stats["refused_bad_preface"] == 0


@pytest.mark.parametrize(("tls", "start"), [(False, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), (False, PREFACE[:10] + b"X"),
                                            (False, TLS_START), (True, PREFACE), (True, b"\x16\x02")])
def test_junk_is_closed_and_counted(front_door, echo: EchoServer, tls: bool, start: bytes) -> None:
    fd = front_door(tls=tls)
    with connect(fd) as s:
        s.sendall(start)
        assert closed_within(s, 2.0)
    stats = wait_stats(fd, lambda st: st["accepted"] == 1 and st["open"] == 0)
    assert stats["refused_bad_preface"] == 1 and stats["proxied"] == 0 and settled(stats)
    assert echo.accepted == 0  # junk never reaches gRPC


def test_silent_and_partial_connections_time_out(front_door, echo: EchoServer) -> None:
    fd = front_door(FrontDoorLimits(handshake_timeout_s=0.3))
    t0 = time.monotonic()
    with connect(fd) as silent, connect(fd) as partial:
        partial.sendall(PREFACE[:23])  # one byte short, then nothing
        assert closed_within(silent, 3.0)
        assert closed_within(partial, 3.0)
        elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 1.5
    stats = wait_stats(fd, lambda st: st["accepted"] == 2 and st["open"] == 0)
    assert stats["refused_handshake_timeout"] == 2 and settled(stats)
    assert echo.accepted == 0


def test_a_client_that_closes_during_its_handshake(front_door) -> None:
    fd = front_door()
    connect(fd).close()
    stats = wait_stats(fd, lambda st: st["accepted"] == 1 and st["open"] == 0)
    assert stats["closed_in_handshake"] == 1 and settled(stats)


def test_upstream_down_closes_the_client(front_door, echo: EchoServer) -> None:
    fd = front_door()
    echo.close()  # the gRPC server is gone: its socket file too
    with connect(fd) as s:
        s.sendall(PREFACE)
        assert closed_within(s, 2.0)
    stats = wait_stats(fd, lambda st: st["upstream_errors"] == 1)
    assert stats["open"] == 0 and stats["proxied"] == 0 and settled(stats)


# -- connection limits -------------------------------------------------------------------------------------


def test_per_peer_cap(front_door) -> None:
    fd = front_door(FrontDoorLimits(max_connections_per_peer=3))
    held = [connect(fd, "127.0.0.2") for _ in range(3)]
    for s in held:  # all three started: none can make room
        s.sendall(PREFACE)
        assert recv_exactly(s, len(PREFACE)) == PREFACE
    wait_stats(fd, lambda st: st["proxied"] == 3)
    assert refused(fd, "127.0.0.2")
    with connect(fd, "127.0.0.1") as other:
        assert roundtrip(other, PREFACE + b"operator") == PREFACE + b"operator"
        stats = wait_stats(fd, lambda st: st["open"] == 4)
        assert stats["refused_per_peer"] == 1 and stats["peers"] == 2 and settled(stats)
    # A slot freed on 127.0.0.2 can be used again.
    held.pop().close()
    wait_stats(fd, lambda st: st["open"] == 2)
    with connect(fd, "127.0.0.2") as again:
        assert roundtrip(again, PREFACE) == PREFACE
    for s in held:
        s.close()


def test_at_the_per_peer_cap_a_silent_connection_makes_room(front_door) -> None:
    """A connection still in its handshake is evicted for a new one from its peer (a real client sends its start at
    once), so silent connections can never keep a new one out; started ones are never evicted."""
    fd = front_door(FrontDoorLimits(max_connections_per_peer=3, handshake_timeout_s=30.0))
    started = [connect(fd, "127.0.0.2") for _ in range(2)]
    for s in started:
        s.sendall(PREFACE)
        assert recv_exactly(s, len(PREFACE)) == PREFACE
    silent = connect(fd, "127.0.0.2")
    wait_stats(fd, lambda st: st["open"] == 3)
    with connect(fd, "127.0.0.2") as newcomer:
        assert roundtrip(newcomer, PREFACE + b"x") == PREFACE + b"x"
        assert closed_within(silent, 2.0)
        assert not any(closed_within(s, 0.05) for s in started)
        stats = wait_stats(fd, lambda st: st["evicted_in_handshake"] == 1)
        assert stats["refused_per_peer"] == 0 and stats["open"] == 3 and settled(stats)
    for s in [*started, silent]:
        s.close()


def test_a_start_that_arrived_but_was_not_read_yet_is_not_evicted(echo: EchoServer) -> None:
    """Under a flood of accepts the loop may reach a new connection before it has read an operator's start that is
    already in its socket. Before: the operator's connection, the oldest "in its handshake", was evicted (an EStop
    came back UNAVAILABLE 1 in 10 in bench/bridge_abuse.py's idle_same_peer); now its start is read first."""
    listeners, port = listen("127.0.0.1", 0)
    proxy = Proxy(listeners, echo.path, tls=False, max_connections=512, max_connections_per_peer=2,
                  handshake_timeout_s=30.0)
    try:
        def accept_one() -> None:  # the loop's accept step alone, after the kernel has queued the connection
            deadline = time.monotonic() + 2.0
            before = proxy.counters["accepted"]
            while proxy.counters["accepted"] == before and time.monotonic() < deadline:
                proxy._accept(listeners[0])

        operator = socket.create_connection(("127.0.0.1", port))
        accept_one()
        operator.sendall(PREFACE)  # sent, but the loop has not read it
        silent = socket.create_connection(("127.0.0.1", port))
        accept_one()
        time.sleep(0.05)
        newcomer = socket.create_connection(("127.0.0.1", port))
        accept_one()  # at the cap of 2: room is made by the silent one, not the operator
        assert proxy.counters["evicted_in_handshake"] == 1 and proxy.counters["refused_per_peer"] == 0
        assert closed_within(silent, 1.0) and not closed_within(operator, 0.1)
        for s in (operator, silent, newcomer):
            s.close()
    finally:
        proxy.close()


def test_global_cap(front_door) -> None:
    fd = front_door(FrontDoorLimits(max_connections=4, max_connections_per_peer=32, handshake_timeout_s=30.0))
    held = [connect(fd, f"127.0.0.{2 + i}") for i in range(4)]
    for s in held[1:]:
        s.sendall(PREFACE)
        assert recv_exactly(s, len(PREFACE)) == PREFACE
    wait_stats(fd, lambda st: st["open"] == 4)
    with connect(fd, "127.0.0.9") as s:  # the one silent connection (127.0.0.2) makes room
        assert roundtrip(s, PREFACE) == PREFACE
        assert closed_within(held[0], 2.0)
        assert refused(fd, "127.0.0.10")  # now every connection has started: refused
        stats = wait_stats(fd, lambda st: st["refused_limit"] == 1)
        assert stats["open"] == 4 and stats["evicted_in_handshake"] == 1 and stats["refused_per_peer"] == 0
    wait_stats(fd, lambda st: st["open"] == 3)
    with connect(fd, "127.0.0.9") as s:
        assert roundtrip(s, PREFACE) == PREFACE
    for s in held:
        s.close()


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < 1300:
            pytest.skip(f"needs ~1,300 descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want,
                                                    hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_flood_from_one_peer_never_locks_out_another(front_door, echo: EchoServer, many_fds) -> None:
    """The review's attack: ~1,100 idle connections that never send a byte. Here they come from one peer (the
    attacker holds 32, each new one evicting its oldest); a second peer still connects and gets its bytes through."""
    fd = front_door(FrontDoorLimits(handshake_timeout_s=5.0))
    flood: list[socket.socket] = []
    try:
        t0 = time.monotonic()
        for _ in range(1100):
            s = connect_or_reset(fd, "127.0.0.2")
            if s is not None:
                flood.append(s)
        with connect(fd, "127.0.0.1") as operator:
            assert roundtrip(operator, PREFACE + b"estop") == PREFACE + b"estop"
            assert time.monotonic() - t0 < 8.0
            stats = wait_stats(fd, lambda st: st["accepted"] == 1101)
        assert stats["evicted_in_handshake"] == 1100 - 32 and stats["handshaking"] == 32 and stats["peers"] == 2
        assert stats["proxied"] == 1 and settled(stats)
        # Accept order is connect order: the last 32 are held (until their handshake deadline), the rest evicted.
        assert all(closed_within(s, 1.0) for s in flood[:-32])
        assert not any(closed_within(s, 0.01) for s in flood[-32:])
        assert echo.accepted == 1  # only the operator reached gRPC
    finally:
        for s in flood:
            s.close()


def test_accept_emfile_pauses_and_recovers(echo: EchoServer) -> None:
    """EMFILE from accept stops accepting for 50 ms (no spinning, no crash), then the connection is served."""

    class FlakyListener(socket.socket):
        failures = 3

        def accept(self):  # type: ignore[override]
            if self.failures:
                self.failures -= 1
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return super().accept()

    listener = FlakyListener(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    control_r, control_w = os.pipe()
    proxy = Proxy([listener], echo.path, False, 8, 8, 2.0, control_fd=control_r)
    loop = threading.Thread(target=proxy.run)
    loop.start()
    try:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as s:
            assert roundtrip(s, PREFACE + b"after") == PREFACE + b"after"
            elapsed = time.monotonic() - t0
        assert 0.14 <= elapsed < 2.0  # three pauses of 50 ms
    finally:
        os.close(control_w)  # EOF on the control pipe ends the loop, as stdin EOF ends the child
        loop.join(timeout=5.0)
        os.close(control_r)
    assert not loop.is_alive()
    assert proxy.counters["accept_emfile"] == 3 and proxy.counters["proxied"] == 1
    assert listener.fileno() == -1  # closed with everything else


# -- the process -------------------------------------------------------------------------------------------


def test_port_zero_gives_a_real_port(front_door) -> None:
    fd = front_door()
    assert fd.port and fd.port > 0 and fd.stats()["port"] == fd.port
    assert fd.alive() and fd.pid is not None and not gone(fd.pid)
    stats = fd.stats()
    assert stats["fd_limit"] >= stats["fd_limit_before"] and stats["max_connections"] == 512
    assert isinstance(stats["nice"], int)


@pytest.mark.parametrize("host", ["localhost", "[::1]"])
def test_localhost_and_bracketed_ipv6(echo: EchoServer, host: str) -> None:
    if host == "[::1]" and not socket.has_ipv6:
        pytest.skip("no IPv6")
    fd = FrontDoor(host, 0, echo.path, FrontDoorLimits(), False)
    try:
        port = fd.start()
    except OSError as e:
        if host == "[::1]":
            pytest.skip(f"no IPv6 loopback here: {e}")
        raise
    try:
        target = "::1" if host == "[::1]" else "localhost"
        with socket.create_connection((target, port), timeout=5.0) as s:
            assert roundtrip(s, PREFACE) == PREFACE
    finally:
        fd.stop()


def test_cannot_listen_is_one_line_and_leaves_nothing(echo: EchoServer) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        fd = FrontDoor("127.0.0.1", port, echo.path, FrontDoorLimits(), False, on_exit=lambda r: calls.append(r))
        calls: list[str] = []
        with pytest.raises(OSError) as info:
            fd.start()
        assert str(info.value) == f"cannot listen on 127.0.0.1:{port}: the port is in use (another serve-robot?)"
        assert fd.pid is not None and wait_gone(fd.pid) and not fd.alive()
        assert calls == []
        fd.stop()  # harmless after a failed start
    for host, why in [("198.51.100.7", "not an address of this machine"), ("no-such-host.invalid", "unknown host (")]:
        with pytest.raises(OSError) as info:
            FrontDoor(host, 50051, echo.path, FrontDoorLimits(), False).start()
        assert str(info.value).startswith(f"cannot listen on {host}:50051: {why}") and "\n" not in str(info.value)


def test_on_exit_fires_when_killed_not_when_stopped(front_door) -> None:
    reasons: list[str] = []
    fired = threading.Event()

    def on_exit(reason: str) -> None:
        reasons.append(reason)
        fired.set()

    fd = front_door(on_exit=on_exit)
    pid, port = fd.pid, fd.port
    os.kill(pid, signal.SIGKILL)
    assert fired.wait(5.0)
    assert reasons == ["the front door process exited unexpectedly (killed by SIGKILL)"]
    assert not fd.alive() and port_closed(port)
    fd.stop()
    fd.stop()
    assert len(reasons) == 1

    stopped: list[str] = []
    fd2 = front_door(on_exit=stopped.append)
    pid2 = fd2.pid
    with connect(fd2) as s:
        s.sendall(PREFACE)
        assert recv_exactly(s, len(PREFACE)) == PREFACE
        fd2.stop()
        assert closed_within(s, 2.0)  # stop closes every connection
    fd2.stop()  # twice is fine
    assert wait_gone(pid2) and not fd2.alive() and stopped == []


def test_child_exits_on_stdin_eof(front_door) -> None:
    """The parent's end of the child's stdin closing (what the kernel does when the parent dies) ends the child."""
    reasons: list[str] = []
    fired = threading.Event()
    fd = front_door(on_exit=lambda r: (reasons.append(r), fired.set()))
    pid, port = fd.pid, fd.port
    fd._proc.stdin.close()  # as if the parent were gone
    assert fired.wait(5.0) and wait_gone(pid) and port_closed(port)
    assert reasons == ["the front door process exited unexpectedly (exit code 0)"]


HELPER = r"""
import json, resource, sys, time
from robot_rl.real.front_door import FrontDoor, FrontDoorLimits
nofile = int(sys.argv[1])
if nofile:
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
fd = FrontDoor("127.0.0.1", 0, sys.argv[2], FrontDoorLimits(), False)
fd.start()
print(json.dumps({"pid": fd.pid, "stats": fd.stats()}), flush=True)
time.sleep(60)
"""


def _helper(nofile: int, upstream: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-c", HELPER, str(nofile), upstream], stdout=subprocess.PIPE)
    line = proc.stdout.readline()
    assert line, "the helper did not start its front door"
    return proc, json.loads(line)


def test_child_dies_with_a_sigkilled_parent(echo: EchoServer) -> None:
    parent, info = _helper(0, echo.path)
    try:
        child, port = info["pid"], info["stats"]["port"]
        assert not gone(child)
        parent.kill()
        parent.wait()
        assert wait_gone(child), "the front door outlived its SIGKILLed parent"
        assert port_closed(port)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_low_descriptor_limit_lowers_max_connections(echo: EchoServer) -> None:
    parent, info = _helper(256, echo.path)
    try:
        stats = info["stats"]
        assert stats["fd_limit_before"] == 256 and stats["fd_limit"] == 256
        assert stats["max_connections"] == (256 - 64) // 2 and stats["max_connections_requested"] == 512
        assert stats["max_connections_lowered"] is True
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        assert wait_gone(info["pid"])
