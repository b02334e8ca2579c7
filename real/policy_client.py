"""The robot side of ``robot-rl serve-policy``: action chunks from a policy served elsewhere, and a control loop
that never waits for them.

* ``PolicyClient``: one bidirectional stream to the server (token in the metadata, TLS optional, keepalive pings),
  read by a thread of its own. ``request`` hands an observation to the stream and returns at once (it refuses while
  a request is unanswered: at most one in flight); ``take`` returns the newest chunk that arrived, if any. A broken
  stream (the server restarted, the network went) is reopened by that thread once a second; the caller is never
  blocked and keeps its last chunk meanwhile.
* ``ChunkPlayer``: which action goes out at each control step. A chunk requested from the observation of step t is
  for steps t + lead, t + lead + 1, ... (``lead`` = 1: the current step's action is decided now, from what is
  already there); the actions of steps that passed while it was computed are skipped. When a newer chunk takes
  over, the overlap is blended over ``blend_steps`` steps from the old chunk's actions to the new one's, and at
  every step of a splice the output moves by at most ``max_change`` per entry from the previous output (the robot's
  per-step limit): no jump where two chunks meet. Past the end of the last chunk there is nothing to play: the
  player returns None and the robot holds.
* ``RemotePolicy``: the two together as a policy callable for ``robot_rl.hil.session.Session`` (``robot-rl deploy
  policy_server=``): each call looks at what arrived, requests the next chunk when the current one runs low, and
  returns this step's action (or None: hold) without waiting.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from .guard import TOKEN_ENV
from .proto import POLICY_PROTOCOL, policy_pb, policy_pb_grpc

__all__ = ["Chunk", "ChunkPlayer", "PolicyClient", "PolicyInfo", "RemotePolicy"]


class PolicyServerError(RuntimeError):
    """The policy server refused us or cannot be reached; one line."""


@dataclass(frozen=True)
class PolicyInfo:
    obs_dim: int
    action_dim: int
    horizon: int
    cameras: dict[str, tuple[int, int, int]]
    metadata: dict[str, Any]
    server_id: str


@dataclass(frozen=True)
class Chunk:
    """``actions[i]`` is for control step ``step + i``; ``latency_s``: from the request to its arrival."""

    seq: int
    step: int
    actions: np.ndarray  # [H, A]
    latency_s: float
    inference_s: float


class PolicyClient:
    """One robot client's stream to a policy server (module docstring)."""

    def __init__(self, address: str, token: str | None = None, *, tls_root_cert: str | None = None,
                 timeout_s: float = 5.0, retry_s: float = 1.0) -> None:
        self.address, self.timeout_s, self.retry_s = address, timeout_s, retry_s
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        # Own connection (as the bridge's client), keepalive pings: a server that vanished is noticed in seconds.
        options = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1),
                   ("grpc.keepalive_time_ms", 2000), ("grpc.keepalive_timeout_ms", 4000),
                   ("grpc.keepalive_permit_without_calls", 1), ("grpc.max_receive_message_length", 16 << 20),
                   ("grpc.max_send_message_length", 16 << 20)]
        if tls_root_cert:
            with open(tls_root_cert, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = policy_pb_grpc.PolicyServerStub(self._channel)
        self._lock = threading.Lock()
        self._queue: queue.Queue[Any] | None = None
        self._sent: dict[int, float] = {}  # seq -> when it was sent
        self._latest: Chunk | None = None
        self._seq = 0
        self._closed = threading.Event()
        self._reader: threading.Thread | None = None
        self.in_flight = False
        self.error: str | None = None  # the last stream error, None while the stream is up
        self.stream_errors = 0

    def info(self) -> PolicyInfo:
        """The served policy's sizes and metadata (blocking, once at start); a refused token is one line."""
        try:
            m = self._stub.GetInfo(policy_pb.InfoRequest(), timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise PolicyServerError(f"the policy server at {self.address} refused the token; pass the server's "
                                        f"token (token= or {TOKEN_ENV})") from None
            raise PolicyServerError(f"policy server at {self.address} unavailable ({e.code().name}: {e.details()}); "
                                    "is serve-policy running?") from None
        if m.protocol != POLICY_PROTOCOL:
            raise PolicyServerError(f"{self.address} speaks {m.protocol!r}, not {POLICY_PROTOCOL!r}")
        return PolicyInfo(int(m.obs_dim), int(m.action_dim), int(m.horizon),
                          {c.group: (int(c.height), int(c.width), 3) for c in m.cameras},
                          json.loads(m.metadata_json or "{}"), m.server_id)

    def open(self) -> PolicyClient:
        """Start the stream and its reader thread (returns at once)."""
        self._reader = threading.Thread(target=self._read, name="policy-client", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        while not self._closed.is_set():
            q: queue.Queue[Any] = queue.Queue()
            with self._lock:
                self._queue = q

            def requests(q: queue.Queue[Any] = q) -> Any:
                while (item := q.get()) is not None:
                    yield item

            call = None
            try:
                call = self._stub.Stream(requests(), metadata=self._metadata)
                with self._lock:
                    self.error = None
                for reply in call:
                    now = time.monotonic()
                    with self._lock:
                        sent = self._sent.pop(int(reply.seq), now)
                        self.in_flight = False
                        actions = np.asarray(reply.actions, np.float32).reshape(int(reply.horizon), -1)
                        self._latest = Chunk(int(reply.seq), int(reply.step), actions, now - sent,
                                             float(reply.inference_s))
            except grpc.RpcError as e:
                if self._closed.is_set():
                    break
                with self._lock:
                    self.error = f"{e.code().name}: {e.details()}"
                    self.stream_errors += 1
            finally:
                q.put(None)  # ends this stream's request generator, whichever thread gRPC reads it on
                with self._lock:
                    self._queue, self.in_flight = None, False
                    self._sent.clear()
                if call is not None:
                    call.cancel()
            self._closed.wait(self.retry_s)

    def request(self, step: int, state: np.ndarray, frames: dict[str, np.ndarray] | None = None,
                reset: bool = False) -> bool:
        """Ask for the chunk of the observation ``state`` (+ camera ``frames``), for steps from ``step``. Returns
        at once; False (nothing sent) while a request is unanswered or the stream is down."""
        with self._lock:
            if self.in_flight or self._queue is None:
                return False
            self._seq += 1
            self.in_flight = True
            self._sent[self._seq] = time.monotonic()
            q, seq = self._queue, self._seq
        images = [policy_pb.Frame(group=g, height=f.shape[0], width=f.shape[1], data=np.ascontiguousarray(
            f, np.uint8).tobytes()) for g, f in (frames or {}).items()]
        q.put(policy_pb.ChunkRequest(seq=seq, step=step, state=np.asarray(state, np.float32).tolist(),
                                     frames=images, reset=reset))
        return True

    def take(self) -> Chunk | None:
        """The newest chunk that arrived since the last call, else None."""
        with self._lock:
            chunk, self._latest = self._latest, None
        return chunk

    @property
    def seq(self) -> int:
        with self._lock:
            return self._seq

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._queue is not None:
                self._queue.put(None)
        self._channel.close()
        if self._reader is not None:
            self._reader.join(timeout=5.0)

    def __enter__(self) -> PolicyClient:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class PlayerStats:
    """What a ``ChunkPlayer`` did: chunks taken over, actions of passed steps skipped, held steps, and the largest
    per-entry change of the output at a splice and within a chunk."""

    chunks: int = 0
    splices: int = 0
    skipped: int = 0
    holds: int = 0
    splice_change: list[float] = field(default_factory=list)  # max |a_t - a_{t-1}| at each splice step
    max_change_within: float = 0.0


class ChunkPlayer:
    """The action of each control step from the chunks that arrived (module docstring)."""

    def __init__(self, action_dim: int, blend_steps: int = 3, max_change: float | None = None) -> None:
        if blend_steps < 0:
            raise ValueError(f"blend_steps must be >= 0, got {blend_steps}")
        if max_change is not None and not max_change > 0:
            raise ValueError(f"max_change must be > 0 or None, got {max_change}")
        self.action_dim, self.blend_steps, self.max_change = action_dim, blend_steps, max_change
        self.stats = PlayerStats()
        self.reset()

    def reset(self) -> None:
        """A new episode: no chunk, nothing to blend from."""
        self._current: Chunk | None = None
        self._old: Chunk | None = None
        self._pending: Chunk | None = None
        self._splice_at: int | None = None
        self._last: np.ndarray | None = None

    def offer(self, chunk: Chunk) -> None:
        """A chunk that arrived; it takes over at the first step it has an action for (a newer one replaces it)."""
        if self._pending is None or chunk.seq > self._pending.seq:
            self._pending = chunk

    def remaining(self, step: int) -> int:
        """Actions left for the steps after ``step`` in the newest chunk known (pending included)."""
        newest = self._pending or self._current
        return 0 if newest is None else max(0, newest.step + len(newest.actions) - step - 1)

    def _at(self, chunk: Chunk | None, step: int) -> np.ndarray | None:
        if chunk is None:
            return None
        i = step - chunk.step
        return chunk.actions[i] if 0 <= i < len(chunk.actions) else None

    def action(self, step: int) -> np.ndarray | None:
        """The action of control step ``step`` (steps only go forward), or None: nothing to play, hold."""
        new = self._pending
        if new is not None and new.step <= step:
            self._pending = None
            if step >= new.step + len(new.actions):
                self.stats.skipped += len(new.actions)  # arrived too late for every one of its steps
            else:
                self.stats.skipped += step - new.step
                self.stats.chunks += 1
                if self._current is not None or self._last is not None:
                    self._old, self._splice_at = self._current, step
                    self.stats.splices += 1
                self._current = new
        target = self._at(self._current, step)
        if target is None:
            self.stats.holds += 1
            self._last = None  # a held step: the robot stood still, the next action starts afresh
            self._splice_at = None
            return None
        splicing = self._splice_at is not None
        if splicing:
            k = step - self._splice_at
            old = self._at(self._old, step)
            old = self._last if old is None else old
            if k < self.blend_steps and old is not None:
                w = (k + 1) / (self.blend_steps + 1)
                target = (1.0 - w) * old + w * target
        out = np.asarray(target, np.float32)
        if splicing and self._last is not None and self.max_change is not None:
            out = np.clip(out, self._last - self.max_change, self._last + self.max_change).astype(np.float32)
        if self._last is not None:
            change = float(np.max(np.abs(out - self._last)))
            if splicing:
                self.stats.splice_change.append(change)
            else:
                self.stats.max_change_within = max(self.stats.max_change_within, change)
        if splicing and step - self._splice_at + 1 >= self.blend_steps and np.allclose(
                out, self._at(self._current, step), atol=1e-6):
            self._splice_at, self._old = None, None  # caught up with the new chunk: the splice is over
        self._last = out
        return out


class RemotePolicy:
    """A served policy as ``Session``'s policy callable (module docstring): never waits for the server.

    ``refill``: request the next chunk when this many actions or fewer are left (default: half the horizon, at
    least 1); ``lead``: the first step a chunk is for, after the step of its observation.
    """

    def __init__(self, client: PolicyClient, info: PolicyInfo, *, blend_steps: int = 3,
                 max_change: float | None = None, refill: int | None = None, lead: int = 1) -> None:
        self.client, self.info, self.lead = client, info, lead
        self.refill = refill if refill is not None else max(1, info.horizon // 2)
        self.player = ChunkPlayer(info.action_dim, blend_steps, max_change)
        self.step = 0
        self._new_episode = True
        self._episode_seq = 0  # chunks of requests before this sequence number belong to the last episode
        self.latencies: list[float] = []
        self.inference: list[float] = []
        self.requests = self.skipped_requests = 0

    def reset(self) -> None:
        self.player.reset()
        self.step = 0
        self._new_episode = True
        self._episode_seq = self.client.seq + 1
        self.client.take()

    def __call__(self, view: Any) -> np.ndarray | None:
        step = self.step
        self.step += 1
        if (chunk := self.client.take()) is not None and chunk.seq >= self._episode_seq:
            self.latencies.append(chunk.latency_s)
            self.inference.append(chunk.inference_s)
            self.player.offer(chunk)
        if self._new_episode or self.player.remaining(step) <= self.refill:
            state, frames = (view["state"], {g: view[g] for g in self.info.cameras}) if isinstance(view, dict) \
                else (view, {})
            if self.client.request(step + self.lead, state, frames, reset=self._new_episode):
                self.requests += 1
                self._new_episode = False
            else:
                self.skipped_requests += 1
        return self.player.action(step)

    def summary(self) -> str:
        s = self.player.stats
        lat = np.asarray(self.latencies or [np.nan]) * 1000
        splice = max(s.splice_change) if s.splice_change else 0.0
        return (f"served policy: {s.chunks} chunks, latency p50 {np.nanpercentile(lat, 50):.1f} ms p99 "
                f"{np.nanpercentile(lat, 99):.1f} ms, {s.splices} splices (max action change {splice:.3f}; within "
                f"chunks {s.max_change_within:.3f}), {s.holds} held steps, {s.skipped} late actions skipped, "
                f"{self.client.stream_errors} stream errors")
