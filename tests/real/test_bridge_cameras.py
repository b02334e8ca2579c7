"""Camera frames over the bridge, on loopback: the simulated arm's front and wrist cameras through a real server.

What must hold: the spec lists the cameras; frames arrive exact with PNG and close with JPEG, in the observation
dict layout of the simulated ``-pixels`` tasks; the pixel arm's state is the pixel tasks' proprioception while the
plain arm's is unchanged (and costs no image bytes); a bad frame from the driver (wrong shape, too big) fails that
one reply with a message naming the camera and the server goes on serving, robot not stopped; corrupt bytes on the
client side are a ``CameraError`` naming the camera. The fault tests use a tiny pattern robot (no rendering).
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
import pytest
from robot_rl.envs.arm import ArmEnv
from robot_rl.real.client import BridgeError, CameraError, RobotClient, RobotEnv
from robot_rl.real.drivers.sim_arm import SimArm
from robot_rl.real.images import FrameError, decode_frame, encode_frame
from robot_rl.real.proto import pb
from robot_rl.real.robot import CameraSpec, Robot, RobotObservation, RobotSpec
from robot_rl.real.server import RobotServer, ServerConfig, StartupError

TOKEN = "camera-token"
SIZE = (48, 64)  # not square: a swapped height and width would show


class CamArm(SimArm):
    """The pixel arm, remembering every observation the server read, by stamp."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: dict[float, dict[str, np.ndarray]] = {}

    def observe(self) -> RobotObservation:
        obs = super().observe()
        self.seen[obs.stamp] = obs.images
        return obs

    def reset(self, seed=None) -> RobotObservation:
        obs = super().reset(seed)
        self.seen[obs.stamp] = obs.images
        return obs


def _serve(robot: Robot, **config) -> tuple[RobotServer, RobotClient]:
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN, **config))
    port = server.start()
    return server, RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0, reset_timeout_s=30.0)


@pytest.mark.parametrize("encoding", ["png", "jpeg"])
def test_sim_arm_frames_round_trip(encoding):
    robot = CamArm(task="push", control_hz=20.0, seed=0, pixels=True, pixel_size=SIZE)
    server, client = _serve(robot, image_encoding=encoding)
    try:
        spec = client.spec()
        assert [(c.name, c.height, c.width) for c in spec.cameras] == [("front", *SIZE), ("wrist", *SIZE)]
        assert client.image_encoding == encoding and spec.state_dim == 7 and spec.name == "sim_arm:push-pixels"
        env = RobotEnv(client)
        assert set(env.observation_space.spaces) == {"state", "pixels/front", "pixels/wrist"}
        assert env.observation_space["pixels/wrist"].shape == (*SIZE, 3)
        first, _ = env.reset(seed=2)
        results = [client.step([0.5, 0.0, 0.3, -1.0]) for _ in range(3)]
        observations = [r.observation for r in results]
        assert set(first) == {"state", "pixels/front", "pixels/wrist"} and first["state"].shape == (7,)
        errors = []
        for obs in observations:
            sent = robot.seen[obs.stamp]  # the frames the driver gave for this very tick
            for name in ("front", "wrist"):
                got = obs.images[name]
                assert got.dtype == np.uint8 and got.shape == (*SIZE, 3)
                errors.append(float(np.abs(got.astype(int) - sent[name]).mean()))
        if encoding == "png":
            assert max(errors) == 0.0
        else:
            assert max(errors) < 4.0, errors  # quality 90, no chroma subsampling: ~1.4 on 84x84 frames
        assert observations[0].images["front"].std() > 5  # a rendered scene, not a blank frame
        status = server.status()
        assert status.state == "running" and status.estops == 0 and "bad_frame" not in status.rejected
    finally:
        client.close()
        server.stop()


def test_pixel_state_is_the_pixel_tasks_proprioception_and_the_plain_arm_is_unchanged():
    pixel, full, plain = (SimArm(task="reach", seed=None, pixels=True, pixel_size=SIZE),
                          SimArm(task="reach", seed=None, pixels=True, pixel_size=SIZE, full_state=True),
                          SimArm(task="reach", seed=None))
    env, state_env = ArmEnv("reach", pixels=True, pixel_size=SIZE), ArmEnv("reach")
    try:
        want, _ = env.reset(seed=5)
        got = pixel.reset(seed=5)
        assert pixel.spec.state_dim == 7 and pixel.spec.state_layout == {"ee_pos": (0, 3), "ee_vel": (3, 6),
                                                                         "gripper": (6, 7)}
        np.testing.assert_array_equal(got.state, want["state"])
        np.testing.assert_array_equal(got.as_dict()["pixels/front"], want["pixels/front"])
        np.testing.assert_array_equal(got.images["wrist"], want["pixels/wrist"])
        full_state, _ = state_env.reset(seed=5)
        assert full.spec.state_dim == 29
        np.testing.assert_array_equal(full.reset(seed=5).state, full_state)
        assert plain.spec.state_dim == 29 and plain.spec.cameras == () and plain.spec.name == "sim_arm:reach"
        obs = plain.reset(seed=5)
        np.testing.assert_array_equal(obs.state, full_state)
        assert obs.images == {} and set(obs.as_dict()) == {"state"}
    finally:
        for r in (pixel, full, plain):
            r.disconnect()
        env.close()


class PatternRobot(Robot):
    """A robot without physics whose cameras show the tick number; ``bad`` spoils the next frames."""

    def __init__(self, cameras=(("front", 24, 32), ("wrist", 24, 32)), hz: float = 50.0) -> None:
        self.spec = RobotSpec("pattern", 3, 4, hz, (-1.0,) * 4, (1.0,) * 4,
                              cameras=tuple(CameraSpec(*c) for c in cameras))
        self.ticks = 0
        self.bad: str | None = None

    def _obs(self) -> RobotObservation:
        images = {c.name: np.full(c.shape, self.ticks % 256, np.uint8) for c in self.spec.cameras}
        if self.bad == "shape":
            images["wrist"] = np.zeros((10, 10, 3), np.uint8)
        elif self.bad == "dtype":
            images["front"] = images["front"].astype(np.float32)
        elif self.bad == "noise":  # incompressible: over a small max_frame_bytes
            images["front"] = np.random.default_rng(self.ticks).integers(0, 256, images["front"].shape, np.uint8)
        elif self.bad == "missing":
            del images["wrist"]
        return RobotObservation(np.zeros(3, np.float32), stamp=float(self.ticks), images=images)

    def reset(self, seed=None) -> RobotObservation:
        return self._obs()

    def observe(self) -> RobotObservation:
        return self._obs()

    def command(self, action) -> None:
        self.ticks += 1

    def hold(self) -> None:
        self.ticks += 1


@pytest.mark.parametrize("bad, match", [("shape", "camera 'wrist': frame must be uint8"),
                                        ("dtype", "camera 'front': frame must be uint8"),
                                        ("noise", "camera 'front': encoded frame of"),
                                        ("missing", "camera 'wrist': no frame")])
def test_a_bad_frame_fails_its_reply_and_the_server_keeps_serving(bad, match):
    robot = PatternRobot()
    server, client = _serve(robot, image_encoding="png", max_frame_bytes=1000)
    try:
        assert client.step([0, 0, 0, 0]).observation.images["front"].shape == (24, 32, 3)
        robot.bad = bad
        with pytest.raises(CameraError, match=match) as info:
            client.step([0, 0, 0, 0])
        assert "applied" in str(info.value) and "\n" not in str(info.value)
        robot.bad = None
        r = client.step([0, 0, 0, 0])
        assert r.observation.images["wrist"].shape == (24, 32, 3)
        status = server.status()
        assert status.rejected["bad_frame"] == 1 and status.state == "running" and status.health == "ok"
        assert status.estops == 0 and status.stops == 0
    finally:
        client.close()
        server.stop()


def test_the_observation_size_limit_and_startup_checks():
    server = RobotServer(PatternRobot(), ServerConfig(port=0, token=TOKEN, image_encoding="png",
                                                      max_frame_bytes=3000, max_observation_bytes=3000))
    noise = np.random.default_rng(0).integers(0, 256, (24, 32, 3), np.uint8)  # ~2.3 kB as PNG
    with pytest.raises(FrameError, match="exceed 3,000 bytes together"):
        server._encode_images({"front": noise, "wrist": noise})
    assert len(server._encode_images({"front": noise, "wrist": noise[:, :, :] * 0})) == 2
    with pytest.raises(ValueError, match="max_frame_bytes <= max_observation_bytes"):
        ServerConfig(token=TOKEN, max_frame_bytes=10, max_observation_bytes=5).validate()
    with pytest.raises(ValueError, match="image_encoding"):
        ServerConfig(token=TOKEN, image_encoding="webp").validate()
    with pytest.raises(ValueError, match="camera name"):
        CameraSpec("pixels/front", 8, 8)
    robot = PatternRobot()
    robot.bad = "shape"  # the first observation does not match the declared cameras
    with pytest.raises(StartupError, match="does not match its cameras: camera 'wrist'"):
        RobotServer(robot, ServerConfig(port=0, token=TOKEN)).start()


def test_corrupt_bytes_are_a_client_error_naming_the_camera():
    server, client = _serve(PatternRobot(), image_encoding="jpeg")
    try:
        good = client.step([0, 0, 0, 0])
        assert good.observation.images["front"].shape == (24, 32, 3)
        ok = encode_frame("wrist", np.zeros((24, 32, 3), np.uint8), "jpeg")
        bad_cases = {
            "garbage": ([pb.Image(camera="front", data=b"\xff\xd8 not a jpeg"), pb.Image(camera="wrist", data=ok)],
                        "camera 'front': 13 bytes do not decode as jpeg \\(not an image"),
            "truncated": ([pb.Image(camera="front", data=ok), pb.Image(camera="wrist", data=ok[: len(ok) // 2])],
                          "camera 'wrist'"),
            "size": ([pb.Image(camera="front", data=encode_frame("front", np.zeros((32, 24, 3), np.uint8))),
                      pb.Image(camera="wrist", data=ok)], "camera 'front': frame is 32x24, the spec says 24x32"),
            "cameras": ([pb.Image(camera="wrist", data=ok)], "frames from cameras \\['wrist'\\]"),
        }
        for images, match in bad_cases.values():
            with pytest.raises(CameraError, match=match):
                client._observation(pb.Observation(state=[0, 0, 0], images=images), "Step")
        assert client.step([0, 0, 0, 0]).observation.images["wrist"].shape == (24, 32, 3)
    finally:
        client.close()
        server.stop()
    # Decoding refuses a declared size other than the spec's before decompressing it.
    huge = encode_frame("front", np.zeros((2048, 2048, 3), np.uint8), "png")
    with pytest.raises(FrameError, match="frame is 2048x2048"):
        decode_frame("front", huge, "png", (24, 32, 3))


def test_without_cameras_replies_carry_no_image_bytes():
    robot = PatternRobot(cameras=())
    server, client = _serve(robot)
    try:
        assert client.spec().cameras == () and client.image_encoding == ""
        msg = server.spec_message()
        assert len(msg.cameras) == 0 and msg.image_encoding == "" and msg.max_frame_bytes == 0
        obs = client.step([0, 0, 0, 0]).observation
        assert obs.images == {}
        env = RobotEnv(client)
        state, _ = env.reset()
        assert isinstance(state, np.ndarray) and state.shape == (3,)
        # On the wire: an observation without cameras has exactly the fields it had before cameras existed.
        reply = client._stub.Step(pb.StepRequest(action=[0, 0, 0, 0], seq=9), timeout=5.0,
                                  metadata=client._metadata)
        o = reply.observation
        assert len(o.images) == 0
        assert o.ByteSize() == pb.Observation(state=o.state, reward=o.reward, success=o.success,
                                              stamp=o.stamp).ByteSize()
    finally:
        client.close()
        server.stop()


class NoiseRobot(PatternRobot):
    """Two 192x256 cameras of incompressible noise: ~150 kB per frame, ~300 kB per reply."""

    def __init__(self) -> None:
        super().__init__(cameras=(("front", 192, 256), ("wrist", 192, 256)))
        self._noise = np.random.default_rng(0).integers(0, 256, (4, 192, 256, 3), np.uint8)

    def _obs(self) -> RobotObservation:
        images = {c.name: self._noise[(self.ticks + i) % 4].copy() for i, c in enumerate(self.spec.cameras)}
        return RobotObservation(np.zeros(3, np.float32), stamp=float(self.ticks), images=images)


def _clear_estop_despite_the_flood(client: RobotClient) -> None:
    """ClearEStop is ordinary traffic with no reserved capacity: under this flood of ~300 kB replies the server
    may refuse its stream (RST_STREAM REFUSED_STREAM, seen under load), which fails safe (the robot stays
    stopped); an operator tries again, and so does this."""
    for _ in range(100):
        try:
            client.clear_estop()
            return
        except BridgeError:
            time.sleep(0.02)
    client.clear_estop()


def test_frame_traffic_cannot_starve_the_estop():
    server, client = _serve(NoiseRobot(), image_encoding="png", watchdog_s=2.0)
    address = f"127.0.0.1:{server.port}"
    stop = threading.Event()
    frames = [0]

    def stream() -> None:  # step as fast as the server answers; most get "busy", one per tick gets ~300 kB
        c = RobotClient(address, TOKEN, step_timeout_s=2.0)
        while not stop.is_set():
            try:
                c.step([0, 0, 0, 0])
                frames[0] += 1
            except Exception:
                pass
        c.close()

    threads = [threading.Thread(target=stream, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    latencies = []
    try:
        while frames[0] < 5:
            time.sleep(0.02)
        for i in range(8):
            t0 = time.perf_counter()
            client.estop(f"probe {i}")
            latencies.append(time.perf_counter() - t0)
            _clear_estop_despite_the_flood(client)
            time.sleep(0.05)  # let frame traffic resume between probes
    finally:
        stop.set()
        for t in threads:
            t.join(5.0)
        client.close()
        estops = server.status().estops
        server.stop()
    assert frames[0] >= 5, frames
    assert statistics.median(latencies) < 0.05, latencies
    assert max(latencies) < 0.5, latencies  # a hypervisor stall, not starvation
    assert estops == 8


def test_batched_env_over_a_camera_robot_has_the_pixel_groups():
    import torch
    from robot_rl.real.client import make_env

    server = RobotServer(PatternRobot(), ServerConfig(port=0, token=TOKEN, image_encoding="png"))
    port = server.start()
    env = make_env(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0, max_episode_steps=5)
    try:
        obs = env.reset()
        assert obs["state"].shape == (1, 3) and obs["pixels/front"].shape == (1, 24, 32, 3)
        assert obs["pixels/wrist"].dtype == torch.uint8
        obs, *_ = env.step(torch.zeros(1, 4))
        assert set(obs) >= {"state", "pixels/front", "pixels/wrist"}
    finally:
        env.close()
        server.stop()
