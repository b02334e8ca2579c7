"""The robot-side server: a gRPC service beside the controller; the robot itself is driven by its control loop.

Three layers, each in a module of its own:

* **transport** (``robot_rl.real.front_door``): a process of its own owns the public TCP port and hands gRPC only
  connections that sent a valid HTTP/2 (or TLS) start within ``handshake_timeout_s``, at most
  ``max_connections_per_peer`` per peer address and ``max_connections`` in all; gRPC itself listens on a unix socket
  in a private directory. Why a process: a flood of connections exhausts that process's descriptors and CPU, not the
  control loop's, and a peer that is not the attacker can always connect. Both processes raise their open-file
  limit to the hard limit at start and report what they got (``GetStatus.fd_limit``, ``transport``);
* **front door of the calls** (``robot_rl.real.guard.Gate``): token on metadata, per-class slots and worker pools
  (EStop's reserved), the e-stop latched when its headers arrive, bounded body reads;
* **control loop** (``robot_rl.real.control_loop``): the one thread that calls the driver, with explicit states,
  the safety filter, the speed governor and the supervisor, e-stop generations, and no output of its own.

This module wires them, validates every request field (``_Servicer``), encodes camera frames outside the loop, and
reports status.

**Identity.** Every reply carries the server's random ``server_id`` and the ``episode`` (completed resets since
start). A ``Step`` that names another server (restarted under the client) or another episode (reset by someone
else) is refused with ``FAILED_PRECONDITION`` until the client resets.

**Shutdown.** ``stop()`` (SIGTERM and Ctrl-C in ``serve-robot``) first latches the e-stop and has the loop call
``driver.stop()``, then closes the transport and the loop, then disconnects the driver: a robot is never left
moving towards a target when the server goes away.

**Cameras.** A driver that declares cameras (``spec.cameras``) puts one uint8 RGB frame per camera in each
observation; the reply carries them compressed (``image_encoding``: JPEG, or PNG for exact frames) with a size limit
per frame (``max_frame_bytes``) and per observation (``max_observation_bytes``). Frames are checked and encoded by
the gRPC worker that answers the call, after the tick, never by the control loop. A bad frame from the driver
(wrong shape or type, too big) fails that one reply with ``DATA_LOSS`` and a one-line message naming the camera
(counted as ``bad_frame``); the step itself was applied, the robot is not stopped, the server goes on serving.

Status snapshots copy a few counters under a short lock; the timing percentiles are recomputed at most twice a
second by the caller, never by the loop.
"""

from __future__ import annotations

import logging
import os
import resource
import secrets
import shutil
import ssl
import stat
import tempfile
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from .control_loop import HEADER_REASON, CallError, ControlLoop, Pending, Ring
from .guard import (
    ADMISSION,
    CALL_ID,
    TOKEN_ENV,
    Gate,
    GateLimits,
    Refusals,
    check_bindable,
    check_token,
    format_address,
    is_loopback,
)
from .images import ENCODINGS, FrameError, encode_frame
from .output import LogQueue
from .proto import PROTOCOL, pb, pb_grpc
from .robot import Robot
from .safety import SafetyFilter, UnsafeCommand
from .supervisor import Supervisor, SupervisorConfig

log = logging.getLogger(__name__)

__all__ = ["TOKEN_ENV", "RobotServer", "ServerConfig", "StartupError", "raise_fd_limit"]

_TIMING_REFRESH_S = 0.5  # status percentiles are recomputed at most this often
_MAX_SEND_BYTES = 4 * 1024 * 1024  # gRPC's reply limit (the client's default receive limit too)
_MAX_OBSERVATION_BYTES = _MAX_SEND_BYTES - 64 * 1024  # frames of one reply; the rest is a few hundred bytes
_FD_LIMIT_CAP = 1 << 20  # raise the soft open-file limit up to the hard limit, but not beyond this


@dataclass
class ServerConfig:
    """How the server listens and guards the robot."""

    host: str = "127.0.0.1"
    port: int = 50051  # 0 picks a free port (see RobotServer.port)
    token: str | None = None  # shared secret; None only with allow_unauthenticated on loopback
    allow_unauthenticated: bool = False  # explicit opt-in; refused unless host is a loopback address
    allow_plaintext_token: bool = False  # explicit opt-in to a token without TLS off loopback (it crosses in clear)
    watchdog_s: float = 0.5  # no command or heartbeat for this long -> hold, counted as a watchdog trip
    max_message_bytes: int = 64 * 1024  # larger requests are refused by gRPC with RESOURCE_EXHAUSTED
    max_concurrent_calls: int = 8  # calls in flight other than EStop; beyond: RESOURCE_EXHAUSTED, counted
    tls_cert: str | None = None  # PEM server certificate chain; with tls_key: TLS instead of plaintext
    tls_key: str | None = None
    estop_calls: int = 4  # EStop calls in flight: reserved capacity no other call can use
    max_streams_per_connection: int = 8  # HTTP/2 streams one connection may have open
    body_timeout_s: float = 1.0  # a request body must arrive this soon after its headers, or the call is cancelled
    front_door: bool = True  # the transport process in front of gRPC (module docstring); False: gRPC on the port
    max_connections: int = 512  # client connections open at once (front door; gRPC's own cap without it)
    max_connections_per_peer: int = 32  # from one peer address (front door)
    handshake_timeout_s: float = 2.0  # a connection must send a valid HTTP/2 or TLS start this soon, or is closed
    keepalive_s: float = 10.0  # ping idle connections this often; close them if no answer in keepalive_timeout_s
    keepalive_timeout_s: float = 5.0
    max_connection_idle_s: float = 0.0  # close connections without calls for this long; 0: never (an operator's
    # idle connection is its e-stop path; dead peers are found by keepalive)
    max_connection_age_s: float = 0.0  # recycle every connection after this long; 0: never
    estop_ack_timeout_s: float = 1.0  # EStop answers DEADLINE_EXCEEDED if the driver has not acknowledged by then
    restop_interval_s: float = 0.2  # while latched, driver.stop() again at most this often (repeated EStops)
    max_reason_chars: int = 200  # e-stop reasons are cut to this length (and escaped) before logging
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)
    speed_governor: bool = True  # scale commands so that the measured hand speed stays within the limit
    reset_speed_fraction: float = 0.5  # reset motions move at this fraction of the step limit
    reset_tolerance_m: float = 0.003  # a reset motion is done when the hand is this close to the start position
    control_priority: int = 10  # SCHED_FIFO priority the control thread asks for (0: do not ask)
    image_encoding: str = "jpeg"  # camera frames on the wire: "jpeg" or "png" (lossless); drivers without cameras
    # send no frames at all
    jpeg_quality: int = 90  # 1..95
    max_frame_bytes: int = 256 * 1024  # one encoded frame above this fails its reply (DATA_LOSS, "bad_frame")
    max_observation_bytes: int = 1024 * 1024  # all frames of one observation together

    def validate(self) -> None:
        if not self.token and not self.allow_unauthenticated:
            raise ValueError(f"no token: set {TOKEN_ENV} or pass token_file= (or allow_unauthenticated=true, "
                             "loopback only)")
        if not self.token and not is_loopback(self.host):
            raise ValueError(f"refusing to serve without a token on the non-loopback address {self.host!r}")
        check_token(self.token, self.host)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both tls_cert and tls_key")
        if self.token and not self.tls_cert and not is_loopback(self.host) and not self.allow_plaintext_token:
            raise ValueError(f"refusing to send the token in clear on {self.host}: anyone on the network who sees it "
                             "can clear the e-stop and drive the robot; give tls_cert= and tls_key= (TLS), or "
                             "allow_plaintext_token=true on a network you trust")
        if self.watchdog_s <= 0:
            raise ValueError(f"watchdog_s must be > 0, got {self.watchdog_s}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        for name in ("max_streams_per_connection", "max_reason_chars", "max_message_bytes", "max_connections",
                     "max_connections_per_peer"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("keepalive_s", "keepalive_timeout_s", "estop_ack_timeout_s", "reset_tolerance_m",
                     "handshake_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("max_connection_idle_s", "max_connection_age_s", "restop_interval_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 (0: off), got {getattr(self, name)}")
        if self.image_encoding not in ENCODINGS:
            raise ValueError(f"image_encoding must be one of {', '.join(ENCODINGS)}, got {self.image_encoding!r}")
        if not 1 <= self.jpeg_quality <= 95:
            raise ValueError(f"jpeg_quality must be in 1..95, got {self.jpeg_quality}")
        if not 1 <= self.max_frame_bytes <= self.max_observation_bytes <= _MAX_OBSERVATION_BYTES:
            raise ValueError(f"need 1 <= max_frame_bytes <= max_observation_bytes <= {_MAX_OBSERVATION_BYTES} "
                             f"(gRPC's reply limit less room for the rest), got {self.max_frame_bytes} and "
                             f"{self.max_observation_bytes}")
        if not 0 < self.reset_speed_fraction <= 1:
            raise ValueError(f"reset_speed_fraction must be in (0, 1], got {self.reset_speed_fraction}")
        self.gate_limits().validate()
        self.supervisor.validate()

    def warnings(self) -> list[str]:
        """Weak but accepted settings, one line each (``serve-robot`` prints them at start)."""
        out = []
        if self.tls_key:
            try:
                mode = os.stat(self.tls_key).st_mode
            except OSError:
                mode = 0
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                out.append(f"the TLS key {self.tls_key} is readable by other users; chmod 600 it")
        if self.token and not self.tls_cert and not is_loopback(self.host):
            out.append(f"the token crosses the network in clear on {self.host} (allow_plaintext_token=true)")
        return out

    def gate_limits(self) -> GateLimits:
        return GateLimits(bulk_calls=self.max_concurrent_calls, estop_calls=self.estop_calls,
                          body_timeout_s=self.body_timeout_s)

    def grpc_options(self) -> list[tuple[str, int]]:
        """gRPC server options: no port sharing, message, stream and metadata limits, handshake deadline,
        connection cap, keepalive; idle and age limits only when set."""
        ms = lambda s: int(s * 1000)  # noqa: E731
        options = [
            ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", _MAX_SEND_BYTES),
            ("grpc.max_metadata_size", 16 * 1024),
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            ("grpc.server_handshake_timeout_ms", ms(self.handshake_timeout_s)),
            # Behind the front door every connection is one of its own, so the same cap; without it this is the
            # only cap (enforced before the handshake), set below the descriptor limit (raise_fd_limit).
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.keepalive_time_ms", ms(self.keepalive_s)),
            ("grpc.keepalive_timeout_ms", ms(self.keepalive_timeout_s)),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),  # clients pinging faster get GOAWAY
            ("grpc.http2.max_ping_strikes", 2),
        ]
        if self.max_connection_idle_s > 0:
            options.append(("grpc.max_connection_idle_ms", ms(self.max_connection_idle_s)))
        if self.max_connection_age_s > 0:
            options += [("grpc.max_connection_age_ms", ms(self.max_connection_age_s)),
                        ("grpc.max_connection_age_grace_ms", 10_000)]
        return options


class StartupError(OSError):
    """The server could not start; nothing it started is left running or connected. One-line message."""


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's soft open-file limit to its hard limit (at most 2**20). Returns (before, after).

    Why: each connection costs a descriptor, and a common soft limit of 1024 was filled by ~1,100 idle connections
    that never sent a byte, after which the server accepted nothing, an operator's EStop included."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _FD_LIMIT_CAP if hard == resource.RLIM_INFINITY else min(hard, _FD_LIMIT_CAP)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (OSError, ValueError):
            pass
    after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft, after


def check_tls_files(cert: str, key: str) -> tuple[bytes, bytes]:
    """The PEM certificate chain and key, read and checked to belong together; ``OSError`` with one line naming
    the file and the problem otherwise (gRPC would report any of these only as a failure to bind)."""
    out = []
    for what, path in (("certificate", cert), ("key", key)):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OSError(f"cannot read the TLS {what} {path}: {e.strerror or e}") from None
        if b"-----BEGIN" not in data:
            raise OSError(f"the TLS {what} {path} is not PEM (no -----BEGIN line)")
        out.append(data)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        why = {"KEY_VALUES_MISMATCH": "the key does not belong to the certificate"}.get(e.reason or "", None)
        raise OSError(f"TLS certificate {cert} / key {key}: {why or (e.reason or str(e)).lower().replace('_', ' ')}"
                      ) from None
    return out[0], out[1]


class RobotServer:
    """Serves one ``Robot``. ``start()`` binds the port, connects the driver and starts the control loop, gRPC and
    the front door (on any failure, undoes what it did and raises ``StartupError``); ``stop()`` stops the robot,
    then the transport and the loop, then disconnects the driver."""

    def __init__(self, robot: Robot, config: ServerConfig) -> None:
        config.validate()
        self.robot, self.config = robot, config
        self.spec = robot.spec
        self.period = 1.0 / self.spec.control_hz
        self.server_id = secrets.token_hex(8)
        self.safety = SafetyFilter(self.spec)
        self.supervisor = Supervisor(self.spec, config.supervisor)
        self.refusals = Refusals()
        self.events = LogQueue(log)
        governor = None
        if config.speed_governor and self.spec.cartesian is not None:
            from .governor import SpeedGovernor

            governor = SpeedGovernor(self.spec)
        self.loop = ControlLoop(robot, config, self.safety, self.supervisor, self.refusals, self.events, governor)
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._gate: Gate | None = None
        self._door: Any = None  # front_door.FrontDoor
        self._socket_dir: str | None = None
        self._started = self._connected = self._stopped = False
        self.port = 0
        self.fd_limit = (0, 0)
        self._encode = Ring()  # s to check and encode one reply's frames (gRPC workers)
        self._encode_lock = threading.Lock()  # workers, unlike the loop, may write concurrently
        self._timing_lock = threading.Lock()
        self._timing_at = -1.0
        self._timing: dict[str, float] = {}

    @property
    def loop_error(self) -> str:
        return self.loop.loop_error

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> int:
        """Start serving; returns the bound port. Raises ``StartupError`` (one line) and leaves nothing running."""
        if self._started:
            raise RuntimeError("RobotServer.start() called twice")
        self._started = True
        c = self.config
        address = format_address(c.host, c.port)
        try:
            self.fd_limit = raise_fd_limit()
            creds = grpc.ssl_server_credentials([check_tls_files(c.tls_cert, c.tls_key)[::-1]]) \
                if c.tls_cert and c.tls_key else None
            check_bindable(c.host, c.port)
            loop = self.loop
            self._gate = Gate(c.token, c.gate_limits(), self._estop_from_headers, self.refusals,
                              on_clear=loop.estop_generation, estop_overflow=self._estop_overflow)
            # Handlers run on the Gate's per-class pools; this one serves nothing of ours (gRPC wants a default).
            self._executor = futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="bridge-rpc")
            self._server = grpc.server(self._executor, interceptors=[self._gate], options=c.grpc_options(),
                                       maximum_concurrent_rpcs=None)
            pb_grpc.add_RobotBridgeServicer_to_server(_Servicer(self), self._server)
            if c.front_door:
                self._socket_dir = tempfile.mkdtemp(prefix="robot-rl-bridge-")  # 0700: only this user connects
                upstream = os.path.join(self._socket_dir, "grpc.sock")
                grpc_address = f"unix:{upstream}"
            else:
                grpc_address = address
            try:
                bound = self._server.add_secure_port(grpc_address, creds) if creds is not None \
                    else self._server.add_insecure_port(grpc_address)
            except RuntimeError:
                bound = 0
            if not c.front_door:
                if bound == 0:
                    raise OSError(f"cannot listen on {address}: gRPC could not bind it")
                self.port = bound
            else:
                from .front_door import FrontDoor, FrontDoorLimits

                self._door = FrontDoor(c.host, c.port, upstream,
                                       FrontDoorLimits(c.max_connections, c.max_connections_per_peer,
                                                       c.handshake_timeout_s),
                                       tls=creds is not None, on_exit=self._front_door_died)
                self.port = self._door.start()
            self.robot.connect()
            self._connected = True
            obs = self.robot.observe()
            if np.asarray(obs.state).shape != (self.spec.state_dim,) or not np.all(np.isfinite(obs.state)):
                raise RuntimeError("the driver's first observation is not a finite state of the spec's size")
            try:
                self.spec.check_images(obs.images)
                self._encode_images(obs.images)
            except ValueError as e:
                raise RuntimeError(f"the driver's first observation does not match its cameras: {e}") from None
            loop.start(obs)
            self._server.start()
        except BaseException as e:
            self._shutdown(grace_s=0.0)
            if isinstance(e, Exception):
                message = " ".join(f"{e}".split()) or type(e).__name__
                if not isinstance(e, OSError):
                    message = f"could not start serving {self.spec.name}: {type(e).__name__}: {message}"
                raise StartupError(message) from e
            raise
        return self.port

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop the robot (``driver.stop()`` through the loop), then gRPC, the front door and the loop; disconnect
        the driver. Safe to call twice."""
        self._shutdown(grace_s)

    def _front_door_died(self, reason: str) -> None:
        """The transport process ended unexpectedly: nobody can reach the robot, so stop it."""
        if not self._stopped:
            self.loop.request_estop(f"transport: the front door process ended ({reason})")
            self.events.error("the front door process ended (%s); e-stop latched; restart serve-robot", reason)

    def _shutdown(self, grace_s: float) -> None:
        self._stopped = True
        loop = self.loop
        stopped = False
        if loop.running and not loop.loop_error:
            ok, error = loop.wait_stopped(loop.request_estop("server shutting down"), 2.0)
            stopped = ok and error is None
        if self._door is not None:
            self._door.stop()
            self._door = None
        if self._server is not None:
            self._server.stop(grace_s).wait(timeout=grace_s + 2.0)
            self._server = None
        closed = loop.close()
        if self._gate is not None:
            self._gate.close()
            self._gate = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        if self._connected:
            if not closed:  # the loop is inside a driver call: a second thread must not call the driver
                self.events.error("the control loop did not stop within 5 s (stuck in a driver call); driver left as is")
            else:
                self._connected = False
                try:
                    if not stopped and not loop.loop_error and loop.counters["ticks"] > 0:
                        self.robot.stop()  # the loop's stop failed or timed out: once more, from here
                finally:
                    self.robot.disconnect()
        self.events.close()

    def wait(self) -> None:
        """Block until ``stop()`` (or Ctrl-C in the caller)."""
        while not self._stopped:
            time.sleep(0.5)

    def __enter__(self) -> RobotServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- called by gRPC workers (and the polling thread: _estop_from_headers) ------------------------------------
    def _estop_from_headers(self, call_id: int) -> int:
        return self.loop.request_estop(HEADER_REASON, owner=call_id)

    def _estop_overflow(self, generation: int, context: grpc.ServicerContext) -> pb.Status:
        """An EStop beyond its slots (``Gate``): latched at its headers; answered like one, reason unread."""
        return _Servicer(self).answer_estop(generation, context)

    def submit(self, item: Pending, timeout_s: float) -> pb.StepReply:
        """``ControlLoop.submit``, then the reply's identity and camera frames (encoded here, by the worker)."""
        item = self.loop.submit(item, timeout_s)
        reply = item.reply
        assert reply is not None
        reply.server_id = self.server_id
        if self.spec.cameras:
            try:
                t0 = time.perf_counter()
                reply.observation.images.extend(self._encode_images(item.images or {}))
                with self._encode_lock:
                    self._encode.append(time.perf_counter() - t0)
            except FrameError as e:
                self.refusals.add("bad_frame")
                self.events.warning("bad camera frame from the driver: %s", str(e)[:300])
                applied = "its action was applied" if item.kind == "step" else "it was done"
                raise CallError(grpc.StatusCode.DATA_LOSS, f"camera frame: {e}; {applied} (tick {reply.tick}) "
                                                           "but its observation cannot be sent") from None
        return reply

    def _encode_images(self, images: dict[str, np.ndarray]) -> list[pb.Image]:
        """The observation's frames, checked against the spec and compressed, in ``spec.cameras`` order. Raises
        ``FrameError`` (one line naming the camera): wrong shape or type, a frame or the total over its limit."""
        c = self.config
        try:
            self.spec.check_images(images)
        except ValueError as e:
            raise FrameError(str(e)) from None
        out, total = [], 0
        for cam in self.spec.cameras:
            data = encode_frame(cam.name, images[cam.name], c.image_encoding, quality=c.jpeg_quality,
                                max_bytes=c.max_frame_bytes)
            total += len(data)
            if total > c.max_observation_bytes:
                raise FrameError(f"camera {cam.name!r}: the observation's frames exceed {c.max_observation_bytes:,} "
                                 "bytes together (max_observation_bytes)")
            out.append(pb.Image(camera=cam.name, data=data))
        return out

    def transport_line(self) -> str:
        """One line: the transport's limits and what it got (the serve-robot banner, ``GetStatus.transport``)."""
        c = self.config
        before, after = self.fd_limit
        fds = f"open files {after:,}" + (f" (raised from {before:,})" if after > before else "")
        if self._door is None:
            return f"gRPC on the port, at most {c.max_connections} connections, handshake {c.handshake_timeout_s:g} s, {fds}"
        d = self._door.stats()
        door_fds = d.get("fd_limit", 0)
        return (f"front door pid {self._door.pid}: at most {d.get('max_connections', c.max_connections)} connections, "
                f"{c.max_connections_per_peer} per peer, handshake {c.handshake_timeout_s:g} s, its open files "
                f"{door_fds:,}; server {fds}")

    def status(self) -> pb.Status:
        """A snapshot: counters copied under a short lock, timing percentiles from a cache (never blocks the loop)."""
        now = time.monotonic()
        snap = self.loop.snapshot()
        c = snap["counters"]
        rejected, clamped = self.safety.counts()
        if c.get("governed"):
            clamped["governor"] = c["governed"]
        for k, v in self.refusals.snapshot().items():
            rejected[k] = rejected.get(k, 0) + v
        connections = 0
        if self._door is not None:
            d = self._door.stats()
            connections = int(d.get("open", 0))
            for key in ("refused_per_peer", "refused_limit", "refused_handshake_timeout", "refused_bad_preface",
                        "evicted_in_handshake", "accept_emfile", "upstream_errors"):
                if d.get(key):
                    rejected[f"connection_{key.removeprefix('refused_')}"] = int(d[key])
        dropped = self.events.dropped
        if dropped:
            rejected["log_dropped"] = dropped
        t = self._timing_summary()
        age = now - snap["last_tick"]
        error = snap["loop_error"]
        health = "dead" if error else ("stalled" if age > max(5 * self.period, 0.25) else "ok")
        return pb.Status(
            state=snap["state"], ticks=c["ticks"], commands=c["commands"], holds=c["holds"],
            watchdog_trips=c["watchdog_trips"], estops=c["estops"], rejected=rejected, clamped=clamped,
            jitter_p50_s=t["jitter_p50"], jitter_p99_s=t["jitter_p99"], jitter_max_s=t["jitter_max"],
            overruns=c["overruns"], tick_work_p99_s=t["work_p99"], queue_p50_s=t["queue_p50"],
            queue_p99_s=t["queue_p99"], estop_reason=snap["estop_reason"], health=health, last_tick_age_s=age,
            breaches=snap["breaches"], hold_reason=snap["hold_reason"], estop_ack_s=self.loop.estop_ack_s,
            stops=c["stops"], resets=c["resets"], loop_error=error, loop_priority=self.loop.loop_priority,
            server_id=self.server_id, episode=snap["episode"], fd_limit=self.fd_limit[1], connections=connections,
            transport=self.transport_line(), log_dropped=dropped,
        )

    def _timing_summary(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._timing_at > _TIMING_REFRESH_S and self._timing_lock.acquire(blocking=False):
            try:
                loop = self.loop
                jitter, work, queue = loop.jitter.values(), loop.work.values(), loop.queue.values()
                pct = lambda a, q: float(np.percentile(a, q)) if len(a) else 0.0  # noqa: E731
                self._timing = {
                    "jitter_p50": pct(jitter, 50), "jitter_p99": pct(jitter, 99),
                    "jitter_max": float(jitter.max()) if len(jitter) else 0.0, "work_p99": pct(work, 99),
                    "queue_p50": pct(queue, 50), "queue_p99": pct(queue, 99),
                }
                self._timing_at = now
            finally:
                self._timing_lock.release()
        return self._timing or dict.fromkeys(
            ("jitter_p50", "jitter_p99", "jitter_max", "work_p99", "queue_p50", "queue_p99"), 0.0)

    def timing_mark(self) -> dict[str, Any]:
        """A mark for ``timing_since``: sample counts and counters now (benchmarks compare stretches of time)."""
        loop = self.loop
        return {"jitter": loop.jitter.count, "work": loop.work.count, "queue": loop.queue.count,
                "encode": self._encode.count, "counters": loop.snapshot()["counters"],
                "refusals": self.refusals.snapshot()}

    def timing_since(self, mark: dict[str, Any]) -> dict[str, Any]:
        """Raw timing samples (s) and counter increments since ``mark``."""
        now = self.timing_mark()
        loop = self.loop
        return {
            "jitter": loop.jitter.since(mark["jitter"]), "work": loop.work.since(mark["work"]),
            "queue": loop.queue.since(mark["queue"]), "encode": self._encode.since(mark["encode"]),
            "counters": {k: v - mark["counters"].get(k, 0) for k, v in now["counters"].items()},
            "refusals": {k: v - mark["refusals"].get(k, 0) for k, v in now["refusals"].items()
                         if v - mark["refusals"].get(k, 0)},
        }

    def spec_message(self) -> pb.Spec:
        s = self.spec
        msg = pb.Spec(
            name=s.name, state_dim=s.state_dim, action_dim=s.action_dim, control_hz=s.control_hz,
            action_low=s.action_low, action_high=s.action_high, time_limit=s.time_limit or 0,
            watchdog_s=self.config.watchdog_s, protocol=PROTOCOL,
            mirror_state_sign=s.mirror_state_sign, mirror_action_sign=s.mirror_action_sign,
            mirror_cameras=s.mirror_cameras, server_id=self.server_id,
        )
        if s.cameras:
            msg.cameras.extend(pb.CameraSpec(name=c.name, height=c.height, width=c.width) for c in s.cameras)
            msg.image_encoding, msg.max_frame_bytes = self.config.image_encoding, self.config.max_frame_bytes
        if s.cartesian is not None:
            c = s.cartesian
            msg.cartesian = True
            msg.workspace_low.extend(c.workspace_low)
            msg.workspace_high.extend(c.workspace_high)
            msg.metres_per_unit, msg.max_step_m, msg.max_speed_mps = c.metres_per_unit, c.max_step_m, c.max_speed_mps
        return msg


class _Servicer(pb_grpc.RobotBridgeServicer):
    """The RPC handlers: validate every field, then hand the request to the server (see ``RobotServer``)."""

    def __init__(self, server: RobotServer) -> None:
        self.s = server
        self.loop = server.loop

    def _deadline(self, context: grpc.ServicerContext, cap: float) -> float:
        remaining = context.time_remaining()
        return cap if remaining is None else max(0.0, min(remaining, cap))

    def _answer(self, context: grpc.ServicerContext, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except CallError as e:
            context.abort(e.code, e.details)
            raise  # unreachable: abort raises

    def _invalid(self, context: grpc.ServicerContext, details: str) -> None:
        self.s.refusals.add("invalid_request")
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, details)

    def GetSpec(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Spec:
        self._answer(context, self.loop.check_alive)
        return self.s.spec_message()

    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> pb.StepReply:
        self._answer(context, self.loop.check_alive)
        if request.seed < 0:
            self._invalid(context, f"seed must be >= 0, got {request.seed}")
        if not request.has_seed and request.seed != 0:
            self._invalid(context, f"seed {request.seed} given without has_seed")
        self.loop.touch()
        item = Pending("reset", seed=int(request.seed) if request.has_seed else None)
        # A reset is a motion at limited speed (seconds on hardware): its wait is the client's deadline, up to 60 s.
        return self._answer(context, self.s.submit, item, self._deadline(context, 60.0))

    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.StepReply:
        self._answer(context, self.loop.check_alive)
        self.loop.touch()
        # A call without a deadline still gets a bounded wait: a few periods is plenty for one tick.
        cap = max(1.0, 10 * self.s.period)
        if request.hold:
            if len(request.action):
                self._invalid(context, "a hold request must not carry an action")
            return self._answer(context, self.s.submit, Pending("hold", seq=request.seq), self._deadline(context, cap))
        if request.server_id and request.server_id != self.s.server_id:
            self.s.refusals.add("server_changed")
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"episode changed: this robot server started after this client's episode (server "
                          f"{request.server_id}, now {self.s.server_id}: restarted); not executed: reset before "
                          "stepping")
        if not request.has_episode and request.episode != 0:
            self._invalid(context, f"episode {request.episode} given without has_episode")
        try:
            action = self.s.safety.validate(np.asarray(request.action, dtype=np.float64))
        except UnsafeCommand as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        item = Pending("step", action=action, seq=request.seq,
                       episode=int(request.episode) if request.has_episode else None)
        return self._answer(context, self.s.submit, item, self._deadline(context, cap))

    def Heartbeat(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self._answer(context, self.loop.check_alive)
        self.loop.touch()
        return pb.Status(state=self.loop.state.value)  # cheap: a heartbeat must not cost a status snapshot

    def EStop(self, request: pb.EStopRequest, context: grpc.ServicerContext) -> pb.Status:
        generation = self.loop.estop(request.reason, CALL_ID.get(), ADMISSION.get() or 0)
        return self.answer_estop(generation, context)

    def answer_estop(self, generation: int, context: grpc.ServicerContext) -> pb.Status:
        """Wait for the driver's acknowledgement of stop request ``generation`` and answer (errors say what to do)."""
        self._answer(context, self.loop.check_alive)
        ok, error = self.loop.wait_stopped(generation, self.s.config.estop_ack_timeout_s)
        self._answer(context, self.loop.check_alive)
        if not ok:
            self.s.refusals.add("estop_unacknowledged")
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                          f"e-stop latched, but the driver has not acknowledged the stop within "
                          f"{self.s.config.estop_ack_timeout_s:g} s (control loop busy in a driver call?); use the "
                          "robot's own emergency stop")
        if error is not None:
            context.abort(grpc.StatusCode.INTERNAL, f"e-stop latched, but the driver's stop() failed ({error}); use "
                                                    "the robot's own emergency stop")
        return self.s.status()

    def ClearEStop(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self._answer(context, self.loop.clear_estop, ADMISSION.get())
        return self.s.status()

    def GetStatus(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self._answer(context, self.loop.check_alive)
        return self.s.status()
