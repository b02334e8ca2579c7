"""The robot-side server: a gRPC service beside the controller that owns the robot's control loop and its safety.

One thread, the **control loop**, talks to the driver, at a fixed rate (``spec.control_hz``). Each tick it

* applies the command queued since the last tick, after the safety filter (``robot_rl.real.safety``) has clamped it against
  the state measured *at this tick*; or, when none was queued, calls ``driver.hold()`` (so a client that stops
  talking can never leave the arm moving);
* hands the measured state to the **supervisor** (``robot_rl.real.supervisor``): a soft breach of the envelope, speed or
  tracking limits holds the robot (commands refused with ``UNAVAILABLE`` until it settles), a hard one stops the
  driver and latches the e-stop;
* trips the **watchdog** when neither a command nor a heartbeat has arrived for ``watchdog_s`` (state ``holding``;
  the next command resumes), and counts it;
* runs a **reset** as a motion: the hand is driven to the driver's ``reset_position`` within the speed limits,
  one tick at a time under the supervisor, and only then is the driver reset;
* measures its own timing: jitter (tick start minus its schedule), work per tick, overruns, queueing delay.

**E-stop.** An authenticated ``EStop`` latches when its headers arrive (``robot_rl.real.guard``), fails any queued command
or reset at once (error status, never OK), and wakes the control loop, which calls ``driver.stop()`` immediately,
between ticks; the call is answered after ``stop()`` returned. Later ticks hold until ``ClearEStop``. The first
latching reason is kept, escaped and cut to ``max_reason_chars``.

**Health.** Driver exceptions are driver faults (stop, latch, ``INTERNAL`` to the caller). Anything else that
escapes a tick is a bug that ends the loop: the driver is stopped, and from then on every RPC answers
``UNAVAILABLE`` with the reason. ``GetStatus`` reports the loop's health and the age of its last tick.

**Priority.** The control thread asks the OS for real-time scheduling (``control_priority``; granted to root or
with CAP_SYS_NICE, else nice -10 if allowed) and reports what it got (``GetStatus.loop_priority``).

**Cameras.** A driver that declares cameras (``spec.cameras``) puts one uint8 RGB frame per camera in each
observation; the reply carries them compressed (``image_encoding``: JPEG, or PNG for exact frames) with a size limit
per frame (``max_frame_bytes``) and per observation (``max_observation_bytes``). Frames are checked and encoded by
the gRPC worker that answers the call, after the tick, never by the control loop (whose timing, watchdog and e-stop
are the same with and without cameras). A bad frame from the driver (wrong shape or type, too big) fails that one
reply with ``DATA_LOSS`` and a one-line message naming the camera (counted as ``bad_frame``); the step itself was
applied, the robot is not stopped, the server goes on serving. Without cameras a reply has no image bytes at all.

gRPC workers only validate requests and hand them to the loop; every wait on their side has a deadline. Who may
call and how many calls at once is ``robot_rl.real.guard.Gate``'s job (token on metadata, reserved EStop capacity, bounded
body reads). Status snapshots copy a few counters under a short lock; the timing percentiles are recomputed at most
twice a second by the caller, never by the loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from .guard import (
    CALL_ID,
    TOKEN_ENV,
    Gate,
    GateLimits,
    Refusals,
    check_bindable,
    format_address,
    is_loopback,
    safe_text,
)
from .images import ENCODINGS, FrameError, encode_frame
from .proto import PROTOCOL, pb, pb_grpc
from .robot import Robot, RobotObservation
from .safety import SafetyFilter, UnsafeCommand
from .supervisor import Breach, Supervisor, SupervisorConfig

log = logging.getLogger(__name__)

__all__ = ["TOKEN_ENV", "RobotServer", "ServerConfig", "StartupError"]

_TIMING_WINDOW = 30_000  # samples kept for percentiles (10 minutes at 50 Hz)
_TIMING_REFRESH_S = 0.5  # status percentiles are recomputed at most this often
_HEADER_REASON = "EStop call (reason not received yet)"
_MAX_SEND_BYTES = 4 * 1024 * 1024  # gRPC's reply limit (the client's default receive limit too)
_MAX_OBSERVATION_BYTES = _MAX_SEND_BYTES - 64 * 1024  # frames of one reply; the rest is a few hundred bytes


@dataclass
class ServerConfig:
    """How the server listens and guards the robot."""

    host: str = "127.0.0.1"
    port: int = 50051  # 0 picks a free port (see RobotServer.port)
    token: str | None = None  # shared secret; None only with allow_unauthenticated on loopback
    allow_unauthenticated: bool = False  # explicit opt-in; refused unless host is a loopback address
    watchdog_s: float = 0.5  # no command or heartbeat for this long -> hold, counted as a watchdog trip
    max_message_bytes: int = 64 * 1024  # larger requests are refused by gRPC with RESOURCE_EXHAUSTED
    max_concurrent_calls: int = 8  # calls in flight other than EStop; beyond: RESOURCE_EXHAUSTED, counted
    tls_cert: str | None = None  # PEM server certificate chain; with tls_key: TLS instead of plaintext
    tls_key: str | None = None
    estop_calls: int = 4  # EStop calls in flight: reserved capacity no other call can use
    max_streams_per_connection: int = 8  # HTTP/2 streams one connection may have open
    body_timeout_s: float = 1.0  # a request body must arrive this soon after its headers, or the call is cancelled
    keepalive_s: float = 10.0  # ping idle connections this often; close them if no answer in keepalive_timeout_s
    keepalive_timeout_s: float = 5.0
    max_connection_idle_s: float = 300.0  # close connections without calls for this long (clients reconnect)
    max_connection_age_s: float = 1800.0  # recycle every connection after this long (calls get 10 s to finish)
    estop_ack_timeout_s: float = 1.0  # EStop answers DEADLINE_EXCEEDED if the driver has not acknowledged by then
    max_reason_chars: int = 200  # e-stop reasons are cut to this length (and escaped) before logging
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)
    reset_speed_fraction: float = 0.5  # reset motions move at this fraction of the step limit
    reset_tolerance_m: float = 0.003  # a reset motion is done when the hand is this close to the start position
    control_priority: int = 10  # SCHED_FIFO priority the control thread asks for (0: do not ask); see _prioritise
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
        if self.watchdog_s <= 0:
            raise ValueError(f"watchdog_s must be > 0, got {self.watchdog_s}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both tls_cert and tls_key")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        for name in ("max_streams_per_connection", "max_reason_chars", "max_message_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("keepalive_s", "keepalive_timeout_s", "max_connection_idle_s", "max_connection_age_s",
                     "estop_ack_timeout_s", "reset_tolerance_m"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
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

    def gate_limits(self) -> GateLimits:
        return GateLimits(bulk_calls=self.max_concurrent_calls, estop_calls=self.estop_calls,
                          body_timeout_s=self.body_timeout_s)

    def grpc_options(self) -> list[tuple[str, int]]:
        """gRPC server options: no port sharing, message, stream and metadata limits, keepalive, idle and age."""
        ms = lambda s: int(s * 1000)  # noqa: E731
        return [
            ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", _MAX_SEND_BYTES),
            ("grpc.max_metadata_size", 16 * 1024),
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            ("grpc.keepalive_time_ms", ms(self.keepalive_s)),
            ("grpc.keepalive_timeout_ms", ms(self.keepalive_timeout_s)),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),  # clients pinging faster get GOAWAY
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.max_connection_idle_ms", ms(self.max_connection_idle_s)),
            ("grpc.max_connection_age_ms", ms(self.max_connection_age_s)),
            ("grpc.max_connection_age_grace_ms", 10_000),
        ]


class StartupError(OSError):
    """The server could not start; nothing it started is left running or connected. One-line message."""


class _CallError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _DriverFault(Exception):
    """An exception raised by the driver (as opposed to a bug in the server)."""


# The answer to a command withdrawn from the queue because its caller's deadline passed before any tick took it.
_NOT_EXECUTED = (grpc.StatusCode.DEADLINE_EXCEEDED, "no control tick before the deadline; not executed", "deadline")


class _Pending:
    """A request waiting for its control tick."""

    __slots__ = ("kind", "action", "seed", "seq", "arrived", "expires", "done", "reply", "error", "images")

    def __init__(self, kind: str, action: np.ndarray | None = None, seed: int | None = None, seq: int = 0):
        self.kind, self.action, self.seed, self.seq = kind, action, seed, seq
        self.arrived = time.monotonic()
        self.expires = float("inf")  # when its caller stops waiting (set by `submit`)
        self.done = threading.Event()
        self.reply: pb.StepReply | None = None
        self.error: tuple[grpc.StatusCode, str, str] | None = None  # code, details, refusal counter
        self.images: dict[str, np.ndarray] | None = None  # the reply's frames, encoded by the waiting worker

    def fail(self, code: grpc.StatusCode, details: str, reason: str) -> None:
        """Answer with an error (first answer wins) and release the waiting call."""
        if not self.done.is_set():
            self.error = (code, details, reason)
            self.done.set()


class _ResetJob:
    """A reset in progress: the hand is on its way to ``target`` (the driver's reset position)."""

    __slots__ = ("item", "target", "cancelled")

    def __init__(self, item: _Pending, target: np.ndarray) -> None:
        self.item, self.target, self.cancelled = item, target, False


class _Ring:
    """Fixed-size sample window written by the control loop only; readers copy it without a lock."""

    def __init__(self, size: int) -> None:
        self._a = np.zeros(size)
        self._n = 0

    def append(self, x: float) -> None:
        self._a[self._n % len(self._a)] = x
        self._n += 1

    def values(self) -> np.ndarray:
        return self._a[: min(self._n, len(self._a))].copy()

    @property
    def count(self) -> int:
        return self._n

    def since(self, n0: int) -> np.ndarray:
        """The samples appended since ``count`` was ``n0`` (the most recent window's worth at most)."""
        n, size = self._n, len(self._a)
        idx = np.arange(max(n0, n - size), n) % size
        return self._a[idx].copy()


class RobotServer:
    """Serves one ``Robot``. ``start()`` binds the port, connects the driver and starts the control loop and gRPC
    (on any failure, undoes what it did and raises ``StartupError``); ``stop()`` holds the robot, stops both and
    disconnects the driver."""

    def __init__(self, robot: Robot, config: ServerConfig) -> None:
        config.validate()
        self.robot, self.config = robot, config
        self.spec = robot.spec
        self.period = 1.0 / self.spec.control_hz
        self.safety = SafetyFilter(self.spec)
        self.supervisor = Supervisor(self.spec, config.supervisor)
        self.refusals = Refusals()
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._current: _Pending | None = None
        self._reset_job: _ResetJob | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._gate: Gate | None = None
        self._started = self._connected = False
        self.port = 0

        self.state = "running"
        self.estop_reason = ""
        self.hold_reason = ""
        self.loop_error = ""
        self.loop_priority = ""
        self._latch_owner: int | None = None
        self._hold_since = 0.0
        self._clean_ticks = 0
        self._rebase_pending = False
        self._last_contact = time.monotonic()
        self._last_tick = time.monotonic()
        self._obs: RobotObservation | None = None
        action_dim = self.spec.action_dim
        self._rest_action = np.zeros(action_dim)
        self._rest_action[3:] = np.asarray(self.spec.action_low, np.float64)[3:]  # gripper open on both drivers
        self._last_applied = self._rest_action.copy()
        self.counters = {"ticks": 0, "commands": 0, "holds": 0, "watchdog_trips": 0, "estops": 0, "overruns": 0,
                         "stops": 0, "resets": 0}
        self.breaches: dict[str, int] = {}

        # E-stop requests and the driver's acknowledgements (generation numbers: every request gets one).
        self._ack = threading.Condition()
        self._stop_requested = 0
        self._stop_done = 0
        self._stop_error: str | None = None
        self._stop_requested_at = 0.0
        self._estop_ack_s = 0.0
        self._dead = False

        self._jitter = _Ring(_TIMING_WINDOW)
        self._work = _Ring(_TIMING_WINDOW)
        self._queue = _Ring(_TIMING_WINDOW)
        self._encode = _Ring(_TIMING_WINDOW)  # s to check and encode one reply's frames (gRPC workers)
        self._encode_lock = threading.Lock()  # workers, unlike the loop, may write concurrently
        self._timing_lock = threading.Lock()
        self._timing_at = -1.0
        self._timing: dict[str, float] = {}

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> int:
        """Start serving; returns the bound port. Raises ``StartupError`` (one line) and leaves nothing running."""
        if self._started:
            raise RuntimeError("RobotServer.start() called twice")
        self._started = True
        c = self.config
        address = format_address(c.host, c.port)
        try:
            check_bindable(c.host, c.port)
            self._gate = Gate(c.token, c.gate_limits(), self._estop_from_headers, self.refusals)
            self._executor = futures.ThreadPoolExecutor(max_workers=self._gate.limits.workers,
                                                        thread_name_prefix="bridge-rpc")
            self._server = grpc.server(self._executor, interceptors=[self._gate], options=c.grpc_options(),
                                       maximum_concurrent_rpcs=None)
            pb_grpc.add_RobotBridgeServicer_to_server(_Servicer(self), self._server)
            try:
                if c.tls_cert:
                    with open(c.tls_cert, "rb") as f_cert, open(c.tls_key, "rb") as f_key:  # type: ignore[arg-type]
                        creds = grpc.ssl_server_credentials([(f_key.read(), f_cert.read())])
                    self.port = self._server.add_secure_port(address, creds)
                else:
                    self.port = self._server.add_insecure_port(address)
            except RuntimeError:
                self.port = 0
            if self.port == 0:
                raise OSError(f"cannot listen on {address}: gRPC could not bind it (in use, or not local?)")
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
            self._obs = obs
            self.supervisor.rebase(obs)
            self._last_contact = self._last_tick = time.monotonic()
            self._thread = threading.Thread(target=self._control_loop, name=f"control-loop-{id(self):x}",
                                            daemon=True)
            self._thread.start()
            self._server.start()
        except BaseException as e:
            self._shutdown(grace_s=0.0, hold=False)
            if isinstance(e, Exception):
                message = " ".join(f"{e}".split()) or type(e).__name__
                if not isinstance(e, OSError):
                    message = f"could not start serving {self.spec.name}: {type(e).__name__}: {message}"
                raise StartupError(message) from e
            raise
        return self.port

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop gRPC and the control loop, hold the robot, disconnect the driver. Safe to call twice."""
        self._shutdown(grace_s, hold=True)

    def _shutdown(self, grace_s: float, hold: bool) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait(timeout=grace_s + 2.0)
            self._server = None
        self._stop.set()
        self._wake.set()
        thread_stuck = False
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            thread_stuck = self._thread.is_alive()
            self._thread = None
        if self._gate is not None:
            self._gate.close()
            self._gate = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._connected:
            if thread_stuck:  # the loop is inside a driver call: a second thread must not call the driver
                log.error("the control loop did not stop within 5 s (stuck in a driver call); driver left as is")
                return
            self._connected = False
            try:
                if hold and not self.loop_error:
                    self.robot.hold()
            finally:
                self.robot.disconnect()

    def wait(self) -> None:
        """Block until ``stop()`` (or Ctrl-C in the caller)."""
        while not self._stop.wait(0.5):
            pass

    def __enter__(self) -> RobotServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- called by gRPC workers (and the polling thread: _estop_from_headers) ------------------------------------
    def touch(self) -> None:
        self._last_contact = time.monotonic()

    def check_alive(self) -> None:
        """Raise ``_CallError(UNAVAILABLE)`` once the control loop has died."""
        if self.loop_error:
            self.refusals.add("loop_dead")
            raise _CallError(grpc.StatusCode.UNAVAILABLE, f"the robot's control loop died ({self.loop_error}); the "
                                                          "driver was stopped; restart serve-robot")

    def _withdraw_pending(self) -> None:
        """Take the queued command off the queue unexecuted and answer it DEADLINE_EXCEEDED (under ``_lock``), so
        that no later tick can execute a command its caller has stopped waiting for."""
        item, self._pending = self._pending, None
        item.fail(*_NOT_EXECUTED)

    def submit(self, item: _Pending, timeout_s: float) -> pb.StepReply:
        """Queue ``item`` for the next tick and wait for it, at most ``timeout_s`` (then it is withdrawn, or for a
        reset the motion is abandoned and the robot holds); raises ``_CallError`` with the reason otherwise."""
        self.check_alive()
        item.expires = time.monotonic() + timeout_s
        with self._lock:
            refusal = None
            stale = self._pending
            if stale is not None and stale.expires <= time.monotonic():
                # Its caller's deadline has passed but its waiting worker has not woken to withdraw it yet (a loaded
                # machine): withdraw it here, so the caller's retry is not refused as busy by a command nobody awaits.
                self._withdraw_pending()
            if self.state == "estop" and item.kind != "hold":
                refusal = (grpc.StatusCode.FAILED_PRECONDITION, self._estop_message(), "estop")
            elif self.state == "supervisor_hold" and item.kind != "hold":
                refusal = (grpc.StatusCode.UNAVAILABLE, self._hold_message(), "holding")
            elif self._pending is not None or self._reset_job is not None:
                refusal = (grpc.StatusCode.RESOURCE_EXHAUSTED,
                           "busy: a reset is in progress" if self._reset_job is not None else
                           "a command is already queued for this tick (one client at a time)", "busy")
            else:
                self._pending = item
        if refusal is not None:
            self.refusals.add(refusal[2])
            raise _CallError(refusal[0], refusal[1])
        if not item.done.wait(timeout_s):
            with self._lock:
                job = self._reset_job
                if self._pending is item:  # never applied: withdraw it so a late tick cannot execute it
                    self._withdraw_pending()
                elif job is not None and job.item is item:
                    job.cancelled, self._reset_job = True, None
                    item.fail(grpc.StatusCode.DEADLINE_EXCEEDED,
                              "the reset did not reach the start position before the deadline; the robot holds "
                              "where it is", "deadline")
            # Being applied right now: the reply is moments away, unless the loop is stuck in a driver call.
            if not item.done.wait(max(1.0, 5 * self.period)):
                self.refusals.add("loop_stalled")
                raise _CallError(grpc.StatusCode.UNAVAILABLE, "the control loop did not finish this tick in time "
                                                              "(stalled in a driver call?)")
        if item.error is not None:
            code, details, reason = item.error
            self.refusals.add(reason)
            raise _CallError(code, details)
        assert item.reply is not None
        if self.spec.cameras:
            try:
                t0 = time.perf_counter()
                item.reply.observation.images.extend(self._encode_images(item.images or {}))
                with self._encode_lock:
                    self._encode.append(time.perf_counter() - t0)
            except FrameError as e:
                self.refusals.add("bad_frame")
                log.warning("bad camera frame from the driver: %s", safe_text(str(e), 300))
                applied = "its action was applied" if item.kind == "step" else "it was done"
                raise _CallError(grpc.StatusCode.DATA_LOSS, f"camera frame: {e}; {applied} (tick {item.reply.tick}) "
                                                            "but its observation cannot be sent") from None
        return item.reply

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

    def _estop_message(self) -> str:
        return (f"e-stop latched ({self.estop_reason}); not executed; clear it with ClearEStop before commanding or "
                "resetting the robot")

    def _hold_message(self) -> str:
        return (f"supervisor hold ({self.hold_reason}); not executed; commands resume when the measured motion is "
                "back within limits")

    def request_estop(self, reason: str, owner: int | None = None) -> int:
        """Latch the e-stop (the first reason is kept), fail what is queued, and ask the control loop to call
        ``driver.stop()`` now. Returns the request's number for ``wait_stopped`` (0 when the loop is dead).
        Never blocks on the loop: it is called from gRPC's polling thread."""
        failed: list[_Pending] = []
        with self._lock:
            if self.loop_error:
                return 0
            first = self.state != "estop"
            if first:
                self.state, self.estop_reason, self._latch_owner = "estop", reason, owner
                self.hold_reason = ""
                self.counters["estops"] += 1
                if self._pending is not None:
                    failed.append(self._pending)
                    self._pending = None
                if self._reset_job is not None:
                    self._reset_job.cancelled = True
                    failed.append(self._reset_job.item)
                    self._reset_job = None
        for item in failed:
            item.fail(grpc.StatusCode.FAILED_PRECONDITION, f"e-stop latched ({reason}) before this command's tick; "
                                                           "not executed", "estop")
        with self._ack:
            if self._stop_requested == self._stop_done:
                self._stop_requested_at = time.monotonic()
            self._stop_requested += 1
            generation = self._stop_requested
        self._wake.set()
        if first:
            log.warning("e-stop latched: %s", reason)
        return generation

    def _estop_from_headers(self, call_id: int) -> None:
        self.request_estop(_HEADER_REASON, owner=call_id)

    def estop(self, reason: str, owner: int | None = None) -> int:
        """``request_estop`` with a client's reason (escaped, cut). The latch itself was made when this call's
        headers arrived, under the provisional reason ``_HEADER_REASON``; the client's own reason replaces it."""
        reason = safe_text(reason, self.config.max_reason_chars) or "requested"
        with self._lock:
            named = self.state == "estop" and owner is not None and self._latch_owner == owner
            if named and self.estop_reason == _HEADER_REASON:
                self.estop_reason = reason
        if named:
            log.warning("e-stop reason: %s", reason)
        return self.request_estop(reason, owner)

    def wait_stopped(self, generation: int, timeout_s: float) -> tuple[bool, str | None]:
        """Wait until the driver's ``stop()`` for request ``generation`` returned: (acknowledged, error or None)."""
        with self._ack:
            ok = self._ack.wait_for(lambda: self._stop_done >= generation or self._dead, timeout_s)
            if self._dead and self._stop_done < generation:
                return False, "the control loop died"
            return bool(ok), self._stop_error if ok else None

    def clear_estop(self) -> None:
        self.check_alive()
        cleared = False
        with self._lock:
            if self.state == "estop":
                self.state, self.estop_reason, self._latch_owner = "running", "", None
                self._last_contact = time.monotonic()
                self._rebase_pending = True  # the supervisor starts afresh (a hand outside may come back in)
                cleared = True
        if cleared:
            log.warning("e-stop cleared")

    def status(self) -> pb.Status:
        """A snapshot: counters copied under a short lock, timing percentiles from a cache (never blocks the loop)."""
        now = time.monotonic()
        with self._lock:
            c = dict(self.counters)
            state, reason, hold, error = self.state, self.estop_reason, self.hold_reason, self.loop_error
            breaches = dict(self.breaches)
            last_tick = self._last_tick
            if state in ("running", "holding") and self._reset_job is not None:
                state = "resetting"
        rejected, clamped = self.safety.counts()
        for k, v in self.refusals.snapshot().items():
            rejected[k] = rejected.get(k, 0) + v
        t = self._timing_summary()
        age = now - last_tick
        health = "dead" if error else ("stalled" if age > max(5 * self.period, 0.25) else "ok")
        return pb.Status(
            state=state, ticks=c["ticks"], commands=c["commands"], holds=c["holds"],
            watchdog_trips=c["watchdog_trips"], estops=c["estops"], rejected=rejected, clamped=clamped,
            jitter_p50_s=t["jitter_p50"], jitter_p99_s=t["jitter_p99"], jitter_max_s=t["jitter_max"],
            overruns=c["overruns"], tick_work_p99_s=t["work_p99"], queue_p50_s=t["queue_p50"],
            queue_p99_s=t["queue_p99"], estop_reason=reason, health=health, last_tick_age_s=age,
            breaches=breaches, hold_reason=hold, estop_ack_s=self._estop_ack_s, stops=c["stops"],
            resets=c["resets"], loop_error=error, loop_priority=self.loop_priority,
        )

    def _timing_summary(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._timing_at > _TIMING_REFRESH_S and self._timing_lock.acquire(blocking=False):
            try:
                jitter, work, queue = self._jitter.values(), self._work.values(), self._queue.values()
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
        with self._lock:
            counters = dict(self.counters)
        return {"jitter": self._jitter.count, "work": self._work.count, "queue": self._queue.count,
                "encode": self._encode.count, "counters": counters, "refusals": self.refusals.snapshot()}

    def timing_since(self, mark: dict[str, Any]) -> dict[str, Any]:
        """Raw timing samples (s) and counter increments since ``mark``."""
        now = self.timing_mark()
        return {
            "jitter": self._jitter.since(mark["jitter"]), "work": self._work.since(mark["work"]),
            "queue": self._queue.since(mark["queue"]), "encode": self._encode.since(mark["encode"]),
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
            mirror_cameras=s.mirror_cameras,
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

    # -- the control loop ----------------------------------------------------------------------------------------
    def _prioritise(self) -> str:
        """Ask the OS to run the control thread before ordinary work, best effort: real-time ``SCHED_FIFO`` at
        ``control_priority`` if this process may (root or CAP_SYS_NICE), else nice -10, else nothing. Why: on a
        loaded machine the scheduler, not the server, decides when a tick starts; gRPC's own threads, an attacker's
        junk and other programs all compete with the loop for the CPU. Returns what was granted."""
        p = self.config.control_priority
        if p <= 0 or not hasattr(os, "sched_setscheduler"):
            return "normal"
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(p))  # 0: this thread (Linux)
            return f"SCHED_FIFO {p}"
        except (OSError, ValueError):
            pass
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
            return "nice -10"
        except (OSError, ValueError):
            return "normal (no permission for a higher one)"

    def _control_loop(self) -> None:
        self.loop_priority = self._prioritise()
        log.info("control loop priority: %s", self.loop_priority)
        try:
            period = self.period
            next_tick = time.monotonic()
            while not self._stop.is_set():
                self._wake.clear()
                self._service_stop()  # an e-stop is served between ticks, at once
                now = time.monotonic()
                if now < next_tick:
                    self._wake.wait(next_tick - now)
                    continue
                self._tick(now, now - next_tick)
                end = time.monotonic()
                self._work.append(end - now)
                next_tick += period
                if end > next_tick:  # overran: count it and start again from now instead of bursting to catch up
                    with self._lock:
                        self.counters["overruns"] += 1
                    next_tick = end
        except BaseException as e:  # a bug, not a driver fault: stop the driver, answer UNAVAILABLE from now on
            self._die(e)

    def _die(self, e: BaseException) -> None:
        reason = safe_text(f"{type(e).__name__}: {e}", 300)
        log.error("control loop died (%s); stopping the driver", reason, exc_info=e)
        with self._lock:
            self.loop_error, self.state = reason, "dead"
            items = [self._pending, self._current, self._reset_job.item if self._reset_job else None]
            self._pending = self._current = self._reset_job = None
        for item in items:
            if item is not None:
                item.fail(grpc.StatusCode.UNAVAILABLE, f"the robot's control loop died ({reason})", "loop_dead")
        try:
            self.robot.stop()
        except Exception as stop_error:
            log.exception("driver stop() failed after the control loop died")
            with self._lock:
                self.loop_error = f"{reason}; driver stop() failed too: {safe_text(str(stop_error), 200)}"
        with self._lock:
            self.counters["stops"] += 1
        with self._ack:
            self._dead = True
            self._ack.notify_all()

    def _service_stop(self) -> None:
        """Call ``driver.stop()`` if an e-stop was requested since the last call, and acknowledge it."""
        with self._ack:
            generation = self._stop_requested
            if generation <= self._stop_done:
                return
            requested_at = self._stop_requested_at
        error = None
        try:
            self.robot.stop()
        except Exception as e:
            error = safe_text(f"{type(e).__name__}: {e}", 200)
            log.error("driver stop() failed: %s", error)
        with self._lock:
            self.counters["stops"] += 1
        with self._ack:
            self._stop_done, self._stop_error = generation, error
            self._estop_ack_s = time.monotonic() - requested_at
            self._ack.notify_all()

    def _latch_and_stop(self, reason: str) -> None:
        """From the control thread: latch and stop the driver now (driver fault, hard breach)."""
        self.request_estop(safe_text(reason, self.config.max_reason_chars))
        self._service_stop()

    def _driver(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            raise _DriverFault(f"{getattr(fn, '__name__', 'driver')}: {type(e).__name__}: {e}") from e

    def _ee(self, obs: RobotObservation | None) -> np.ndarray | None:
        c = self.spec.cartesian
        if c is None or obs is None:
            return None
        return np.asarray(obs.state, np.float64)[slice(*c.ee_slice)]

    def _tick(self, now: float, lateness: float) -> None:
        with self._lock:
            item, self._pending = self._pending, None
            self._current = item
            state, job = self.state, self._reset_job
            rebase, self._rebase_pending = self._rebase_pending, False
            self.counters["ticks"] += 1
            self._last_tick = now
            if job is not None:
                self._last_contact = now  # a client waiting for its reset is in contact
        self._jitter.append(max(0.0, lateness))
        before = self._obs
        if rebase:
            self.supervisor.rebase(self._obs)
        applied: np.ndarray | None = None
        flags = 0
        target: np.ndarray | None = None
        obs: RobotObservation | None = None
        finished: _Pending | None = None  # a reset job's request, answered this tick
        check = state != "estop"
        try:
            if state == "estop":
                self._driver(self.robot.hold)
                if item is not None and item.kind != "hold":
                    item.fail(grpc.StatusCode.FAILED_PRECONDITION, self._estop_message(), "estop")
            elif job is not None:
                if item is not None:
                    item.fail(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy: a reset is in progress", "busy")
                if state == "supervisor_hold":
                    self._driver(self.robot.hold)
                else:
                    obs, target, finished = self._reset_tick(job)
            elif state == "supervisor_hold" and item is not None and item.kind != "hold":
                self._driver(self.robot.hold)
                item.fail(grpc.StatusCode.UNAVAILABLE, self._hold_message(), "holding")
            elif item is not None and item.kind == "reset":
                position = self._driver(self.robot.reset_position, item.seed) if self.spec.cartesian else None
                if position is None:  # the driver moves the robot itself (or needs its operator)
                    obs = self._driver(self.robot.reset, item.seed)
                    self._reset_done()
                    finished, item, check = item, None, False
                else:
                    job = _ResetJob(item, np.asarray(position, np.float64))
                    with self._lock:
                        if self.state == "estop":  # latched since this tick began
                            item.fail(grpc.StatusCode.FAILED_PRECONDITION, self._estop_message(), "estop")
                            job = None
                        else:
                            self._reset_job = job
                    item = None
                    if job is not None:
                        obs, target, finished = self._reset_tick(job)
            elif item is not None and item.kind == "step":
                assert item.action is not None
                try:
                    safe = self.safety.clamp(item.action, self._obs.state if self._obs is not None else None)
                except UnsafeCommand as e:  # never reaches the driver; the robot holds this tick
                    item.fail(grpc.StatusCode.INVALID_ARGUMENT, str(e), e.reason)
                    self._driver(self.robot.hold)
                else:
                    ee = self._ee(self._obs)
                    if ee is not None and self.spec.cartesian is not None:
                        target = ee + safe.action[:3] * self.spec.cartesian.metres_per_unit
                    self._driver(self.robot.command, safe.action)
                    applied, flags = safe.action, safe.flags
                    self._last_applied = safe.action.copy()
            else:
                self._driver(self.robot.hold)
            if obs is None:
                obs = self._driver(self.robot.observe)
            self._obs = obs
            if finished is not None and finished.kind == "reset":
                check = check and self._reset_jump_ok(before, obs)
                self.supervisor.rebase(obs)
            if check:
                self._react(self.supervisor.check(obs, target), now)
        except _DriverFault as e:
            log.error("driver error; stopping the driver and latching the e-stop: %s", safe_text(str(e), 500))
            self._latch_and_stop(f"driver error: {e}")
            for it in (item, finished):
                if it is not None:
                    it.fail(grpc.StatusCode.INTERNAL, safe_text(f"driver error: {e}", 500), "driver_error")

        with self._lock:
            self._current = None
            if applied is not None:
                self.counters["commands"] += 1
                if self.state == "holding":
                    self.state = "running"
            else:
                self.counters["holds"] += 1
            idle = now - self._last_contact
            if self.state == "running" and idle > self.config.watchdog_s:
                self.state = "holding"
                self.counters["watchdog_trips"] += 1
                log.warning("watchdog: no command or heartbeat for %.3f s; holding", idle)
        for it in (item, finished):
            if it is None or it.done.is_set():
                continue
            self._queue.append(now - it.arrived)
            o = self._obs
            assert o is not None
            it.reply = pb.StepReply(
                observation=pb.Observation(state=np.asarray(o.state, np.float32).tolist(), reward=o.reward,
                                           success=o.success, stamp=o.stamp),
                seq=it.seq, tick=self.counters["ticks"],
                applied_action=[] if applied is None or it is not item else applied.tolist(),
                clamp_flags=flags if it is item else 0, queue_s=now - it.arrived,
            )
            it.images = dict(o.images)  # encoded by the waiting worker (submit), not here
            it.done.set()

    def _reset_done(self) -> None:
        with self._lock:
            self.counters["resets"] += 1
        self._last_applied = self._rest_action.copy()

    def _reset_tick(self, job: _ResetJob) -> tuple[RobotObservation | None, np.ndarray | None, _Pending | None]:
        """One tick of a reset motion: a step of at most ``reset_speed_fraction`` step limits towards the start
        position, through the safety filter; at the start position, the driver's reset. Returns (observation if
        the driver reset, commanded target, the finished request)."""
        c = self.spec.cartesian
        assert c is not None
        ee = self._ee(self._obs)
        assert ee is not None
        delta = job.target - ee
        dist = float(np.linalg.norm(delta))
        done = dist <= self.config.reset_tolerance_m
        with self._lock:
            live = not job.cancelled and self._reset_job is job
            if live and done:
                self._reset_job = None
        if not live:  # withdrawn (deadline) or e-stopped since this tick began: hold
            self._driver(self.robot.hold)
            return None, None, None
        if done:
            obs = self._driver(self.robot.reset, job.item.seed)
            self._reset_done()
            return obs, None, job.item
        step = delta * min(1.0, self.config.reset_speed_fraction * self.supervisor.step_limit_m / dist)
        action = self._last_applied.copy()
        action[:3] = step / c.metres_per_unit
        safe = self.safety.clamp(np.clip(action, self.safety.low, self.safety.high), self._obs.state)
        self._driver(self.robot.command, safe.action)
        return None, ee + safe.action[:3] * c.metres_per_unit, None

    def _reset_jump_ok(self, before: RobotObservation | None, after: RobotObservation) -> bool:
        """After a server-driven reset the driver's own reset may move the hand by little more than the tolerance
        (its preview was wrong otherwise): a larger jump is a hard breach."""
        a, b = self._ee(before), self._ee(after)
        if a is None or b is None:
            return True
        jump = float(np.linalg.norm(b - a))
        if jump <= self.config.reset_tolerance_m + 0.005:
            return True
        with self._lock:
            self.breaches["reset_jump_hard"] = self.breaches.get("reset_jump_hard", 0) + 1
        self._latch_and_stop(f"supervisor: the driver's reset moved the hand {jump * 1e3:.1f} mm in one tick")
        return False

    def _react(self, breaches: list[Breach], now: float) -> None:
        """Hold on a soft breach, stop and latch on a hard one; count every breached tick."""
        c = self.config.supervisor
        if breaches:
            with self._lock:
                for b in breaches:
                    self.breaches[b.key] = self.breaches.get(b.key, 0) + 1
            hard = next((b for b in breaches if b.level == "hard"), None)
            if hard is not None:
                log.warning("supervisor: hard breach (%s); stopping the driver", hard.message)
                self._latch_and_stop(f"supervisor: {hard.message}")
                return
            with self._lock:
                if self.state in ("running", "holding"):
                    self.state, self._hold_since = "supervisor_hold", now
                    log.warning("supervisor: soft breach (%s); holding", breaches[0].message)
                if self.state == "supervisor_hold":
                    self.hold_reason, self._clean_ticks = breaches[0].message, 0
        else:
            with self._lock:
                if self.state == "supervisor_hold":
                    self._clean_ticks += 1
                    if self._clean_ticks >= c.settle_ticks:
                        self.state, self.hold_reason = "running", ""
                        self._last_contact = now
        with self._lock:
            overdue = self.state == "supervisor_hold" and now - self._hold_since > c.max_hold_s
            reason = self.hold_reason
        if overdue:
            self._latch_and_stop(f"supervisor: a hold did not clear within {c.max_hold_s:g} s ({reason})")


class _Servicer(pb_grpc.RobotBridgeServicer):
    """The RPC handlers: validate every field, then hand the request to the server (see ``RobotServer``)."""

    def __init__(self, server: RobotServer) -> None:
        self.s = server

    def _deadline(self, context: grpc.ServicerContext, cap: float) -> float:
        remaining = context.time_remaining()
        return cap if remaining is None else max(0.0, min(remaining, cap))

    def _answer(self, context: grpc.ServicerContext, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except _CallError as e:
            context.abort(e.code, e.details)
            raise  # unreachable: abort raises

    def _invalid(self, context: grpc.ServicerContext, details: str) -> None:
        self.s.refusals.add("invalid_request")
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, details)

    def GetSpec(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Spec:
        self._answer(context, self.s.check_alive)
        return self.s.spec_message()

    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> pb.StepReply:
        self._answer(context, self.s.check_alive)
        if request.seed < 0:
            self._invalid(context, f"seed must be >= 0, got {request.seed}")
        if not request.has_seed and request.seed != 0:
            self._invalid(context, f"seed {request.seed} given without has_seed")
        self.s.touch()
        item = _Pending("reset", seed=int(request.seed) if request.has_seed else None)
        # A reset is a motion at limited speed (seconds on hardware): its wait is the client's deadline, up to 60 s.
        return self._answer(context, self.s.submit, item, self._deadline(context, 60.0))

    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.StepReply:
        self._answer(context, self.s.check_alive)
        self.s.touch()
        # A call without a deadline still gets a bounded wait: a few periods is plenty for one tick.
        cap = max(1.0, 10 * self.s.period)
        if request.hold:
            if len(request.action):
                self._invalid(context, "a hold request must not carry an action")
            return self._answer(context, self.s.submit, _Pending("hold", seq=request.seq), self._deadline(context, cap))
        try:
            action = self.s.safety.validate(np.asarray(request.action, dtype=np.float64))
        except UnsafeCommand as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        item = _Pending("step", action=action, seq=request.seq)
        return self._answer(context, self.s.submit, item, self._deadline(context, cap))

    def Heartbeat(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self._answer(context, self.s.check_alive)
        self.s.touch()
        return pb.Status(state=self.s.state)  # cheap: a heartbeat must not cost a status snapshot

    def EStop(self, request: pb.EStopRequest, context: grpc.ServicerContext) -> pb.Status:
        generation = self.s.estop(request.reason, CALL_ID.get())
        self._answer(context, self.s.check_alive)
        ok, error = self.s.wait_stopped(generation, self.s.config.estop_ack_timeout_s)
        self._answer(context, self.s.check_alive)
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
        self._answer(context, self.s.clear_estop)
        return self.s.status()

    def GetStatus(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self._answer(context, self.s.check_alive)
        return self.s.status()
