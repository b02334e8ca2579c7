"""A policy served apart from the robot's control loop (``robot-rl serve-policy``): action chunks over gRPC.

A diffusion or flow policy, or a large camera encoder, may not fit the robot computer's control rate. The policy
then runs in a process of its own (on this machine or another, with a GPU) and robot-side clients
(``robot_rl.real.policy_client``) stream observations to it and get action chunks back, while their control loops
keep the robot's rate from the chunk they already have.

The transport is the bridge's (``robot_rl.real.server``): the token in the ``authorization`` metadata, compared in
constant time by an interceptor on the call's headers alone (a refused call's body is never read); TLS with
``tls_cert``/``tls_key``; off loopback a token of at least 16 characters, and no unauthenticated serving; and by
default the bridge's front door (``robot_rl.real.front_door``), a process of its own that owns the public port and
hands gRPC only connections that sent a valid start, a bounded number per peer.

**Several clients, none able to hang the server.** Each client is one bidirectional ``Stream``; the server answers
each request with one chunk, in order. Every stream gets its own copy of the policy (a chunked or residual policy
keeps per-episode state) and its own gRPC worker, up to ``max_clients`` (one more is refused with
``RESOURCE_EXHAUSTED`` at once, never queued). A client that dies closes its connection and gRPC ends its stream;
one whose machine vanishes without closing is found by HTTP/2 keepalive pings (``keepalive_s``); one that keeps the
connection open but sends nothing for ``idle_timeout_s`` is cancelled by the server's reaper. In every case its
worker and slot are free again, and the other clients never wait on it: inference holds no lock shared between
streams.
"""

from __future__ import annotations

import copy
import hmac
import json
import logging
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from .guard import check_bindable, check_token, format_address, is_loopback
from .proto import POLICY_PROTOCOL, policy_pb, policy_pb_grpc

log = logging.getLogger(__name__)

__all__ = ["PolicyServer", "PolicyServerConfig", "chunk_of"]

SERVICE = "/robot_rl.policy.v1.PolicyServer/"
STREAM_METHOD = SERVICE + "Stream"


@dataclass
class PolicyServerConfig:
    """Where and how a policy is served; ``validate`` raises ``ValueError`` with one line naming the key."""

    host: str = "127.0.0.1"
    port: int = 50061
    token: str | None = None
    allow_unauthenticated: bool = False
    allow_plaintext_token: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    max_clients: int = 8  # streams served at once; one more is refused at once
    idle_timeout_s: float = 30.0  # a stream without a request this long is ended (its worker freed)
    keepalive_s: float = 2.0  # HTTP/2 pings find a peer that vanished without closing its connection
    max_message_bytes: int = 16 * 1024 * 1024  # a request above this is refused (camera frames are raw)
    front_door: bool = True
    max_connections: int = 512
    max_connections_per_peer: int = 32
    handshake_timeout_s: float = 2.0

    def validate(self) -> None:
        check_token(self.token, self.host)
        if self.token is None and not self.allow_unauthenticated:
            raise ValueError("no token: set ROBOT_RL_TOKEN or token_file= (or allow_unauthenticated=true on "
                             "loopback)")
        if self.token is None and not is_loopback(self.host):
            raise ValueError(f"allow_unauthenticated=true serves only on a loopback address, not on non-loopback "
                             f"{self.host}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both tls_cert= and tls_key=")
        if self.token and not self.tls_cert and not is_loopback(self.host) and not self.allow_plaintext_token:
            raise ValueError(f"a token without TLS on non-loopback {self.host} crosses the network in clear; set "
                             "tls_cert=/tls_key=, or allow_plaintext_token=true on a network you trust")
        for key in ("max_clients", "max_message_bytes", "max_connections", "max_connections_per_peer"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        for key in ("idle_timeout_s", "keepalive_s", "handshake_timeout_s"):
            if not float(getattr(self, key)) > 0:
                raise ValueError(f"{key} must be > 0, got {getattr(self, key)}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in 0-65535, got {self.port}")


def chunk_of(policy: Any, obs: dict[str, Any], deterministic: bool = True) -> Any:
    """One action chunk [H, A] for a single observation: a chunked policy's (``predict_chunk``; a diffusion or flow
    policy from zero noise when ``deterministic``, else from fresh noise), or any other saved policy's next action
    as a chunk of one."""
    import torch

    with torch.no_grad():
        if int(getattr(policy, "horizon", 1)) > 1 and hasattr(policy, "predict_chunk"):
            return policy.predict_chunk(obs, deterministic=deterministic)[0]
        return policy.act(obs, deterministic=deterministic)[0][None]


@dataclass
class _Stream:
    context: grpc.ServicerContext
    last: float  # monotonic time of its last request
    peer: str
    chunks: int = 0


@dataclass
class Counters:
    """What ``PolicyServer.counters`` reports."""

    streams_started: int = 0
    streams_ended: int = 0
    refused_busy: int = 0
    refused_token: int = 0
    idle_cancelled: int = 0
    bad_requests: int = 0
    chunks: int = 0
    inference_s: list[float] = field(default_factory=list)


class PolicyServer:
    """Serves one loaded policy (``robot_rl.policies.io`` kinds; module docstring). ``metadata``: the policy
    directory's (kind, env_spec, delay), sent to clients in ``GetInfo``; ``stochastic``: sample chunks (a
    diffusion/flow policy's fresh noise per chunk) instead of the deterministic ones."""

    def __init__(self, policy: Any, config: PolicyServerConfig, metadata: dict[str, Any] | None = None,
                 stochastic: bool = False) -> None:
        config.validate()
        self.stochastic = stochastic
        self.policy, self.config, self.metadata = policy.eval(), config, dict(metadata or {})
        self.server_id = secrets.token_hex(8)
        self.obs_dim, self.action_dim = int(policy.obs_dim), int(policy.action_dim)
        self.horizon = int(getattr(policy, "horizon", 1)) if hasattr(policy, "predict_chunk") else 1
        self.cameras = {g: tuple(int(v) for v in s) for g, s in (getattr(policy, "cameras", None) or {}).items()}
        self.counters = Counters()
        self._lock = threading.Lock()
        self._streams: dict[int, _Stream] = {}
        self._ids = iter(range(1, 1 << 62))
        self._server: grpc.Server | None = None
        self._door: Any = None
        self._socket_dir: str | None = None
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> int:
        """Bind and serve; returns the port. ``OSError`` (one line) when it cannot listen, with nothing running."""
        c = self.config
        try:
            creds = None
            if c.tls_cert and c.tls_key:
                from .server import check_tls_files

                creds = grpc.ssl_server_credentials([check_tls_files(c.tls_cert, c.tls_key)[::-1]])
            check_bindable(c.host, c.port)
            ms = int(c.keepalive_s * 1000)
            options = [("grpc.max_receive_message_length", c.max_message_bytes),
                       ("grpc.max_send_message_length", c.max_message_bytes),
                       ("grpc.keepalive_time_ms", ms), ("grpc.keepalive_timeout_ms", 2 * ms),
                       ("grpc.keepalive_permit_without_calls", 1),
                       ("grpc.http2.min_ping_interval_without_data_ms", max(100, ms // 2)),
                       ("grpc.http2.max_pings_without_data", 0), ("grpc.so_reuseport", 0)]
            # One worker per stream plus room for GetInfo and refusals: a full server still answers at once.
            pool = futures.ThreadPoolExecutor(c.max_clients + 4, thread_name_prefix="policy-rpc")
            self._server = grpc.server(pool, interceptors=[_TokenCheck(c.token, self)], options=options,
                                       maximum_concurrent_rpcs=c.max_clients + 4)
            policy_pb_grpc.add_PolicyServerServicer_to_server(_Servicer(self), self._server)
            address = format_address(c.host, c.port)
            if c.front_door:
                self._socket_dir = tempfile.mkdtemp(prefix="robot-rl-policy-")  # 0700: only this user connects
                upstream = f"{self._socket_dir}/grpc.sock"
                bound = self._server.add_secure_port(f"unix:{upstream}", creds) if creds is not None \
                    else self._server.add_insecure_port(f"unix:{upstream}")
                if bound == 0:
                    raise OSError(f"cannot listen on the private socket {upstream}")
                from .front_door import FrontDoor, FrontDoorLimits

                self._door = FrontDoor(c.host, c.port, upstream,
                                       FrontDoorLimits(c.max_connections, c.max_connections_per_peer,
                                                       c.handshake_timeout_s), tls=creds is not None)
                self.port = self._door.start()
            else:
                bound = self._server.add_secure_port(address, creds) if creds is not None \
                    else self._server.add_insecure_port(address)
                if bound == 0:
                    raise OSError(f"cannot listen on {address}: gRPC could not bind it")
                self.port = bound
            self._server.start()
            self._reaper = threading.Thread(target=self._reap, name="policy-reaper", daemon=True)
            self._reaper.start()
        except BaseException:
            self.stop()
            raise
        return self.port

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop serving: open streams are cancelled, the front door and socket folder removed. Safe twice."""
        self._stop.set()
        if self._door is not None:
            self._door.stop()
            self._door = None
        if self._server is not None:
            self._server.stop(grace_s).wait(timeout=grace_s + 2.0)
            self._server = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def __enter__(self) -> PolicyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def active(self) -> int:
        """Streams being served now."""
        with self._lock:
            return len(self._streams)

    def _reap(self) -> None:
        """Cancel streams idle for ``idle_timeout_s``: a client that holds its connection open and sends nothing
        must not keep a worker and a slot."""
        while not self._stop.wait(min(1.0, self.config.idle_timeout_s / 4)):
            now = time.monotonic()
            with self._lock:
                idle = [s for s in self._streams.values() if now - s.last > self.config.idle_timeout_s]
            for stream in idle:
                with self._lock:
                    self.counters.idle_cancelled += 1
                log.info("policy stream from %s idle for %.0f s: cancelled", stream.peer, now - stream.last)
                stream.context.cancel()

    # -- serving ---------------------------------------------------------------------------------------------
    def info(self) -> Any:
        return policy_pb.PolicyInfo(
            protocol=POLICY_PROTOCOL, obs_dim=self.obs_dim, action_dim=self.action_dim, horizon=self.horizon,
            cameras=[policy_pb.CameraInput(group=g, height=s[0], width=s[1]) for g, s in self.cameras.items()],
            metadata_json=json.dumps(self.metadata, default=str), server_id=self.server_id)

    def serve(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        """One client's stream: a chunk per request, from this stream's own copy of the policy."""
        with self._lock:
            if len(self._streams) >= self.config.max_clients:
                self.counters.refused_busy += 1
                busy = True
            else:
                busy = False
                sid = next(self._ids)
                self._streams[sid] = _Stream(context, time.monotonic(), context.peer())
                self.counters.streams_started += 1
        if busy:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the policy server serves {self.config.max_clients} clients at once (max_clients); retry")
        import torch

        try:
            policy = copy.deepcopy(self.policy)  # per-episode state (a chunk queue, a residual's base) per client
            for request in requests:
                stream = self._streams[sid]
                stream.last = time.monotonic()
                try:
                    obs = self._observation(request)
                except ValueError as e:
                    with self._lock:
                        self.counters.bad_requests += 1
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                if request.reset and hasattr(policy, "reset"):
                    policy.reset()
                t0 = time.perf_counter()
                chunk = chunk_of(policy, obs, not self.stochastic).detach().to("cpu", dtype=torch.float32).numpy()
                dt = time.perf_counter() - t0
                with self._lock:
                    self.counters.chunks += 1
                    self.counters.inference_s.append(dt)
                    del self.counters.inference_s[:-10_000]
                stream.chunks += 1
                yield policy_pb.ActionChunk(seq=request.seq, step=request.step, horizon=int(chunk.shape[0]),
                                            actions=chunk.reshape(-1).tolist(), inference_s=dt)
        finally:
            with self._lock:
                self._streams.pop(sid, None)
                self.counters.streams_ended += 1

    def _observation(self, request: Any) -> dict[str, Any]:
        import torch

        state = np.asarray(request.state, np.float32)
        if state.shape != (self.obs_dim,) or not np.all(np.isfinite(state)):
            raise ValueError(f"state must be {self.obs_dim} finite numbers, got {state.size}"
                             + ("" if state.shape != (self.obs_dim,) else " with NaN or inf"))
        obs = {"state": torch.from_numpy(state)[None]}
        frames = {f.group: f for f in request.frames}
        for group, (h, w, _) in self.cameras.items():
            frame = frames.get(group)
            if frame is None:
                raise ValueError(f"the policy reads {group} ({h}x{w}); the request has no frame of it")
            if (frame.height, frame.width) != (h, w) or len(frame.data) != h * w * 3:
                raise ValueError(f"{group}: expected {h}x{w}x3 uint8 ({h * w * 3} bytes), got {frame.height}x"
                                 f"{frame.width} ({len(frame.data)} bytes)")
            obs[group] = torch.frombuffer(bytearray(frame.data), dtype=torch.uint8).reshape(1, h, w, 3)
        return obs


class _Servicer(policy_pb_grpc.PolicyServerServicer):
    def __init__(self, server: PolicyServer) -> None:
        self.server = server

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.server.info()

    def Stream(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        return self.server.serve(request_iterator, context)


class _TokenCheck(grpc.ServerInterceptor):
    """The token on the call's metadata alone, in constant time, on gRPC's polling thread: a refused call is
    answered without its body (or stream) being read, as the bridge's ``Gate`` does."""

    def __init__(self, token: str | None, server: PolicyServer) -> None:
        self._expected = f"Bearer {token}".encode() if token else None
        self._server = server

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        if self._expected is not None:
            supplied = b""
            for key, value in details.invocation_metadata or ():
                if key == "authorization":
                    supplied = value.encode() if isinstance(value, str) else bytes(value)
            if not hmac.compare_digest(supplied, self._expected):
                with self._server._lock:
                    self._server.counters.refused_token += 1
                return _refusal(details.method)
        return continuation(details)


def _refusal(method: str) -> Any:
    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

    if method == STREAM_METHOD:
        return grpc.stream_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)
