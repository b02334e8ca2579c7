"""The robot commands: ``serve-robot``, ``teleop``, ``hil-train`` and ``deploy``.

They take ``key=value`` settings like every other command (``robot-rl <command> --help`` lists each key with its
default); each command's keys are a dataclass below. ``robot_rl.cli`` parses the command line into it (and
turns an old ``--flag`` into a one-line error naming its new spelling, from ``OLD_FLAGS``) and calls the
command with it.
"""

from __future__ import annotations

import atexit
import logging
import sys
import time
from dataclasses import dataclass, field, make_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from robot_rl.fields import help_field as _help
from robot_rl.real.server import TOKEN_ENV
from robot_rl.signals import sigterm_as_interrupt


class CommandError(Exception):
    """A user mistake: printed as one line, exit status 2."""


TELEOP_DEVICES = ("keyboard", "gamepad", "spacemouse", "scripted", "replay")

# The arm presets' SAC settings (configs/experiment/rlpd_push.yaml and friends) but their gamma of 0.95: on the
# bridge push it changed nothing within 12k steps (bench/results/hil_push/gamma0.95, one seed), so 0.99 stays.
_HIL_AGENT = {
    "actor_layer_norm": True, "critic_layer_norm": True, "init_temperature": 0.05, "target_entropy_scale": 0.5,
    "backup_entropy": False, "num_critics": 2,
}


# hil-train's default replay capacities (online, prior), state / cameras: a camera transition keeps its frames
# (two 84x84 cameras: 42 kB, up to twice, see robot_rl.hil.learner), so it gets 10x fewer.
_CAPACITY = {False: (1_000_000, 200_000), True: (100_000, 50_000)}


# -- the keys of each command ------------------------------------------------------------------------------
@dataclass
class ServeRobotArgs:
    driver: str = _help("sim_arm", "robot driver: sim_arm (simulated MuJoCo arm) or ur_rtde (untested)")
    driver_args: dict[str, Any] = _help(
        {}, "driver constructor arguments, one key each: driver_args.<name>=<value> (ur_rtde: driver_args.ip=...)"
    )
    task: str = _help("reach", "sim_arm: reach, push or pick_place")
    reward: str = _help("dense", "sim_arm: dense or sparse")
    control_hz: float = _help(20.0, "sim_arm: control rate of the loop")
    seed: int = _help(0, "sim_arm: seed of the first episode")
    pixels: bool = _help(
        False, "sim_arm: serve the front and wrist cameras; the state is then proprioception only, as in the "
               "<task>-pixels tasks (driver_args.full_state=true keeps the full state)"
    )
    pixel_size: list[int] = _help([84, 84], "sim_arm: camera frames' height and width")
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


@dataclass
class RobotArgs:
    """The keys shared by the commands that drive a robot through ``serve-robot``."""

    robot: str = _help("127.0.0.1:50051", "address of serve-robot (host:port)")
    token_file: str | None = _help(None, f"file whose first line is the shared token (default: ${TOKEN_ENV})")
    token: str | None = _help(
        None, f"shared token (visible to every local user in the process list: prefer ${TOKEN_ENV} or token_file=)"
    )
    tls_root_cert: str | None = _help(None, "PEM certificate to trust; enables TLS")
    step_timeout_s: float = _help(
        0.5, "deadline of one step; a step that misses it ends the episode (the run goes on)"
    )
    teleop: str | None = _help(None, f"operator device: {', '.join(TELEOP_DEVICES)} (null: none)")
    teleop_args: dict[str, Any] = _help(
        {}, "operator device constructor arguments, one key each: teleop_args.<name>=<value> (e.g. "
            "teleop_args.noise=0.3, teleop_args.frame=beside)"
    )


@dataclass
class TeleopArgs(RobotArgs):
    teleop: str | None = _help("keyboard", f"operator device: {', '.join(TELEOP_DEVICES)}")
    episodes: int = _help(10, "episodes to record")
    out: str | None = _help(None, "dataset directory to record into (LeRobot v3.0 layout; with the robot's cameras as videos)")
    append: bool = _help(False, "add episodes to an existing dataset out=")
    task: str | None = _help(None, "task description stored with each episode (default: the robot's name)")
    seed: int | None = _help(None, "seed of the first episode (the next ones count up)")


@dataclass
class HilTrainArgs(RobotArgs):
    teleop: str | None = _help(
        "scripted", f"operator device: {', '.join(TELEOP_DEVICES)} (null: none; scripted takes over by itself)"
    )
    steps: int = _help(6000, "env steps (control ticks with an action) to run")
    run_dir: str | None = _help(None, "run directory (default: runs/<date>_hil_<robot name>)")
    demos: str | None = _help(
        None, "dataset that pre-fills the prior buffer (learning from cameras: with their videos at the served sizes, "
              "e.g. an earlier run's <run_dir>/episodes, or robot-rl collect in the <task>-pixels task)"
    )
    mirror_demos: bool = _help(
        False, "also learn from the demos' mirror images where the robot declares a symmetry (RobotSpec."
               "mirror_state_sign; serve-robot driver=sim_arm task=push does), as train's data.mirror; from cameras "
               "only those the robot declares mirrored (RobotSpec.mirror_cameras; sim_arm's front and wrist)"
    )
    mirror_online: bool = _help(
        False, "also store the mirror image of every transition received (interventions included), as train's "
               "train.mirror_online (camera frames as mirror_demos)"
    )
    intervention_penalty: float = _help(
        0.0, "subtracted from the reward of the policy's last step before each operator takeover, in what the learner "
             "gets (RLIF's intervention signal beside the task reward; the recorded episodes keep the robot's reward)"
    )
    pixels: bool | None = _help(
        None, "learn from the robot's cameras (a DrQ pixel agent on pixels/<camera> at the served sizes, beside the "
              "state): null = whenever the robot serves cameras, true = require them, false = the state only"
    )
    capacity: int | None = _help(
        None, f"online replay capacity in transitions (default {_CAPACITY[False][0]:,}; from cameras "
              f"{_CAPACITY[True][0]:,})"
    )
    prior_capacity: int | None = _help(
        None, f"prior (demos + interventions) replay capacity (default {_CAPACITY[False][1]:,}; from cameras "
              f"{_CAPACITY[True][1]:,})"
    )
    record: bool = _help(True, "record the episodes to <run_dir>/episodes (with camera videos when learning from them)")
    rewind: bool = _help(False, "RaC-style rewind segments (operator event REWIND)")
    updates_per_transition: float = _help(
        1.0, "learner updates (each of agent.utd critic steps) per transition received; may be fractional"
    )
    learning_starts: int = _help(300, "transitions before the first update")
    seed: int = _help(0, "seed of the networks, the learner's sampling and the episodes")
    threads: int = _help(1, "torch threads of this process")
    log_every: int = _help(500, "env steps between rows of metrics.csv (the training episodes' means)")
    checkpoint_every_s: float = _help(
        120.0, "save the run (<run_dir>/checkpoints/latest.pt, with the learner) this often, and at the end"
    )
    device: str = _help("cpu", "torch device of the learner (cpu, cuda, cuda:1)")
    distributed: bool = _help(
        False, "run the learner as a Ray actor (another process or machine) instead of in this process"
    )
    ray_address: str | None = _help(None, "Ray cluster to join (default: start a local one)")
    learner_name: str = _help("robot-rl-learner", "name of the Ray learner actor")
    reward_classifier: str | None = _help(
        None, "a success classifier directory (robot-rl classifier): this process judges each observation's frames "
              "and the transitions' reward and success come from it instead of the robot's (success ends the "
              "episode); the robot's own stay in hil_metrics.csv as driver_return, driver_success"
    )
    reward_classifier_threshold: float = _help(0.5, "classifier probability at or above which a frame is a success")
    reward_classifier_consecutive: int = _help(1, "success needs this many steps in a row above the threshold")
    # agent: SACConfig with the arm presets' settings (_HIL_AGENT), added by hil_train_args(): SACConfig imports
    # torch, which serve-robot should not wait for.


# Keys that must be positive (counts, durations, rates) wherever a robot command has them.
_POSITIVE_KEYS = (
    "steps", "episodes", "threads", "step_timeout_s", "updates_per_transition", "control_hz", "checkpoint_every_s",
    "log_every", "capacity", "prior_capacity", "reward_classifier_consecutive",
)
_NON_NEGATIVE_KEYS = ("learning_starts", "run_for", "status_every", "watchdog_s")


def check_ranges(args: Any) -> None:
    """One line naming the first key out of range, before anything connects to a robot."""
    for name in _POSITIVE_KEYS:
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            raise CommandError(f"{name}={value}: must be > 0")
    for name in _NON_NEGATIVE_KEYS:
        value = getattr(args, name, None)
        if value is not None and not value >= 0:
            raise CommandError(f"{name}={value}: must be >= 0")
    threshold = getattr(args, "reward_classifier_threshold", None)
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise CommandError(f"reward_classifier_threshold={threshold}: must be in (0, 1]")


@cache
def hil_train_args() -> type:
    """The keys of ``hil-train``: HilTrainArgs plus ``agent.<field>`` (SACConfig, the arm presets' defaults)."""
    from robot_rl.agents.sac import SACConfig

    agent = field(default_factory=lambda: SACConfig(**_HIL_AGENT), metadata={"help": "SAC settings, as in train"})
    return make_dataclass("HilTrainArgs", [("agent", SACConfig, agent)], bases=(HilTrainArgs,))


@dataclass
class DeployArgs(RobotArgs):
    teleop: str | None = _help(None, f"operator device who may take over: {', '.join(TELEOP_DEVICES)} (null: none)")
    checkpoint: str = _help(
        "", "required: a run directory (train, finetune, hil-train: its best.pt, else latest.pt), a checkpoint "
            "file (runs/<run>/checkpoints/best.pt, a Ray learner's <run_dir>/learner/checkpoints/learner.pt), or a "
            "saved policy directory (robot-rl bc, ReinFlow, DPPO: <run_dir>/policy; any run via robot-rl export)"
    )
    episodes: int = _help(10, "episodes to run")
    stochastic: bool = _help(False, "sample actions instead of taking the mean")
    out: str | None = _help(None, "dataset directory to record the episodes into (cameras as videos)")
    append: bool = _help(False, "add episodes to an existing dataset out=")
    seed: int | None = _help(None, "seed of the first episode (the next ones count up)")
    allow_other_task: bool = _help(False, "run the policy even if it names another task than the robot's")


#: Every flag of the former argparse interface and its key=value spelling, for a one-line error that says it.
OLD_FLAGS: dict[str, str] = {
    "--driver": "driver=<sim_arm|ur_rtde>",
    "--driver-arg": "driver_args.<name>=<value>",
    "--task": "task=<reach|push|pick_place>",
    "--reward": "reward=<dense|sparse>",
    "--control-hz": "control_hz=<hz>",
    "--seed": "seed=<n>",
    "--host": "host=<address>",
    "--port": "port=<n>",
    "--token-file": "token_file=<file>",
    "--token": "token=<token>",
    "--allow-unauthenticated": "allow_unauthenticated=true",
    "--watchdog-s": "watchdog_s=<seconds>",
    "--max-message-bytes": "max_message_bytes=<n>",
    "--tls-cert": "tls_cert=<pem>",
    "--tls-key": "tls_key=<pem>",
    "--status-every": "status_every=<seconds>",
    "--run-for": "run_for=<seconds>",
    "--robot": "robot=<host:port>",
    "--tls-root-cert": "tls_root_cert=<pem>",
    "--step-timeout-s": "step_timeout_s=<seconds>",
    "--device": "teleop=<" + "|".join(TELEOP_DEVICES) + "> (device= is the torch device)",
    "--device-arg": "teleop_args.<name>=<value>",
    "--episodes": "episodes=<n>",
    "--out": "out=<dataset dir>",
    "--append": "append=true",
    "--task-text": "task=<text>",
    "--steps": "steps=<n>",
    "--run-dir": "run_dir=<dir>",
    "--demos": "demos=<dataset dir>",
    "--no-record": "record=false",
    "--rewind": "rewind=true",
    "--utd": "updates_per_transition=<x> (agent.utd= is critic steps per update, as in train)",
    "--learning-starts": "learning_starts=<n>",
    "--batch-size": "agent.batch_size=<n>",
    "--agent": "agent.<field>=<value>",
    "--threads": "threads=<n>",
    "--distributed": "distributed=true",
    "--ray-address": "ray_address=<address>",
    "--learner-name": "learner_name=<name>",
    "--learner-device": "device=<torch device>",
    "--checkpoint": "checkpoint=<file>",
    "--stochastic": "stochastic=true",
    "--record": "out=<dataset dir>",
}


def _token(args: Any) -> str | None:
    """The token from token_file=, token= or the environment; warnings on stderr; one-line errors."""
    from robot_rl.real.guard import load_token

    try:
        token, warnings = load_token(args.token, args.token_file)
    except ValueError as e:
        raise CommandError(str(e)) from None
    for warning in warnings:
        print(f"robot-rl: warning: {warning}", file=sys.stderr, flush=True)
    return token


def _client(args: RobotArgs) -> Any:
    from robot_rl.real.client import RobotClient

    return RobotClient(args.robot, _token(args), tls_root_cert=args.tls_root_cert, step_timeout_s=args.step_timeout_s)


def _teleop(args: RobotArgs, spec_name: str, defaults: dict[str, Any] | None = None) -> Any:
    if not args.teleop:
        return None
    from robot_rl.real.teleop import make_teleop

    kwargs = dict(defaults or {}) if args.teleop == "scripted" else {}
    if args.teleop == "scripted":
        task = spec_name.split(":", 1)[-1].split("-", 1)[0]  # "sim_arm:push-sparse" -> "push"
        kwargs.setdefault("task", task)
    kwargs.update(args.teleop_args)
    try:
        return make_teleop(args.teleop, **kwargs)
    except (ValueError, TypeError, ImportError) as e:
        raise CommandError(f"teleop={args.teleop}: {e}") from None


def _writer(path: str | None, spec: Any, append: bool, task: str, cameras: bool = False) -> Any:
    """The dataset writer of a robot command (None without `path`); with `cameras`, each of the robot's cameras
    is recorded as the video ``observation.images.<camera>`` (what `Session` then fills, as `collect` does)."""
    if path is None:
        return None
    from robot_rl.datasets import DatasetWriter, transition_features

    images = {c.name: (c.height, c.width) for c in spec.cameras} if cameras else None
    features = transition_features(spec.state_dim, spec.action_dim, images=images or None)
    fps = max(1, int(round(spec.control_hz)))
    exists = (Path(path) / "meta" / "info.json").is_file()
    if exists and not append:
        raise CommandError(f"dataset {path} exists; pass append=true to add episodes to it or choose another path")
    try:
        return DatasetWriter(path, fps=fps, features=features, robot_type=spec.name, task=task, resume=exists)
    except ValueError as e:  # odd frame sizes (H.264), features that differ from the dataset's: one line
        raise CommandError(f"dataset {path}: {e}") from None


def _connect(device: Any) -> None:
    """Connect the operator's device; a device that cannot start (no terminal for the keyboard, no joystick) is
    one line naming it, not a traceback."""
    if device is None:
        return
    try:
        device.connect()
    except (RuntimeError, OSError, ImportError) as e:
        raise CommandError(f"operator device {type(device).__name__} cannot start: {e}") from None


def _run_episodes(session: Any, client: Any, device: Any, writer: Any, episodes: int, seed: int | None) -> None:
    """Run ``episodes`` of ``session``; on Ctrl-C hold the robot; always release the device, dataset and channel."""
    try:
        with sigterm_as_interrupt():
            _connect(device)
            session.run(episodes=episodes, seed=seed)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        client.step(None)
    finally:
        if device is not None:
            device.disconnect()
        if writer is not None:
            writer.close()
        client.close()


def _learned_reward(args: Any, spec: Any, device: str = "cpu") -> Any:
    """The `LearnedReward` of `reward_classifier=` (None when unset), checked against the robot's served cameras
    and state: a missing classifier or cameras the robot does not serve is one line naming the key and the fix."""
    if not args.reward_classifier:
        return None
    from robot_rl.classifier import ClassifierError
    from robot_rl.classifier_reward import LearnedReward

    key = f"reward_classifier={args.reward_classifier}"
    try:
        reward = LearnedReward(args.reward_classifier, args.reward_classifier_threshold,
                               args.reward_classifier_consecutive, device=device)
    except (ClassifierError, ValueError) as e:
        raise CommandError(f"reward_classifier: {e}") from None
    try:
        reward.check_robot(spec.state_dim, {c.group: c.shape for c in spec.cameras}, f"{key} on {spec.name}")
    except ClassifierError as e:
        sizes = {tuple(shape[:2]) for shape in reward.classifier.cameras.values()}
        h, w = sizes.pop() if len(sizes) == 1 else (84, 84)
        raise CommandError(f"{e}; serve its cameras at its size (simulated arm: serve-robot pixels=true "
                           f"pixel_size=[{h},{w}]; other drivers: driver_args.cameras) or train a classifier on "
                           f"this robot's frames") from None
    return reward


# -- serve-robot --------------------------------------------------------------------------------------------
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
    if args.driver == "sim_arm":
        kwargs = {"task": args.task, "reward": args.reward, "control_hz": args.control_hz, "seed": args.seed,
                  "pixels": args.pixels, "pixel_size": tuple(args.pixel_size), **kwargs}
    token = _token(args)
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
    reward = _learned_reward(args, robot.spec)
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
    cams = robot.spec.cameras
    if cams:
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


# -- teleop -------------------------------------------------------------------------------------------------
def teleop(args: TeleopArgs) -> int:
    """Drive the robot and record demonstrations."""
    from robot_rl.hil.session import Session

    client = _client(args)
    spec = client.spec()
    device = _teleop(args, spec.name, {"mode": "always"})
    if device is None:
        client.close()
        raise CommandError(f"teleop needs an operator device: teleop=<{'|'.join(TELEOP_DEVICES)}>")
    # a robot's cameras are recorded with the state: camera demos for RLPD (`data.path`) and hil-train's `demos=`
    writer = _writer(args.out, spec, args.append, args.task or spec.name, cameras=bool(spec.cameras))
    session = Session(client, teleop=device, writer=writer, task=args.task or spec.name)
    _run_episodes(session, client, device, writer, args.episodes, args.seed)
    eps = session.episodes
    ok = sum(e.success for e in eps)
    where = f" in {args.out}" if args.out else ""
    print(f"done: {len(eps)} episodes ({ok} successful){where}")
    return 0


# -- hil-train ------------------------------------------------------------------------------------------------
def hil_train(args: HilTrainArgs) -> int:
    """Human-in-the-loop RL (HIL-SERL): a learning policy, an operator who takes over, interventions into the
    online and the prior buffer; the run is `robot_rl.hil.run.HilTrainer` (on Ctrl-C or SIGTERM it holds the robot,
    saves and raises KeyboardInterrupt, exit 130 as for every robot command)."""
    from robot_rl.hil.run import HilTrainer

    trainer = HilTrainer(args)
    print(trainer.header(), flush=True)
    trainer.run()
    return 0


# -- deploy ---------------------------------------------------------------------------------------------------
def _check_cameras(path: Path, cameras: dict[str, Any], spec: Any) -> None:
    """A camera policy needs each of its camera groups from the robot at the size it was trained at (the
    Session hands it `RobotObservation.as_dict()`); a robot's extra cameras are ignored. One line otherwise."""
    served = {c.group: (c.height, c.width) for c in spec.cameras}
    for group, shape in cameras.items():
        want = tuple(int(v) for v in shape[:2])
        if group not in served:
            have = ", ".join(f"{g} {h}x{w}" for g, (h, w) in served.items()) or "none"
            raise CommandError(f"{path} reads {group} ({want[0]}x{want[1]}) besides the state; {spec.name} serves "
                               f"cameras: {have} (simulated arm: serve-robot pixels=true pixel_size=[{want[0]},"
                               f"{want[1]}])")
        if served[group] != want:
            raise CommandError(f"{path} reads {group} at {want[0]}x{want[1]}; {spec.name} serves it at "
                               f"{served[group][0]}x{served[group][1]} (serve-robot pixel_size=[{want[0]},{want[1]}])")


def deploy(args: DeployArgs) -> int:
    """Run a trained policy on the robot with every safety on and no learning."""
    if not args.checkpoint:
        raise CommandError("deploy needs checkpoint=<run dir, checkpoint file or policy dir> (runs/<run>, "
                           "runs/<run>/checkpoints/best.pt or <bc run>/policy)")
    import gymnasium as gym
    import numpy as np

    from robot_rl.api import Agent
    from robot_rl.export import ExportError, check_task
    from robot_rl.hil.session import Session

    client = _client(args)
    spec = client.spec()
    path = Path(args.checkpoint)
    try:
        check_task(path, spec.name, args.allow_other_task)
    except ExportError as e:
        raise CommandError(str(e)) from None
    # Any run, checkpoint or policy directory, through the one loader (`robot_rl.export`); actions stay in the
    # bridge's [-1, 1] whatever env the run was trained on.
    agent = Agent.load(path, action_space=gym.spaces.Box(-1.0, 1.0, (spec.action_dim,), np.float32))
    _check_cameras(path, agent.cameras, spec)
    if (agent.obs_dim, agent.action_dim) != (spec.state_dim, spec.action_dim):
        raise CommandError(f"{path} maps {agent.obs_dim} states to {agent.action_dim} actions; {spec.name} has "
                           f"{spec.state_dim} and {spec.action_dim}")

    def policy(state: Any) -> Any:
        return agent.predict(state, deterministic=not args.stochastic).astype("float32")

    device = _teleop(args, spec.name, {"mode": "takeover"})
    writer = _writer(args.out, spec, args.append, spec.name, cameras=bool(spec.cameras))
    session = Session(client, policy=policy, policy_reset=agent.reset, teleop=device, writer=writer, task=spec.name)
    _run_episodes(session, client, device, writer, args.episodes, args.seed)
    eps = session.episodes
    print(f"done: {len(eps)} episodes | success {sum(e.success for e in eps)}/{len(eps)} | mean return "
          f"{sum(e.ret for e in eps) / max(1, len(eps)):.2f}")
    return 0


#: command -> (a function that returns its keys' dataclass, the function that runs it with them, what it does)
COMMANDS: dict[str, tuple[Any, Any, str]] = {
    "serve-robot": (lambda: ServeRobotArgs, serve_robot, "Serve a robot driver over the bridge (the robot side)."),
    "teleop": (lambda: TeleopArgs, teleop, "Drive the robot with an operator device and record demonstrations."),
    "hil-train": (hil_train_args, hil_train, "Human-in-the-loop RL (HIL-SERL): a learning policy, an operator who "
                                           "takes over, interventions into the online and the prior buffer."),
    "deploy": (lambda: DeployArgs, deploy, "Run a trained policy on the robot with every safety on and no learning."),
}

EXAMPLES = {
    "serve-robot": [
        f"  {TOKEN_ENV}=... robot-rl serve-robot task=reach              # simulated arm on 127.0.0.1:50051",
        "  robot-rl serve-robot driver=ur_rtde driver_args.ip=192.168.1.10 host=0.0.0.0 token_file=~/.robot_token",
        "  robot-rl serve-robot port=0 run_for=5 allow_unauthenticated=true  # loopback only",
        "  robot-rl serve-robot pixels=true reward_classifier=runs/clf reward_classifier_consecutive=3  # learned reward",
    ],
    "teleop": [
        "  robot-rl teleop robot=127.0.0.1:50051 teleop=keyboard episodes=20 out=data/demos",
        "  robot-rl teleop teleop=scripted teleop_args.noise=0.3 out=data/demos append=true",
    ],
    "hil-train": [
        "  robot-rl hil-train robot=127.0.0.1:50051 teleop=scripted steps=6000 run_dir=runs/hil_reach",
        "  robot-rl hil-train teleop=gamepad agent.utd=2 agent.batch_size=128 demos=data/demos",
        "  robot-rl hil-train distributed=true device=cuda ray_address=auto",
        "  robot-rl hil-train robot=127.0.0.1:50051 demos=data/pixel_demos agent.batch_size=64  # a robot serving cameras",
        "  robot-rl hil-train reward_classifier=runs/clf reward_classifier_consecutive=3  # reward from robot-rl classifier",
    ],
    "deploy": [
        "  robot-rl deploy robot=127.0.0.1:50051 checkpoint=runs/hil_reach episodes=20",
        "  robot-rl deploy checkpoint=runs/<run>/checkpoints/best.pt teleop=keyboard out=data/deploy",
    ],
}


def help_text(command: str) -> str:
    """``robot-rl <command> --help``: what it does, examples, and every key with its default."""
    from robot_rl.config import describe, key_lines

    keys, _, what = COMMANDS[command]
    lines = [
        f"usage: robot-rl {command} [key=value ...]",
        "",
        what,
        "Booleans are key=true/false; null clears a key; dict keys are set one at a time (teleop_args.noise=0.3).",
        "",
        "Examples:",
        *EXAMPLES[command],
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(keys()), max_width=44)
    return "\n".join(lines) + "\n"
