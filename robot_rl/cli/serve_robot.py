"""`robot-rl serve-robot`: serve a robot driver (the simulated arm, ur_rtde, LeRobot's arms) over the bridge: the robot side."""

from __future__ import annotations

import atexit
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from robot_rl.cli.robot import TOKEN_ENV, robot_command
from robot_rl.fields import help_field as _help
from robot_rl.hil import connect
from robot_rl.hil.connect import CommandError
from robot_rl.signals import sigterm_as_interrupt


@dataclass
class ServeRobotArgs:
    driver: str = _help("sim_arm", "robot driver: sim_arm (simulated MuJoCo arm), ur_rtde or lerobot (any LeRobot "
                                   "arm in joint space; both untested on hardware)")
    driver_args: dict[str, Any] = _help(
        {}, "driver constructor arguments, one key each: driver_args.<name>=<value> (ur_rtde: driver_args.ip=...; "
            "lerobot: driver_args.robot_type=so101_follower driver_args.port=... driver_args.id=... "
            "driver_args.arm_file=so101.json: docs/hardware.md)"
    )
    task: str = _help("reach", "sim_arm: reach, push, pick_place or track (a moving target)")
    reward: str = _help("dense", "sim_arm: dense or sparse")
    control_hz: float = _help(20.0, "sim_arm: control rate of the loop")
    seed: int = _help(0, "sim_arm: seed of the first episode")
    pixels: bool = _help(
        False, "sim_arm: serve the front and wrist cameras; the state is then proprioception only, as in the "
               "<task>-pixels tasks; the scene's state goes only to simulated operators (driver_args.full_state=true "
               "serves it as the state: privileged)"
    )
    pixel_size: list[int] = _help([84, 84], "sim_arm: camera frames' height and width")
    practice: bool = _help(
        False, "sim_arm: autonomous practice: a client's reset puts the scene back without a person (practice_reset), "
               "the reset motion takes the hand home and a new target is drawn; only a stuck scene (the cube out of "
               "reach or off the table) is put back by hand, logged as a human reset. The scene has ramps and fences "
               "that keep a pushed cube within reach"
    )
    practice_reset: str = _help(
        "expert", "sim_arm, practice=true: expert: a scripted reset controller moves the cube to a fresh start first "
                  "(simulated, in robot time); home: the cube stays where the episode left it"
    )
    image_encoding: str = _help("jpeg", "camera frames on the wire: jpeg, or png (lossless, larger)")
    max_frame_bytes: int = _help(256 * 1024, "an encoded camera frame above this fails its step (DATA_LOSS)")
    host: str = _help("127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
    port: int = _help(50051, "port to listen on (0: any free port, printed at start)")
    token_file: str | None = _help(None, f"file whose first line is the shared token (default: ${TOKEN_ENV})")
    token: str | None = _help(
        None, f"shared token (visible to every local user in the process list: prefer ${TOKEN_ENV} or token_file=)"
    )
    allow_unauthenticated: bool = _help(False, "serve without a token (refused unless host= is a loopback address)")
    allow_plaintext_token: bool = _help(
        False, "serve with a token but without TLS off loopback (the token, which can clear the e-stop, crosses the "
               "network in clear: only on a network you trust)"
    )
    max_connections: int = _help(512, "client connections open at once, all peers together")
    max_connections_per_peer: int = _help(32, "client connections from one peer address")
    handshake_timeout_s: float = _help(2.0, "close a connection that has not sent a valid HTTP/2 or TLS start by then")
    watchdog_s: float = _help(0.5, "hold the robot after this long without commands")
    max_message_bytes: int = _help(64 * 1024, "larger requests are refused")
    tls_cert: str | None = _help(None, "PEM certificate chain (with tls_key=: TLS)")
    tls_key: str | None = _help(None, "PEM private key of tls_cert=")
    status_every: float = _help(10.0, "seconds between status lines (0: none)")
    run_for: float = _help(0.0, "stop after this many seconds (0: until Ctrl-C)")
    reward_classifier: str | None = _help(
        None, "a success classifier directory (robot-rl classifier): every observation's reward and success become "
              "its verdict on the robot's frames, for every client; it runs inside the control tick (CPU)"
    )
    reward_classifier_threshold: float = _help(0.5, "classifier probability at or above which a frame is a success")
    reward_classifier_consecutive: int = _help(1, "success needs this many commanded steps in a row above the threshold")


def serve_robot(args: ServeRobotArgs) -> int:
    """Serve a robot driver over the bridge."""
    from robot_rl.real.drivers import make_driver
    from robot_rl.real.guard import format_address
    from robot_rl.real.output import OutputPump
    from robot_rl.real.server import RobotServer, ServerConfig

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("robot_rl.real").setLevel(logging.INFO)

    kwargs = dict(args.driver_args)
    if args.pixels and args.driver != "sim_arm":
        raise CommandError(f"pixels=true is the simulated arm's cameras; {args.driver} takes its cameras as "
                           "driver_args.cameras (see docs/hardware.md, Cameras)")
    if args.practice_reset not in ("expert", "home"):
        raise CommandError(f"practice_reset must be one of 'expert', 'home', got {args.practice_reset!r}")
    if args.practice and args.driver != "sim_arm":
        raise CommandError(f"practice=true is the simulated arm's reset-free scene; a physical robot's scene is what "
                           f"it is: {args.driver} has no reset to skip")
    if args.driver == "sim_arm":
        kwargs = {"task": args.task, "reward": args.reward, "control_hz": args.control_hz, "seed": args.seed,
                  "pixels": args.pixels, "pixel_size": tuple(args.pixel_size), "practice": args.practice,
                  "practice_reset": args.practice_reset, **kwargs}
    token = connect.token(args)
    config = ServerConfig(host=args.host, port=args.port, token=token, allow_unauthenticated=args.allow_unauthenticated,
                          allow_plaintext_token=args.allow_plaintext_token, max_connections=args.max_connections,
                          max_connections_per_peer=args.max_connections_per_peer,
                          handshake_timeout_s=args.handshake_timeout_s,
                          watchdog_s=args.watchdog_s, max_message_bytes=args.max_message_bytes, tls_cert=args.tls_cert, tls_key=args.tls_key,
                          image_encoding=args.image_encoding, max_frame_bytes=args.max_frame_bytes,
                          max_observation_bytes=max(args.max_frame_bytes, ServerConfig.max_observation_bytes))
    try:
        config.validate()
        robot = make_driver(args.driver, **kwargs)
    except (ValueError, TypeError, ImportError) as e:
        raise CommandError(str(e)) from None
    for warning in config.warnings():
        print(f"robot-rl: warning: {warning}", file=sys.stderr, flush=True)
    reward = connect.learned_reward(args, robot.spec)
    if reward is not None:
        from robot_rl.classifier_robot import ClassifierRobot

        robot = ClassifierRobot(robot, reward)
    server = RobotServer(robot, config)
    try:
        port = server.start()
    except OSError as e:
        raise CommandError(str(e)) from None
    # From here on nothing this process writes (log lines, status lines, gRPC's own messages) can block it on a
    # terminal or pipe that nobody reads: stdout and stderr go through always-drained pipes (robot_rl.real.output),
    # given back at exit once drained (within a second; a destination still blocked then keeps them).
    atexit.register(OutputPump().start().stop)
    auth = "token required" if token else "UNAUTHENTICATED (loopback only)"
    tls = ", TLS" if args.tls_cert else ""
    if cams := robot.spec.cameras:
        tls += ", cameras " + " ".join(f"{c.name} {c.height}x{c.width}" for c in cams) + f" ({args.image_encoding})"
    if reward is not None:
        tls += f", reward from the classifier {args.reward_classifier}"
    print(f"serving {robot.spec.name} on {format_address(args.host, port)} at {robot.spec.control_hz:g} Hz ({auth}{tls}); "
          "Ctrl-C to stop", flush=True)
    print(f"transport: {server.transport_line()}", flush=True)
    start = time.monotonic()
    try:
        with sigterm_as_interrupt():
            while args.run_for <= 0 or time.monotonic() - start < args.run_for:
                time.sleep(args.status_every if args.status_every > 0 else 1.0)
                if args.status_every > 0:
                    s = server.status()
                    print(f"[status] {s.state} | loop {s.health} | ticks {s.ticks:,} | commands {s.commands:,} | "
                          f"holds {s.holds:,} | watchdog {s.watchdog_trips} | estops {s.estops} | "
                          f"breaches {sum(s.breaches.values())} | rejected {sum(s.rejected.values())} | "
                          f"clamped {sum(s.clamped.values())} | jitter p99 {s.jitter_p99_s * 1e3:.2f} ms | "
                          f"overruns {s.overruns}" + (f" | loop error: {s.loop_error}" if s.loop_error else ""),
                          flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print("server stopped; robot stopped (driver stop()) and disconnected", flush=True)
    return 0


COMMAND = robot_command(
    "serve-robot", "serve a robot driver over the bridge (the robot side)",
    "Serve a robot driver over the bridge (the robot side).", lambda: ServeRobotArgs, serve_robot,
    [
        f"{TOKEN_ENV}=... robot-rl serve-robot task=reach              # simulated arm on 127.0.0.1:50051",
        "robot-rl serve-robot driver=ur_rtde driver_args.ip=192.168.1.10 host=0.0.0.0 token_file=~/.robot_token",
        "robot-rl serve-robot driver=lerobot driver_args.robot_type=so101_follower driver_args.port=/dev/ttyACM0 "
        "driver_args.id=my_arm driver_args.arm_file=so101.json",
        "robot-rl serve-robot port=0 run_for=5 allow_unauthenticated=true  # loopback only",
        "robot-rl serve-robot pixels=true reward_classifier=runs/clf reward_classifier_consecutive=3  # learned reward",
    ],
)
