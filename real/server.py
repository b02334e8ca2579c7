"""The robot-side server: a gRPC service beside the controller that owns the robot's control loop and its safety.

One thread, the **control loop**, talks to the driver, at a fixed rate (``spec.control_hz``). Each tick it

* applies the command queued since the last tick, after the safety filter has clamped it against the state
  measured *at this tick*; or, when none was queued, calls ``driver.hold()`` (so a client that stops talking can
  never leave the arm moving);
* trips the **watchdog** when neither a command nor a heartbeat has arrived for ``watchdog_s`` (state
  ``holding``; the next command resumes), and counts it;
* while the **e-stop** is latched, holds and refuses every command until ``ClearEStop``;
* measures its own timing: jitter (tick start minus its schedule), work per tick, overruns, and the queueing delay
  of each command (arrival to its tick).

gRPC worker threads only validate requests and hand them to the loop: a malformed, NaN, wrongly shaped, oversized
or unauthenticated message gets an error status and never reaches the driver, and a slow or stalled client only
ties up its own call. Authentication is a shared token in the ``authorization`` metadata (``Bearer <token>``),
compared in constant time; TLS is optional (``tls_cert``/``tls_key``).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import deque
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from .proto import PROTOCOL, pb, pb_grpc
from .robot import Robot, RobotObservation
from .safety import SafetyFilter, UnsafeCommand

log = logging.getLogger(__name__)

TOKEN_ENV = "ROBOT_RL_TOKEN"
_TIMING_WINDOW = 30_000  # samples kept for percentiles (10 minutes at 50 Hz)


@dataclass
class ServerConfig:
    """How the server listens and guards the robot."""

    host: str = "127.0.0.1"
    port: int = 50051  # 0 picks a free port (see RobotServer.port)
    token: str | None = None  # shared secret; None only with allow_unauthenticated on loopback
    allow_unauthenticated: bool = False  # explicit opt-in; refused unless host is a loopback address
    watchdog_s: float = 0.5  # no command or heartbeat for this long -> hold, counted as a watchdog trip
    max_message_bytes: int = 64 * 1024  # larger requests are refused by gRPC with RESOURCE_EXHAUSTED
    max_concurrent_calls: int = 8  # beyond this gRPC answers RESOURCE_EXHAUSTED instead of queueing
    tls_cert: str | None = None  # PEM server certificate chain; with tls_key: TLS instead of plaintext
    tls_key: str | None = None

    def validate(self) -> None:
        loopback = self.host in {"127.0.0.1", "localhost", "::1"}
        if not self.token and not self.allow_unauthenticated:
            raise ValueError(
                f"no token: pass --token or set {TOKEN_ENV} (or --allow-unauthenticated, loopback only)"
            )
        if not self.token and not loopback:
            raise ValueError(f"refusing to serve without a token on the non-loopback address {self.host!r}")
        if self.watchdog_s <= 0:
            raise ValueError(f"watchdog_s must be > 0, got {self.watchdog_s}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both tls_cert and tls_key")


class _Pending:
    """A request waiting for its control tick."""

    __slots__ = ("kind", "action", "seed", "seq", "arrived", "done", "reply", "error")

    def __init__(self, kind: str, action: np.ndarray | None = None, seed: int | None = None, seq: int = 0):
        self.kind, self.action, self.seed, self.seq = kind, action, seed, seq
        self.arrived = time.monotonic()
        self.done = threading.Event()
        self.reply: pb.StepReply | None = None
        self.error: tuple[grpc.StatusCode, str] | None = None


def _percentile(samples: deque[float], q: float) -> float:
    return float(np.percentile(np.fromiter(samples, float), q)) if samples else 0.0


class RobotServer:
    """Serves one ``Robot``. ``start()`` connects the driver and starts the control loop and gRPC; ``stop()``
    holds the robot, stops both and disconnects the driver."""

    def __init__(self, robot: Robot, config: ServerConfig) -> None:
        config.validate()
        self.robot, self.config = robot, config
        self.spec = robot.spec
        self.period = 1.0 / self.spec.control_hz
        self.safety = SafetyFilter(self.spec)
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: grpc.Server | None = None
        self.port = 0
        self._auth: _TokenCheck | None = None

        self.state = "running"
        self.estop_reason = ""
        self._last_contact = time.monotonic()
        self._obs: RobotObservation | None = None
        self.counters = {"ticks": 0, "commands": 0, "holds": 0, "watchdog_trips": 0, "estops": 0, "overruns": 0}
        self.jitter: deque[float] = deque(maxlen=_TIMING_WINDOW)
        self.work: deque[float] = deque(maxlen=_TIMING_WINDOW)
        self.queue: deque[float] = deque(maxlen=_TIMING_WINDOW)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> int:
        """Start serving; returns the bound port."""
        self.robot.connect()
        self._obs = self.robot.observe()
        self._last_contact = time.monotonic()
        self._thread = threading.Thread(target=self._control_loop, name="control-loop", daemon=True)
        self._thread.start()
        c = self.config
        options = [
            ("grpc.max_receive_message_length", c.max_message_bytes),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
        ]
        self._auth = _TokenCheck(c.token) if c.token else None
        interceptors = [self._auth] if self._auth else []
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=c.max_concurrent_calls, thread_name_prefix="bridge-rpc"),
            interceptors=interceptors,
            options=options,
            maximum_concurrent_rpcs=c.max_concurrent_calls,
        )
        pb_grpc.add_RobotBridgeServicer_to_server(_Servicer(self), self._server)
        address = f"{c.host}:{c.port}"
        if c.tls_cert:
            with open(c.tls_cert, "rb") as f_cert, open(c.tls_key, "rb") as f_key:  # type: ignore[arg-type]
                creds = grpc.ssl_server_credentials([(f_key.read(), f_cert.read())])
            self.port = self._server.add_secure_port(address, creds)
        else:
            self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            self.stop()
            raise OSError(f"could not bind {address}: is another server running there?")
        self._server.start()
        return self.port

    def stop(self, grace_s: float = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        try:
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

    # -- called by gRPC workers ----------------------------------------------------------------------------------
    def touch(self) -> None:
        self._last_contact = time.monotonic()

    def submit(self, item: _Pending, timeout_s: float) -> pb.StepReply:
        """Queue ``item`` for the next tick and wait for it; raises ``_CallError``."""
        with self._lock:
            if self.state == "estop" and item.kind != "hold":
                self.safety.rejected["estop"] += 1
                raise _CallError(grpc.StatusCode.FAILED_PRECONDITION, f"e-stop latched ({self.estop_reason}); "
                                 "clear it with ClearEStop before commanding or resetting the robot")
            if self._pending is not None:
                self.safety.rejected["busy"] += 1
                raise _CallError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 "a command is already queued for this tick (one client at a time)")
            self._pending = item
        if not item.done.wait(timeout_s):
            with self._lock:
                if self._pending is item:  # never applied: withdraw it so a late tick cannot execute it
                    self._pending = None
                    self.safety.rejected["deadline"] += 1
                    raise _CallError(grpc.StatusCode.DEADLINE_EXCEEDED, "no control tick before the deadline")
            item.done.wait()  # being applied right now: the reply is moments away
        if item.error is not None:
            raise _CallError(*item.error)
        assert item.reply is not None
        return item.reply

    def estop(self, reason: str) -> None:
        with self._lock:
            if self.state != "estop":
                self.counters["estops"] += 1
            self.state, self.estop_reason = "estop", reason or "requested"
        log.warning("e-stop latched: %s", self.estop_reason)

    def clear_estop(self) -> None:
        with self._lock:
            if self.state == "estop":
                self.state, self.estop_reason = "running", ""
                self._last_contact = time.monotonic()
        log.warning("e-stop cleared")

    def status(self) -> pb.Status:
        with self._lock:
            c = dict(self.counters)
            state, reason = self.state, self.estop_reason
            jitter, work, queue = list(self.jitter), list(self.work), list(self.queue)
        j = deque(jitter)
        rejected = dict(self.safety.rejected)
        if self._auth is not None and self._auth.refused:
            rejected["unauthenticated"] = self._auth.refused
        return pb.Status(
            state=state,
            ticks=c["ticks"],
            commands=c["commands"],
            holds=c["holds"],
            watchdog_trips=c["watchdog_trips"],
            estops=c["estops"],
            rejected=rejected,
            clamped=dict(self.safety.clamped),
            jitter_p50_s=_percentile(j, 50),
            jitter_p99_s=_percentile(j, 99),
            jitter_max_s=max(jitter, default=0.0),
            overruns=c["overruns"],
            tick_work_p99_s=_percentile(deque(work), 99),
            queue_p50_s=_percentile(deque(queue), 50),
            queue_p99_s=_percentile(deque(queue), 99),
            estop_reason=reason,
        )

    def spec_message(self) -> pb.Spec:
        s = self.spec
        msg = pb.Spec(
            name=s.name, state_dim=s.state_dim, action_dim=s.action_dim, control_hz=s.control_hz,
            action_low=s.action_low, action_high=s.action_high, time_limit=s.time_limit or 0,
            watchdog_s=self.config.watchdog_s, protocol=PROTOCOL,
        )
        if s.cartesian is not None:
            c = s.cartesian
            msg.cartesian = True
            msg.workspace_low.extend(c.workspace_low)
            msg.workspace_high.extend(c.workspace_high)
            msg.metres_per_unit, msg.max_step_m, msg.max_speed_mps = c.metres_per_unit, c.max_step_m, c.max_speed_mps
        return msg

    # -- the control loop ----------------------------------------------------------------------------------------
    def _control_loop(self) -> None:
        period = self.period
        next_tick = time.monotonic()
        while not self._stop.is_set():
            start = time.monotonic()
            self._tick(start, start - next_tick)
            work = time.monotonic() - start
            next_tick += period
            now = time.monotonic()
            with self._lock:
                self.work.append(work)
                if now > next_tick:  # overran: count it and start again from now instead of bursting to catch up
                    self.counters["overruns"] += 1
                    next_tick = now
            self._stop.wait(max(0.0, next_tick - time.monotonic()))

    def _tick(self, now: float, lateness: float) -> None:
        with self._lock:
            item, self._pending = self._pending, None
            state = self.state
            self.counters["ticks"] += 1
            self.jitter.append(max(0.0, lateness))
        applied: np.ndarray | None = None
        flags = 0
        try:
            if item is not None and item.kind == "reset" and state != "estop":
                self._obs = self.robot.reset(item.seed)
            elif item is not None and item.kind == "step" and state != "estop":
                assert item.action is not None
                safe = self.safety.clamp(item.action, self._obs.state if self._obs is not None else None)
                self.robot.command(safe.action)
                applied, flags = safe.action, safe.flags
                self._obs = self.robot.observe()
            else:
                self.robot.hold()
                self._obs = self.robot.observe()
        except UnsafeCommand as e:
            self.robot.hold()
            if item is not None:
                item.error = (grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except Exception as e:  # a driver fault: hold, latch the e-stop, tell the caller; the loop keeps running
            log.exception("driver error; latching the e-stop")
            self.estop(f"driver error: {e}")
            try:
                self.robot.stop()
            except Exception:
                log.exception("driver stop() failed")
            if item is not None:
                item.error = (grpc.StatusCode.INTERNAL, f"driver error: {e}")

        with self._lock:
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
            if item is not None:
                self.queue.append(now - item.arrived)
        if item is not None:
            if item.error is None:
                obs = self._obs
                assert obs is not None
                item.reply = pb.StepReply(
                    observation=pb.Observation(
                        state=np.asarray(obs.state, np.float32).tolist(), reward=obs.reward, success=obs.success,
                        stamp=obs.stamp,
                    ),
                    seq=item.seq,
                    tick=self.counters["ticks"],
                    applied_action=[] if applied is None else applied.tolist(),
                    clamp_flags=flags,
                    queue_s=now - item.arrived,
                )
            item.done.set()


class _CallError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Servicer(pb_grpc.RobotBridgeServicer):
    def __init__(self, server: RobotServer) -> None:
        self.s = server

    def _deadline(self, context: grpc.ServicerContext) -> float:
        remaining = context.time_remaining()
        # A call without a deadline still gets a bounded wait: a few periods is plenty for one tick.
        cap = max(1.0, 10 * self.s.period)
        return cap if remaining is None else max(0.0, min(remaining, cap))

    def _run(self, context: grpc.ServicerContext, item: _Pending) -> pb.StepReply:
        try:
            return self.s.submit(item, self._deadline(context))
        except _CallError as e:
            context.abort(e.code, e.details)
            raise  # unreachable: abort raises

    def GetSpec(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Spec:
        return self.s.spec_message()

    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> pb.StepReply:
        self.s.touch()
        # A reset may take seconds on hardware (a move to home), so its wait is the client's deadline, up to 60 s.
        remaining = context.time_remaining()
        item = _Pending("reset", seed=int(request.seed) if request.has_seed else None)
        try:
            return self.s.submit(item, 60.0 if remaining is None else min(remaining, 60.0))
        except _CallError as e:
            context.abort(e.code, e.details)
            raise

    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.StepReply:
        self.s.touch()
        if request.hold:
            return self._run(context, _Pending("hold", seq=request.seq))
        try:
            action = self.s.safety.validate(np.asarray(request.action, dtype=np.float64))
        except UnsafeCommand as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return self._run(context, _Pending("step", action=action, seq=request.seq))

    def Heartbeat(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self.s.touch()
        return pb.Status(state=self.s.state)  # cheap: a heartbeat must not cost a percentile computation

    def EStop(self, request: pb.EStopRequest, context: grpc.ServicerContext) -> pb.Status:
        self.s.estop(request.reason)
        return self.s.status()

    def ClearEStop(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        self.s.clear_estop()
        return self.s.status()

    def GetStatus(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Status:
        return self.s.status()


class _TokenCheck(grpc.ServerInterceptor):
    """Refuses every call whose ``authorization`` metadata is not ``Bearer <token>`` (constant-time compare)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()
        self.refused = 0

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, handler_call_details: grpc.HandlerCallDetails) -> Any:
        supplied = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        if isinstance(supplied, str):
            supplied = supplied.encode()
        if hmac.compare_digest(supplied, self._expected):
            return continuation(handler_call_details)
        self.refused += 1
        return self._deny
