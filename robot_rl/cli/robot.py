"""What the robot commands (`serve-robot`, `teleop`, `hil-train`, `deploy`) share: the keys of a command that
drives a robot through `serve-robot` (`RobotArgs`), range checks, and `robot_command`, which builds each one's
`Command` (the bridge's packages checked first: gRPC is an extra of the simulation install). What they open on the
robot (channel, operator device, dataset writer, learned reward) is `robot_rl.hil.connect`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from robot_rl.cli.common import Command, page, parse_args
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help
from robot_rl.hil.connect import CommandError

TOKEN_ENV = "ROBOT_RL_TOKEN"  # robot_rl.real.guard.TOKEN_ENV, named here so that `--help` needs no gRPC
TELEOP_DEVICES = ("keyboard", "gamepad", "spacemouse", "scripted", "person", "replay", "lerobot")  # robot_rl.real.teleop.TELEOPS
BRIDGE_GRPC_MIN = (1, 85)  # the generated modules in real/proto refuse older grpcio


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
    success_frames: int = _help(
        0, "with a recording: ticks recorded after each successful episode's success with the robot holding, as "
           "terminal successes: frames of the succeeded scene, the positives of robot-rl classifier (an episode that "
           "ends at its success records none). 0 for demonstrations that behaviour cloning learns from"
    )
    console: bool = _help(
        False, "serve the operator console, a web page of this session: cameras, state, loop health, who drives, "
               "e-stop, labels, plots, episodes (robot_rl.console; docs/hardware.md)"
    )
    console_host: str = _help("127.0.0.1", "console address (off loopback: TLS and the token are required)")
    console_port: int = _help(8765, "console port (0: any free port; the URL is printed)")
    console_tls_cert: str | None = _help(None, "PEM certificate of the console (https); with console_tls_key=")
    console_tls_key: str | None = _help(None, "PEM key of console_tls_cert=")


# Keys that must be positive (counts, durations, rates) wherever a robot command has them.
_POSITIVE_KEYS = (
    "steps", "episodes", "threads", "step_timeout_s", "updates_per_transition", "control_hz", "checkpoint_every_s",
    "log_every", "capacity", "prior_capacity", "reward_classifier_consecutive",
)
_NON_NEGATIVE_KEYS = ("learning_starts", "run_for", "status_every", "watchdog_s", "success_frames")


def check_ranges(args: Any) -> None:
    """One line naming the first key out of range, before anything connects to a robot."""
    for names, rule, ok in ((_POSITIVE_KEYS, "> 0", lambda v: v > 0), (_NON_NEGATIVE_KEYS, ">= 0", lambda v: v >= 0)):
        for name in names:
            value = getattr(args, name, None)
            if value is not None and not ok(value):
                raise CommandError(f"{name}={value}: must be {rule}")
    port = getattr(args, "console_port", None)
    if port is not None and not 0 <= port <= 65535:
        raise CommandError(f"console_port={port}: must be in [0, 65535]")
    threshold = getattr(args, "reward_classifier_threshold", None)
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise CommandError(f"reward_classifier_threshold={threshold}: must be in (0, 1]")


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
