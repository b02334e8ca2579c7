"""The learner-side client: ``RobotClient`` (the RPCs) and ``RobotEnv`` (a gymnasium env over them).

Every call carries the token and a deadline. Errors come back as ``BridgeError`` with the gRPC status code and a
message that says what to do (``EStopLatched`` and ``Unauthenticated`` are the ones callers usually handle;
``RobotHolding`` and ``ControlLoopDead`` are ``UNAVAILABLE``: the first passes, the second does not).

``RobotEnv`` is a plain gymnasium env whose ``step`` is one control tick of the remote robot: reward and success
come from the robot side, ``terminated`` is the success flag, the task's time limit is applied on this side, and
``info["applied_action"]`` is the action the robot really executed after the safety clamps (what a transition
should store). A robot with cameras (``RobotSpec.cameras``) gives observations in the project's dict layout,
``{"state": ..., "pixels/<camera>": uint8 (H, W, 3)}`` (``RobotObservation.as_dict``; the groups ``CameraFusion``
reads, as the simulated ``-pixels`` tasks give them), and a ``gym.spaces.Dict`` observation space; without cameras
the observation is the state vector, as before. A frame the server could not send or this side cannot decode is
a ``CameraError`` naming the camera. ``make_env`` wraps it as a batch-of-one ``robot_rl.envs.BatchedEnv`` so the trainer can use it unchanged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import grpc
import gymnasium as gym
import numpy as np

from robot_rl.errors import UserError

from .guard import TOKEN_ENV
from .images import FrameError, decode_frame
from .proto import PROTOCOL, pb, pb_grpc
from .robot import CameraSpec, CartesianLimits, RobotObservation, RobotSpec


class BridgeError(UserError, RuntimeError):
    """A call to the robot server failed; ``code`` is the gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class EStopLatched(BridgeError):
    """The robot's e-stop is latched; an operator must clear it (``RobotClient.clear_estop``)."""


class Unauthenticated(BridgeError):
    """The server refused the token."""


class RobotHolding(BridgeError):
    """The robot's supervisor holds the robot after a soft breach of its measured limits (``UNAVAILABLE``, so
    transient): the command was not executed; retry once the motion is back within limits."""


class CameraError(BridgeError):
    """A camera frame was lost: the server could not send it (``DATA_LOSS``: the driver's frame was bad or too
    big; the step was applied) or this side could not decode it. The message names the camera. Transient in the
    sense that the next observation may be fine; the robot was not stopped."""


class EpisodeChanged(BridgeError):
    """The robot server restarted, or another client reset the robot, since this client's last reply: the step
    was not executed. Call ``reset()`` (a session ends the episode and resets)."""


class ControlLoopDead(BridgeError):
    """The server's control loop died and the driver was stopped; every call fails until serve-robot restarts."""


@dataclass
class StepResult:
    observation: RobotObservation
    applied_action: np.ndarray | None  # None when the tick held
    clamp_flags: int
    tick: int
    queue_s: float


_ESTOP_RETRY_S = 0.01  # pause between e-stop attempts after a transport failure


def _error(e: grpc.RpcError, what: str, address: str) -> BridgeError:
    code, details = e.code(), e.details()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(code, f"{what}: the robot server at {address} refused the token; pass the server's "
                                     f"token (token= or {TOKEN_ENV})")
    if code == grpc.StatusCode.FAILED_PRECONDITION and (details or "").startswith("episode changed"):
        return EpisodeChanged(code, f"{what}: {details}")
    if code == grpc.StatusCode.FAILED_PRECONDITION and "e-stop" in (details or ""):
        return EStopLatched(code, f"{what}: {details}")
    if code == grpc.StatusCode.UNAVAILABLE and (details or "").startswith("supervisor hold"):
        return RobotHolding(code, f"{what}: {details}")
    if code == grpc.StatusCode.DATA_LOSS and (details or "").startswith("camera frame"):
        return CameraError(code, f"{what}: {details}")
    if code == grpc.StatusCode.UNAVAILABLE and "control loop died" in (details or ""):
        return ControlLoopDead(code, f"{what}: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        return BridgeError(code, f"{what}: robot server at {address} unavailable ({details}); is serve-robot running?")
    return BridgeError(code, f"{what}: {code.name}: {details}")


class RobotClient:
    """RPCs to a robot server at ``address`` (``host:port``).

    Args:
        token: the shared token (default: the ``ROBOT_RL_TOKEN`` environment variable).
        step_timeout_s: deadline of ``step``; a tick normally answers within one control period.
        timeout_s: deadline of the other calls except ``reset``.
        reset_timeout_s: deadline of ``reset`` (a real arm may take seconds to move home).
        tls_root_cert: PEM file of the CA (or self-signed server certificate) to trust; enables TLS.
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        step_timeout_s: float = 0.5,
        timeout_s: float = 2.0,
        reset_timeout_s: float = 30.0,
        tls_root_cert: str | None = None,
        tls_server_name: str | None = None,
    ) -> None:
        self.address = address
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.step_timeout_s, self.timeout_s, self.reset_timeout_s = step_timeout_s, timeout_s, reset_timeout_s
        # Own connection per client: gRPC otherwise shares one between channels to the same address, so another
        # client's step flood could use up the server's streams per connection (8) and have this one's EStop refused.
        options = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1),
                   ("grpc.client_idle_timeout_ms", 2**31 - 1)]  # never drop the connection for being idle
        if tls_root_cert:
            with open(tls_root_cert, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = pb_grpc.RobotBridgeStub(self._channel)
        self._seq = 0
        # The server and episode of the last reply: sent with every step, so that a step after the server restarted
        # or someone else reset the robot is refused (EpisodeChanged) instead of acting on a scene it never saw.
        self.server_id = ""
        self.episode: int | None = None
        self._spec: RobotSpec | None = None
        self.watchdog_s = 0.0
        self.image_encoding = ""
        self.frame_bytes = 0  # the last observation's encoded frames, all cameras together (0 without cameras)
        self.decode_s = 0.0  # how long decoding them took

    def _call(self, what: str, method: Any, request: Any, timeout: float) -> Any:
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise _error(e, what, self.address) from None

    def spec(self) -> RobotSpec:
        """The robot's spec (fetched once)."""
        if self._spec is None:
            m = self._call("GetSpec", self._stub.GetSpec, pb.Empty(), self.timeout_s)
            if m.protocol != PROTOCOL:
                raise BridgeError(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"server speaks {m.protocol!r}, this client {PROTOCOL!r}: update one of them")
            cart = None
            if m.cartesian:
                cart = CartesianLimits(tuple(m.workspace_low), tuple(m.workspace_high), m.metres_per_unit,
                                       m.max_step_m, m.max_speed_mps)
            try:
                cameras = tuple(CameraSpec(c.name, c.height, c.width) for c in m.cameras)
                self._spec = RobotSpec(m.name, m.state_dim, m.action_dim, m.control_hz, tuple(m.action_low),
                                       tuple(m.action_high), cart, m.time_limit or None, cameras=cameras,
                                       mirror_state_sign=tuple(m.mirror_state_sign),
                                       mirror_action_sign=tuple(m.mirror_action_sign),
                                       mirror_cameras=tuple(m.mirror_cameras))
            except ValueError as e:
                raise BridgeError(grpc.StatusCode.FAILED_PRECONDITION, f"GetSpec: bad spec: {e}") from None
            self.watchdog_s = m.watchdog_s
            self.image_encoding = m.image_encoding
        return self._spec

    def _observation(self, m: pb.Observation, what: str) -> RobotObservation:
        """The observation with its frames decoded and checked against the spec (``CameraError`` otherwise)."""
        obs = RobotObservation(np.asarray(m.state, np.float32), m.reward, m.success, m.stamp,
                               privileged_state=np.asarray(m.privileged_state, np.float32) if m.privileged_state
                               else None)
        if not len(m.images) and (self._spec is None or not self._spec.cameras):
            return obs  # no cameras: as before, no spec call needed
        spec = self.spec()
        t0 = time.perf_counter()
        self.frame_bytes = sum(len(i.data) for i in m.images)
        got = [i.camera for i in m.images]
        want = [c.name for c in spec.cameras]
        if got != want:
            raise CameraError(grpc.StatusCode.DATA_LOSS, f"{what}: the observation has frames from cameras {got}, "
                                                         f"the spec declares {want}")
        for c, image in zip(spec.cameras, m.images, strict=True):
            try:
                obs.images[c.name] = decode_frame(c.name, image.data, self.image_encoding, c.shape)
            except FrameError as e:
                raise CameraError(grpc.StatusCode.DATA_LOSS, f"{what}: {e}") from None
        self.decode_s = time.perf_counter() - t0
        return obs

    def reset(self, seed: int | None = None) -> RobotObservation:
        request = pb.ResetRequest(has_seed=seed is not None, seed=seed or 0)
        r = self._call("Reset", self._stub.Reset, request, self.reset_timeout_s)
        self.server_id, self.episode = r.server_id, r.episode
        return self._observation(r.observation, "Reset")

    def step(self, action: np.ndarray | None) -> StepResult:
        """Apply ``action`` at the next tick (``None``: hold this tick) and return what happened."""
        self._seq += 1
        if action is None:
            request = pb.StepRequest(hold=True, seq=self._seq)
        else:
            request = pb.StepRequest(action=np.asarray(action, np.float64).reshape(-1).tolist(), seq=self._seq,
                                     server_id=self.server_id, has_episode=self.episode is not None,
                                     episode=self.episode or 0)
        r = self._call("Step", self._stub.Step, request, self.step_timeout_s)
        if not self.server_id:  # the first reply of a client that never reset: from now on, this server and episode
            self.server_id, self.episode = r.server_id, r.episode
        applied = np.asarray(r.applied_action, np.float32) if len(r.applied_action) else None
        return StepResult(self._observation(r.observation, "Step"), applied, r.clamp_flags, r.tick, r.queue_s)

    def heartbeat(self) -> pb.Status:
        return self._call("Heartbeat", self._stub.Heartbeat, pb.Empty(), self.timeout_s)

    def estop(self, reason: str = "client") -> pb.Status:
        """Latch the robot's e-stop. A transport failure (UNAVAILABLE from gRPC itself, not from the server) is
        retried until ``timeout_s`` has passed: latching is idempotent, and under a flood of camera frames the
        server's HTTP/2 layer once refused the stream (RST_STREAM REFUSED_STREAM, never processed), which no other
        call retries (the channel has gRPC's retries off, so a step is never sent twice)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return self._call("EStop", self._stub.EStop, pb.EStopRequest(reason=reason),
                                  max(0.01, deadline - time.monotonic()))
            except BridgeError as e:
                transport = type(e) is BridgeError and e.code == grpc.StatusCode.UNAVAILABLE
                if not transport or time.monotonic() + _ESTOP_RETRY_S >= deadline:
                    raise
                time.sleep(_ESTOP_RETRY_S)

    def clear_estop(self) -> pb.Status:
        return self._call("ClearEStop", self._stub.ClearEStop, pb.Empty(), self.timeout_s)

    def status(self) -> pb.Status:
        return self._call("GetStatus", self._stub.GetStatus, pb.Empty(), self.timeout_s)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RobotClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RobotEnv(gym.Env):
    """A remote robot as a gymnasium env (see the module docstring). ``terminate_on_success`` ends episodes on
    the robot's success flag, as the simulated tasks do."""

    metadata = {"render_modes": []}

    def __init__(self, client: RobotClient, terminate_on_success: bool = True) -> None:
        self.client = client
        spec = client.spec()
        self.spec_robot = spec
        self.terminate_on_success = terminate_on_success
        state = gym.spaces.Box(-np.inf, np.inf, (spec.state_dim,), np.float32)
        self.pixels = bool(spec.cameras)
        if self.pixels:  # the layout of ArmEnv(pixels=True): state, then one group per camera
            self.observation_space: gym.Space = gym.spaces.Dict(
                {"state": state, **{c.group: gym.spaces.Box(0, 255, c.shape, np.uint8) for c in spec.cameras}})
        else:
            self.observation_space = state
        self.action_space = gym.spaces.Box(
            np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
        )
        self.last_state: np.ndarray | None = None

    def _obs(self, obs: RobotObservation) -> Any:
        return obs.as_dict() if self.pixels else obs.state

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        obs = self.client.reset(seed)
        self.last_state = obs.state
        return self._obs(obs), {"success": obs.success}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        r = self.client.step(np.asarray(action))
        obs = r.observation
        self.last_state = obs.state
        info = {"success": obs.success, "applied_action": r.applied_action, "clamp_flags": r.clamp_flags,
                "queue_s": r.queue_s, "tick": r.tick}
        return self._obs(obs), obs.reward, bool(obs.success and self.terminate_on_success), False, info

    def close(self) -> None:
        self.client.close()


def make_env(
    address: str,
    token: str | None = None,
    *,
    device: str = "cpu",
    seed: int | None = None,
    max_episode_steps: int | None = None,
    **client_kwargs: Any,
) -> Any:
    """The remote robot as a batch-of-one ``robot_rl.envs.BatchedEnv`` (time limit: ``max_episode_steps`` or the spec's)."""
    from robot_rl.envs import SyncBatchedEnv

    env: gym.Env = RobotEnv(RobotClient(address, token, **client_kwargs))
    limit = max_episode_steps or env.spec_robot.time_limit
    if limit:
        env = gym.wrappers.TimeLimit(env, int(limit))
    return SyncBatchedEnv(f"bridge:{address}", [env], device=device, seed=seed, max_episode_steps=limit)
