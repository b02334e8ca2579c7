"""What the robot commands (`serve-robot`, `teleop`, `hil-train`, `deploy`) share: the keys of a command that
drives a robot through `serve-robot` (`RobotArgs`), range checks, the channel, operator device and dataset writer,
the learned reward, and `robot_command`, which builds each one's `Command` (the bridge's packages checked first:
gRPC is an extra of the simulation install)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.cli.common import Command, page, parse_args
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help
from robot_rl.signals import sigterm_as_interrupt

TOKEN_ENV = "ROBOT_RL_TOKEN"  # robot_rl.real.guard.TOKEN_ENV, named here so that `--help` needs no gRPC
TELEOP_DEVICES = ("keyboard", "gamepad", "spacemouse", "scripted", "person", "replay")  # robot_rl.real.teleop.TELEOPS
BRIDGE_GRPC_MIN = (1, 85)  # the generated modules in real/proto refuse older grpcio


class CommandError(UserError):
    """A robot command's user mistake: printed as one line, exit status 2."""


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


# Keys that must be positive (counts, durations, rates) wherever a robot command has them.
_POSITIVE_KEYS = (
    "steps", "episodes", "threads", "step_timeout_s", "updates_per_transition", "control_hz", "checkpoint_every_s",
    "log_every", "capacity", "prior_capacity", "reward_classifier_consecutive",
)
_NON_NEGATIVE_KEYS = ("learning_starts", "run_for", "status_every", "watchdog_s")


def check_ranges(args: Any) -> None:
    """One line naming the first key out of range, before anything connects to a robot."""
    for names, rule, ok in ((_POSITIVE_KEYS, "> 0", lambda v: v > 0), (_NON_NEGATIVE_KEYS, ">= 0", lambda v: v >= 0)):
        for name in names:
            value = getattr(args, name, None)
            if value is not None and not ok(value):
                raise CommandError(f"{name}={value}: must be {rule}")
    threshold = getattr(args, "reward_classifier_threshold", None)
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise CommandError(f"reward_classifier_threshold={threshold}: must be in (0, 1]")


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


def _teleop(args: RobotArgs, spec: Any, defaults: dict[str, Any] | None = None) -> Any:
    """The operator device of `args` for the robot of `spec` (None without one). The simulated operators
    (scripted, person) watch the arm task the robot serves, in the command's mode (`defaults`)."""
    if not args.teleop:
        return None
    from robot_rl.real.teleop import make_teleop

    kwargs: dict[str, Any] = {}
    if args.teleop in ("scripted", "person"):
        kwargs = {**(defaults or {}), "task": spec.name.split(":", 1)[-1].split("-", 1)[0]}  # sim_arm:push-sparse
        if args.teleop == "person":
            kwargs["control_hz"] = spec.control_hz
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


def _check_bridge(command: str) -> None:
    """gRPC must be importable and new enough for the bridge's generated code. (TensorBoard pulls in some grpcio of
    its own, possibly older than the bridge needs.)"""
    try:
        import grpc
    except ImportError:
        missing = "grpcio is not installed"
    else:
        version = tuple(int(p) for p in grpc.__version__.split(".")[:2] if p.isdigit())
        if version >= BRIDGE_GRPC_MIN:
            return
        missing = f"grpcio {grpc.__version__} is older than {'.'.join(map(str, BRIDGE_GRPC_MIN))}"
    raise UserError(f"{command} needs the robot bridge's packages ({missing}), an extra of the simulation install: "
                    f"pip install -c constraints.txt -e '.[robot]'  (or pip install 'robot-rl[robot]')")


def robot_command(name: str, summary: str, what: str, keys: Callable[[], type], run: Callable[[Any], int],
                  examples: list[str]) -> Command:
    """The `Command` of a robot command: `keys()` is its dataclass, `run(parsed keys)` runs it."""

    def run_command(args: list[str]) -> int:
        _check_bridge(name)
        schema = keys()
        valid = {f.name for f in dataclasses.fields(schema)}
        if "device" not in valid and "teleop" in valid and any(a.startswith("device=") for a in args):
            raise CommandError(f"{name} has no device= (device= is a torch device); the operator's device is "
                               "teleop=<keyboard|gamepad|spacemouse|scripted|replay>")
        parsed = parse_args(schema, args, name)
        check_ranges(parsed)
        return run(parsed)

    def help_text(_: list[str]) -> str:
        _check_bridge(name)
        return page([f"usage: robot-rl {name} [key=value ...]"], [
            what,
            "Booleans are key=true/false; null clears a key; dict keys are set one at a time (teleop_args.noise=0.3).",
        ], examples, keys(), max_width=44)

    return Command(name=name, summary=summary, run=run_command, examples=examples, help=help_text,
                   torch_device=False)
