"""The robot server's TCP front door: a small separate process that owns the public port and limits connections.

Why: ``serve-robot``'s e-stop must always get through, but nothing in gRPC Python limits TCP connections. About
1,100 idle TCP connections that never send a byte (no token needed) use up the server process's file descriptors
(soft limit 1024 on most systems); gRPC then stops accepting, and an ``EStop`` on a new connection times out. gRPC
Python has no per-peer connection limit and no hook at accept time, so the limits live here instead: this module
runs as its own process (``python -m robot_rl.real.front_door``), listens on the public ``host:port``, enforces
transport limits, and pipes the bytes of accepted connections to the gRPC server, which listens only on a private
unix socket (in a 0700 directory its parent creates). Being a separate process, its descriptor use and CPU under
a flood are isolated from the robot's control loop (which shares the GIL with gRPC's Python threads).

What the child does:

* raises its ``RLIMIT_NOFILE`` soft limit to the hard limit (at most 1,048,576); if that still cannot hold
  ``max_connections`` proxied connections (2 descriptors each, plus 64 to spare), it lowers ``max_connections``
  to fit and says so, so that it never runs out of descriptors because of its own connections;
* on accept, when the peer IP already has ``max_connections_per_peer`` connections open, or ``max_connections``
  are open in all, closes the oldest connection (of that peer, or of all) that has **not yet sent its start** to make
  room (``evicted_in_handshake``): a real client sends its start at once, so silent connections can never keep a
  new one out; only when every such connection has completed its start is the new one closed at once (with a
  reset: ``refused_per_peer``, ``refused_limit``);
* gives each new connection ``handshake_timeout_s`` to send a valid start: the 24-byte HTTP/2 client preface in
  plaintext (checked byte by byte as it arrives, closed at the first wrong byte), or the start of a TLS handshake
  record (``0x16 0x03``) with ``tls``. Only then does it connect to the gRPC server's unix socket, so silent or
  junk connections never reach gRPC;
* then pipes bytes both ways with backpressure (at most one 256 KiB chunk buffered per direction; it stops reading
  a side while the other side cannot take more), and closes both sides when either closes or fails;
* when ``accept`` fails for lack of descriptors (EMFILE, ENFILE) it stops accepting for 50 ms instead of
  spinning, and counts it;
* reports its counters on stdout as a JSON line every 0.5 s, and exits at once, closing everything, when its stdin
  reaches EOF: the parent holds the other end, so a parent that dies, even by SIGKILL, takes the child with it
  (``PR_SET_PDEATHSIG`` is a second line on Linux). It ignores SIGINT (the parent handles Ctrl-C and stops it).

What is guaranteed (with the limits ``max_connections`` = M, ``max_connections_per_peer`` = P):

* a single attacker IP holds at most P connections, whatever it sends or does not send;
* a connection that does not complete its start lives at most ``handshake_timeout_s`` (to the loop's timer, a few
  ms), and less when a new connection needs its place;
* silent or half-started connections, from any number of addresses, never keep a new connection out (they are
  evicted for it); an operator on another IP can always connect while fewer than M / P attacker IPs (16 by
  default) hold connections that completed their start, and the gRPC server sees at most M connections from
  here, far below its own descriptor limit;
* the front door itself never runs out of descriptors through its own connections (see the fd limit above).

What it does not do:

* an idle HTTP/2 connection that completed the preface is kept: finding dead or idle peers is gRPC's keepalive and
  ``max_connection_idle`` (and, for a client that sends the preface and then nothing, gRPC's own handshake
  timeout);
* no per-call inspection: tokens, methods and call limits are ``robot_rl.real.guard``'s job, in the server;
* TLS is passed through opaquely (gRPC terminates it); only the first two bytes are checked;
* the per-peer limit is per address: an attacker with many addresses (an IPv6 /64, several hosts) is bounded
  only by the global limit;
* no rate limit: new connections (or SYNs) arriving faster than the loop accepts them (tens of thousands a
  second) fill the kernel's accept queue (backlog 1024), and a new client's connect then waits for TCP's
  retransmit (1 s, then 3 s); SYN floods are the kernel's business (syncookies);
* the gRPC server sees every connection as coming from its unix socket, not from the client's address.

Stdlib only (no numpy, grpc or torch), so the child starts in tens of milliseconds. ``FrontDoor`` is the parent
side (used by the server); ``main`` is the child.
"""

from __future__ import annotations

import collections
import errno
import json
import math
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MODULE = "robot_rl.real.front_door"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the HTTP/2 client connection preface (RFC 9113, 3.4)
STATS_INTERVAL_S = 0.5

_CHUNK = 256 * 1024  # one read, and the most a connection buffers per direction (backpressure beyond it)
_ACCEPT_BATCH = 64  # accepts per wake-up: a flood on the listener cannot starve the connections already open
_ACCEPT_PAUSE_S = 0.05  # after EMFILE/ENFILE: the failed connection stays queued, so retrying at once would spin
_FD_SLACK = 64  # descriptors kept for the listeners, the pipes, epoll, and the connection being refused
_FD_CAP = 1_048_576
# The kernel's accept queue (capped by net.core.somaxconn, 4096 on current kernels): a flood of reconnecting
# sockets waits in it, and when it is full the kernel drops an operator's SYN (retried after 1 s, then 3 s).
_BACKLOG = 4096
_LINGER_RESET = struct.pack("ii", 1, 0)  # close with RST: a refused connection leaves no TIME_WAIT behind here
_UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL

_COUNTERS = ("accepted", "proxied", "refused_per_peer", "refused_limit", "refused_handshake_timeout",
             "refused_bad_preface", "closed_in_handshake", "accept_emfile", "accept_errors", "upstream_errors",
             "evicted_in_handshake")

_HANDSHAKE, _PROXY, _CLOSED = 0, 1, 2
_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


@dataclass(frozen=True)
class FrontDoorLimits:
    """Transport limits of the front door."""

    max_connections: int = 512  # client connections open at once, all peers together
    max_connections_per_peer: int = 32  # from one peer IP address
    handshake_timeout_s: float = 2.0  # a new connection must send a valid first message within this, or is closed

    def validate(self) -> None:
        for name in ("max_connections", "max_connections_per_peer"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        t = self.handshake_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (t > 0 and math.isfinite(t)):
            raise ValueError(f"handshake_timeout_s must be a number > 0, got {t!r}")


# ---------------------------------------------------------------------------------------------------------------
# Address helpers (as in robot_rl.real.guard, which imports grpc and so cannot be imported by the child).


def _literal(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def format_address(host: str, port: int) -> str:
    """``host:port`` with an IPv6 literal bracketed (``[::1]:50051``)."""
    h = _literal(host)
    return f"[{h}]:{port}" if ":" in h else f"{h}:{port}"


def _bind_error(e: OSError) -> str:
    return {errno.EADDRINUSE: "the port is in use (another serve-robot?)",
            errno.EADDRNOTAVAIL: "not an address of this machine",
            errno.EACCES: "permission denied (ports below 1024 need privileges)"}.get(
        e.errno or 0, e.strerror or str(e))


def listen(host: str, port: int, backlog: int = _BACKLOG) -> tuple[list[socket.socket], int]:
    """Non-blocking listening sockets on every address of ``host`` (``localhost`` may be both ::1 and 127.0.0.1),
    and the bound port. Raises ``OSError`` with a one-line reason, with nothing left open.

    SO_REUSEADDR (a port in TIME_WAIT from a previous run is free), never SO_REUSEPORT (a second server must fail,
    not share the port); IPv6 sockets are IPv6 only, as an IPv4 address of the same port is a separate bind.
    """
    where = format_address(host, port)
    h = _literal(host)
    try:
        infos = socket.getaddrinfo(h or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(f"cannot listen on {where}: unknown host ({e.strerror})") from None
    unique: list[tuple[int, tuple[Any, ...]]] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr) not in unique:
            unique.append((family, sockaddr))
    if not unique:
        raise OSError(f"cannot listen on {where}: unknown host (no IPv4 or IPv6 address)")
    # With port 0 and several addresses, the later ones take the first one's port, which can be taken on another
    # address in between: try again a few times.
    for attempt in range(10):
        socks: list[socket.socket] = []
        bound = port
        first_error: OSError | None = None
        try:
            for family, sockaddr in unique:
                try:
                    s = socket.socket(family, socket.SOCK_STREAM)
                except OSError as e:  # EAFNOSUPPORT: no IPv6 on this machine
                    first_error = first_error or e
                    continue
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    s.bind((sockaddr[0], bound, *sockaddr[2:]))
                except OSError as e:
                    # An address family the machine lacks (::1 with IPv6 off) is skipped if another one binds.
                    if len(unique) > 1 and e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                        first_error = first_error or e
                        socks.remove(s)
                        s.close()
                        continue
                    raise
                if bound == 0:
                    bound = s.getsockname()[1]
                s.listen(backlog)
                s.setblocking(False)
            if not socks:
                raise first_error or OSError(errno.EADDRNOTAVAIL, "no address")
            return socks, bound
        except OSError as e:
            for s in socks:
                s.close()
            if port == 0 and bound != 0 and e.errno == errno.EADDRINUSE and attempt < 9:
                continue
            raise OSError(f"cannot listen on {where}: {_bind_error(e)}") from None
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------------------
# The child: one thread, one epoll loop.


class _Conn:
    __slots__ = ("client", "upstream", "ip", "state", "head", "deadline", "to_up", "to_client", "cmask", "umask",
                 "ckey", "ukey")

    def __init__(self, client: socket.socket, ip: str, deadline: float) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.ip = ip
        self.state = _HANDSHAKE
        self.head = bytearray()  # what arrived before the start was complete (forwarded once it is)
        self.deadline = deadline
        self.to_up = bytearray()  # bytes read from the client that the upstream socket has not taken yet
        self.to_client = bytearray()
        self.cmask = 0  # the events each socket is registered for (0: not registered)
        self.umask = 0
        self.ckey = (self, False)  # selector data: (connection, is the upstream socket)
        self.ukey = (self, True)


class _Listener:
    pass


class _Control:
    pass


class Proxy:
    """The child's event loop: accepts, checks, pipes. ``run`` returns when the control descriptor reaches EOF
    (or reads fail), or when ``report_fd``'s reader is gone. Tests run it in a thread; ``main`` runs it alone."""

    def __init__(self, listeners: list[socket.socket], upstream: str, tls: bool, max_connections: int,
                 max_connections_per_peer: int, handshake_timeout_s: float, control_fd: int | None = None,
                 report_fd: int | None = None, stats_interval_s: float = STATS_INTERVAL_S,
                 static: dict[str, Any] | None = None) -> None:
        self.listeners = listeners
        self.upstream = upstream
        self.tls = tls
        self.max_connections = max_connections
        self.max_per_peer = max_connections_per_peer
        self.handshake_timeout_s = handshake_timeout_s
        self.control_fd = control_fd
        self.report_fd = report_fd
        self.stats_interval_s = stats_interval_s
        self.static = dict(static or {})
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.per_peer: dict[str, int] = {}
        self.conns: set[_Conn] = set()
        self.handshaking = 0
        # Connections still in their handshake, oldest first, per peer and in all: at a cap, the oldest of these
        # makes room for a new connection (a real client sends its start at once; one that has not is worth less).
        self.shaking: dict[_Conn, None] = {}
        self.shaking_by_peer: dict[str, dict[_Conn, None]] = {}
        # Every connection gets the same timeout, so deadlines come in accept order: a deque is a sorted queue.
        self.deadlines: collections.deque[_Conn] = collections.deque()
        self.paused_until = 0.0
        self.done = False
        self.sel = selectors.DefaultSelector()
        self.buf = bytearray(_CHUNK)  # one read buffer for everyone: only the unsent rest is copied per connection
        self.view = memoryview(self.buf)
        self._listener, self._control = _Listener(), _Control()

    # -- the loop -------------------------------------------------------------------------------------------

    def run(self) -> None:
        for s in self.listeners:
            self.sel.register(s, _READ, self._listener)
        if self.control_fd is not None:
            self.sel.register(self.control_fd, _READ, self._control)
        next_report = time.monotonic() + self.stats_interval_s
        try:
            while not self.done:
                now = time.monotonic()
                timeout = next_report - now
                if self.deadlines:
                    timeout = min(timeout, self.deadlines[0].deadline - now)
                if self.paused_until:
                    timeout = min(timeout, self.paused_until - now)
                for key, mask in self.sel.select(max(timeout, 0.0)):
                    data = key.data
                    if data is self._listener:
                        self._accept(key.fileobj)  # type: ignore[arg-type]
                    elif data is self._control:
                        self._read_control()
                    else:
                        self._io(data[0], data[1], mask)
                now = time.monotonic()
                while self.deadlines and self.deadlines[0].deadline <= now:
                    conn = self.deadlines.popleft()
                    if conn.state == _HANDSHAKE:
                        self._close(conn, "refused_handshake_timeout", reset=True)
                if self.paused_until and now >= self.paused_until:
                    self.paused_until = 0.0
                    for s in self.listeners:
                        self.sel.register(s, _READ, self._listener)
                if now >= next_report:
                    next_report = now + self.stats_interval_s
                    self.report()
        finally:
            self.close()

    def close(self) -> None:
        """Close the listeners and every connection (the child also exits right after, which would close them)."""
        for conn in list(self.conns):
            self._close(conn, None)
        for s in self.listeners:
            s.close()
        self.sel.close()

    def snapshot(self) -> dict[str, Any]:
        snap = dict(self.static)
        snap.update(self.counters)
        snap.update(open=len(self.conns), peers=len(self.per_peer), handshaking=self.handshaking,
                    max_connections=self.max_connections)
        return snap

    def report(self, kind: str = "stats") -> None:
        if self.report_fd is None:
            return
        line = (json.dumps({"type": kind, **self.snapshot()}) + "\n").encode()
        try:
            os.write(self.report_fd, line)  # under PIPE_BUF, so all or nothing on a non-blocking pipe
        except (BlockingIOError, InterruptedError):
            pass  # the parent is slow to read: drop this report rather than stall the connections
        except OSError:
            self.done = True  # the parent is gone

    def _read_control(self) -> None:
        try:
            data = os.read(self.control_fd, 4096)  # type: ignore[arg-type]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.done = True  # EOF: the parent closed our stdin, or died

    # -- accepting ----------------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that one connection is gone (reset while queued, or a firewall): not our problem
                # EMFILE/ENFILE (or ENOBUFS/ENOMEM): the connection stays queued and epoll keeps reporting it,
                # so stop listening for a moment instead of spinning.
                self.counters["accept_emfile" if e.errno in (errno.EMFILE, errno.ENFILE) else "accept_errors"] += 1
                self._pause_accepting()
                return
            self.counters["accepted"] += 1
            ip = addr[0]
            if self.per_peer.get(ip, 0) >= self.max_per_peer and not self._make_room(self.shaking_by_peer.get(ip)):
                self._refuse(sock, "refused_per_peer")
                continue
            if len(self.conns) >= self.max_connections and not self._make_room(self.shaking):
                self._refuse(sock, "refused_limit")
                continue
            sock.setblocking(False)
            conn = _Conn(sock, ip, time.monotonic() + self.handshake_timeout_s)
            self.conns.add(conn)
            self.per_peer[ip] = self.per_peer.get(ip, 0) + 1
            self.handshaking += 1
            self.shaking[conn] = None
            self.shaking_by_peer.setdefault(ip, {})[conn] = None
            self.deadlines.append(conn)
            self._update(conn)

    def _make_room(self, shaking: dict[_Conn, None] | None) -> bool:
        """Free one place by closing the oldest connection in `shaking` that is still silent; True if a place was
        freed. A connection whose start has arrived but was not read yet (a real client under a flood of accepts)
        is read first and kept: only silence is evicted."""
        for conn in list(shaking or ()):
            if conn.state == _HANDSHAKE:
                self._read_start(conn)
            if conn.state == _CLOSED:  # it sent junk or hung up: its place is free
                return True
            if conn.state == _HANDSHAKE:
                self._close(conn, "evicted_in_handshake", reset=True)
                return True
        return False

    def _refuse(self, sock: socket.socket, counter: str) -> None:
        self.counters[counter] += 1
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        except OSError:
            pass
        sock.close()

    def _pause_accepting(self) -> None:
        if self.paused_until:
            return
        for s in self.listeners:
            self.sel.unregister(s)
        self.paused_until = time.monotonic() + _ACCEPT_PAUSE_S

    # -- connections --------------------------------------------------------------------------------------

    def _io(self, conn: _Conn, is_up: bool, mask: int) -> None:
        if conn.state == _CLOSED:
            return  # closed earlier in this round of events
        if mask & _WRITE:
            self._flush(conn, to_up=is_up)
            if conn.state == _CLOSED:
                return
        if mask & _READ:
            if conn.state == _HANDSHAKE:
                self._read_start(conn)
            elif is_up:
                self._pipe(conn, conn.upstream, conn.client, to_up=False)  # type: ignore[arg-type]
            else:
                self._pipe(conn, conn.client, conn.upstream, to_up=True)  # type: ignore[arg-type]

    def _read_start(self, conn: _Conn) -> None:
        try:
            n = conn.client.recv_into(self.buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if n == 0:
            self._close(conn, "closed_in_handshake")
            return
        head = conn.head
        head += self.view[:n]
        if self.tls:
            ok = head[0] == 0x16 and (len(head) < 2 or head[1] == 0x03)  # TLS record: handshake, version 3.x
            complete = len(head) >= 2
        else:
            k = min(len(head), len(PREFACE))
            ok = head[:k] == PREFACE[:k]
            complete = len(head) >= len(PREFACE)
        if not ok:
            self._close(conn, "refused_bad_preface", reset=True)
        elif complete:
            self._connect_upstream(conn)

    def _connect_upstream(self, conn: _Conn) -> None:
        try:
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            self._close(conn, "upstream_errors", reset=True)
            return
        try:
            up.setblocking(False)
            # A unix-socket connect completes at once or fails (EAGAIN only if gRPC's accept queue, somaxconn
            # long, is full, which M connections cannot do while gRPC accepts).
            up.connect(self.upstream)
        except OSError:
            up.close()
            self._close(conn, "upstream_errors", reset=True)
            return
        self._end_handshake(conn)
        conn.state = _PROXY
        conn.upstream = up
        self.counters["proxied"] += 1
        try:
            conn.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # gRPC's small frames, unbatched
        except OSError:
            pass
        head, conn.head = conn.head, bytearray()
        self._send(conn, up, memoryview(head), to_up=True)
        if conn.state != _CLOSED:
            self._update(conn)

    def _pipe(self, conn: _Conn, src: socket.socket, dst: socket.socket, to_up: bool) -> None:
        try:
            n = src.recv_into(self.buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if n == 0:
            # We read a side only when nothing is pending towards the other, so nothing is lost by closing now.
            self._close(conn, None)
            return
        self._send(conn, dst, self.view[:n], to_up)

    def _send(self, conn: _Conn, dst: socket.socket, data: memoryview, to_up: bool) -> None:
        if not data:
            return
        try:
            sent = dst.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn, None)
            return
        if sent < len(data):
            pending = conn.to_up if to_up else conn.to_client
            pending += data[sent:]
            self._update(conn)  # stop reading the source, wait for the destination to be writable

    def _flush(self, conn: _Conn, to_up: bool) -> None:
        pending = conn.to_up if to_up else conn.to_client
        dst = conn.upstream if to_up else conn.client
        if not pending or dst is None:
            return
        try:
            sent = dst.send(pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, None)
            return
        del pending[:sent]
        if not pending:
            self._update(conn)  # drained: read the source again

    def _update(self, conn: _Conn) -> None:
        """Register each socket for what it needs: read a side only while nothing waits to go to the other side
        (backpressure), write a side while something waits for it."""
        cmask = (_READ if conn.state == _HANDSHAKE or not conn.to_up else 0) | (_WRITE if conn.to_client else 0)
        if cmask != conn.cmask:
            self._set(conn.client, conn.cmask, cmask, conn.ckey)
            conn.cmask = cmask
        if conn.upstream is not None:
            umask = (0 if conn.to_client else _READ) | (_WRITE if conn.to_up else 0)
            if umask != conn.umask:
                self._set(conn.upstream, conn.umask, umask, conn.ukey)
                conn.umask = umask

    def _set(self, sock: socket.socket, old: int, new: int, data: Any) -> None:
        if old == 0:
            self.sel.register(sock, new, data)
        elif new == 0:
            self.sel.unregister(sock)
        else:
            self.sel.modify(sock, new, data)

    def _end_handshake(self, conn: _Conn) -> None:
        self.handshaking -= 1
        del self.shaking[conn]
        peer = self.shaking_by_peer[conn.ip]
        del peer[conn]
        if not peer:
            del self.shaking_by_peer[conn.ip]

    def _close(self, conn: _Conn, counter: str | None, reset: bool = False) -> None:
        if conn.state == _CLOSED:
            return
        if conn.state == _HANDSHAKE:
            self._end_handshake(conn)
        conn.state = _CLOSED
        if conn.cmask:
            self.sel.unregister(conn.client)
        if reset:
            try:
                conn.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            except OSError:
                pass
        conn.client.close()
        if conn.upstream is not None:
            if conn.umask:
                self.sel.unregister(conn.upstream)
            conn.upstream.close()
        conn.cmask = conn.umask = 0
        conn.to_up = conn.to_client = conn.head = bytearray()
        self.conns.discard(conn)
        left = self.per_peer[conn.ip] - 1
        if left:
            self.per_peer[conn.ip] = left
        else:
            del self.per_peer[conn.ip]
        if counter is not None:
            self.counters[counter] += 1


def fd_limits() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit (capped at 1,048,576); return (before, after)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _FD_CAP if hard == resource.RLIM_INFINITY else min(hard, _FD_CAP)
    if soft == resource.RLIM_INFINITY:
        return _FD_CAP, _FD_CAP
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            pass  # a hard limit that cannot be reached after all (a container's): keep the soft one
    after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft, _FD_CAP if after == resource.RLIM_INFINITY else after


def effective_max_connections(requested: int, fd_limit: int) -> int:
    """``requested``, lowered so that that many proxied connections (2 descriptors each) fit under ``fd_limit``."""
    return max(1, min(requested, (fd_limit - _FD_SLACK) // 2))


def _die_with_parent(parent_pid: int | None) -> None:
    # Stdin EOF is the first line; this is the second, for a parent whose pipe end another process inherited.
    # The "parent" of PR_SET_PDEATHSIG is the thread that forked us: FrontDoor forks from its monitor thread,
    # which lives as long as we do.
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - best effort
            pass
    if parent_pid and os.getppid() != parent_pid:
        os._exit(0)  # the parent died before the line above took effect


def _raise_priority() -> int:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)  # needs CAP_SYS_NICE; usually refused, which is fine
    except OSError:
        pass
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return 0


def _emit(msg: dict[str, Any]) -> None:
    os.write(1, (json.dumps(msg) + "\n").encode())


def main() -> int:
    """The child: configuration as one JSON line on stdin; "ready"/"error" then "stats" lines on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the whole process group: the parent stops us
    raw = b""
    while not raw.endswith(b"\n"):
        chunk = os.read(0, 65536)  # not sys.stdin: its buffer could swallow bytes the loop reads later
        if not chunk:
            return 0  # the parent is gone before configuring us
        raw += chunk
    try:
        cfg = json.loads(raw)
        _die_with_parent(cfg.get("parent_pid"))
        nice = _raise_priority()
        before, after = fd_limits()
        requested = int(cfg["max_connections"])
        effective = effective_max_connections(requested, after)
        listeners, port = listen(cfg["host"], int(cfg["port"]))
    except Exception as e:  # noqa: BLE001 - reported to the parent as its one-line error
        _emit({"type": "error", "message": str(e).splitlines()[0] if str(e) else type(e).__name__})
        return 1
    static = {"port": port, "pid": os.getpid(), "fd_limit_before": before, "fd_limit": after, "nice": nice,
              "max_connections_requested": requested, "max_connections_lowered": effective < requested}
    proxy = Proxy(listeners, cfg["upstream"], bool(cfg["tls"]), effective, int(cfg["max_connections_per_peer"]),
                  float(cfg["handshake_timeout_s"]), control_fd=0, report_fd=1,
                  stats_interval_s=float(cfg.get("stats_interval_s", STATS_INTERVAL_S)), static=static)
    proxy.report("ready")  # blocking: the parent waits for it
    os.set_blocking(1, False)  # later reports never stall the loop (dropped if the parent does not read)
    os.set_blocking(0, False)
    try:
        proxy.run()
    except Exception as e:  # noqa: BLE001 - the parent's on_exit gets the reason
        try:
            os.set_blocking(1, True)
            _emit({"type": "error", "message": f"front door failed: {type(e).__name__}: {e}".splitlines()[0]})
        except OSError:
            pass
        raise
    return 0


# ---------------------------------------------------------------------------------------------------------------
# The parent side.


class FrontDoor:
    """The parent's handle on the front-door child process.

    ``start`` spawns it and returns the bound port; ``stats`` returns its latest counters; ``stop`` ends it.
    ``on_exit(reason)`` is called once, from the monitor thread, if the child exits while not being stopped.
    """

    def __init__(self, host: str, port: int, upstream: str, limits: FrontDoorLimits, tls: bool,
                 on_exit: Callable[[str], None] | None = None) -> None:
        limits.validate()
        if len(os.fsencode(upstream)) > _UNIX_PATH_MAX:
            raise ValueError(f"upstream socket path is longer than {_UNIX_PATH_MAX} bytes: {upstream}")
        self.host = host
        self.requested_port = port
        self.upstream = upstream
        self.limits = limits
        self.tls = tls
        self.on_exit = on_exit
        self.stats_interval_s = STATS_INTERVAL_S  # how often the child reports (tests make it shorter)
        self.port: int | None = None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._monitor: threading.Thread | None = None
        self._ready = threading.Event()
        self._result: tuple[str, str] = ("error", "front door not started")
        self._stats: dict[str, Any] = {}
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._last_error: str | None = None
        self._stopping = False
        self._stopped = False

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None else proc.pid

    def start(self, timeout_s: float = 10.0) -> int:
        """Spawn the child and return the port it listens on. ``OSError`` with one line if it cannot listen (or
        does not start), with nothing left running."""
        if self._monitor is not None:
            raise RuntimeError("FrontDoor.start called twice")
        config = {"host": self.host, "port": self.requested_port, "upstream": self.upstream, "tls": self.tls,
                  "max_connections": self.limits.max_connections,
                  "max_connections_per_peer": self.limits.max_connections_per_peer,
                  "handshake_timeout_s": self.limits.handshake_timeout_s,
                  "stats_interval_s": self.stats_interval_s, "parent_pid": os.getpid()}
        self._monitor = threading.Thread(target=self._run, args=(config,), name="front-door-monitor", daemon=True)
        self._monitor.start()
        if not self._ready.wait(timeout_s):
            self.stop()
            raise OSError(f"cannot start the front door for {format_address(self.host, self.requested_port)}: "
                          f"no answer within {timeout_s:g} s")
        kind, message = self._result
        if kind != "ready":
            self.stop()
            raise OSError(message)
        assert self.port is not None
        return self.port

    def stats(self) -> dict[str, Any]:
        """The child's latest report (empty before ``start``, at most ``stats_interval_s`` old); never blocks.

        Now: ``open`` (connections, in their handshake or proxied), ``handshaking``, ``peers`` (distinct peer IPs).
        Totals since start: ``accepted`` (every connection ``accept`` returned, refused ones included), ``proxied``
        (piped to gRPC), ``refused_per_peer``, ``refused_limit``, ``refused_handshake_timeout``,
        ``refused_bad_preface``, ``closed_in_handshake`` (the client left before its start was complete),
        ``upstream_errors`` (gRPC's socket refused), ``accept_emfile`` and ``accept_errors`` (accept failed; 50 ms
        pause). Fixed: ``port``, ``pid``, ``fd_limit_before``/``fd_limit`` (soft RLIMIT_NOFILE before and after
        raising it), ``max_connections`` (effective), ``max_connections_requested``, ``max_connections_lowered``,
        ``nice`` (the child's niceness after trying -10). Every accepted connection is in exactly one of: a
        refusal counter, ``closed_in_handshake``, ``upstream_errors``, ``proxied``, or ``handshaking``.
        """
        with self._lock:
            return dict(self._stats)

    def alive(self) -> bool:
        proc = self._proc
        return proc is not None and not self._stopped and proc.poll() is None

    def stop(self) -> None:
        """Close the listener and every connection and end the child (closing its stdin ends it at once)."""
        with self._lock:
            if self._stopped:
                return
            self._stopping = self._stopped = True
            proc = self._proc
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        monitor = self._monitor
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(timeout=5.0)

    # -- the monitor thread ---------------------------------------------------------------------------------

    def _run(self, config: dict[str, Any]) -> None:
        # The child is forked from this thread, which lives until the child exits: PR_SET_PDEATHSIG is tied to
        # the forking thread, so forking from a caller's short-lived thread would kill the child with that thread.
        try:
            proc = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, close_fds=True)
        except OSError as e:
            self._result = ("error", f"cannot start the front door process: {e}")
            self._ready.set()
            return
        with self._lock:
            self._proc = proc
            stopping = self._stopping
        if stopping:  # stop() ran while we were forking
            proc.kill()
        drain = threading.Thread(target=self._drain_stderr, args=(proc,), name="front-door-stderr", daemon=True)
        drain.start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(config).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died already: its exit is reported below
        for line in proc.stdout:
            try:
                msg = json.loads(line)
                kind = msg.pop("type")
            except (ValueError, KeyError, AttributeError):
                continue
            if kind in ("stats", "ready"):
                with self._lock:
                    self._stats = msg
                if kind == "ready":
                    self.port = int(msg["port"])
                    self._result = ("ready", "")
                    self._ready.set()
            elif kind == "error":
                self._last_error = str(msg.get("message", ""))
        code = proc.wait()
        drain.join(timeout=1.0)
        proc.stdout.close()
        reason = self._exit_reason(code)
        if not self._ready.is_set():
            self._result = ("error", self._last_error or f"the front door process ended before it started: {reason}")
            self._ready.set()
            return
        with self._lock:
            stopping = self._stopping
            self._stopped = True
        if stopping:
            return  # stop() closes stdin and reaps
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        if self.on_exit is not None:
            self.on_exit(f"the front door process exited unexpectedly ({reason})")

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            text = line.decode(errors="replace").strip()
            if text:
                self._stderr.append(text)
        proc.stderr.close()

    def _exit_reason(self, code: int) -> str:
        if code < 0:
            try:
                what = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                what = f"killed by signal {-code}"
        else:
            what = f"exit code {code}"
        detail = self._last_error or (self._stderr[-1] if self._stderr else "")
        return f"{what}: {detail}" if detail else what


if __name__ == "__main__":
    sys.exit(main())
