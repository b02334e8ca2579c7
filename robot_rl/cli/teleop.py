"""`robot-rl teleop`: drive the robot with an operator device and record demonstrations."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.cli.robot import (
    TELEOP_DEVICES,
    CommandError,
    RobotArgs,
    _client,
    _run_episodes,
    _teleop,
    _writer,
    robot_command,
)
from robot_rl.fields import help_field as _help


@dataclass
class TeleopArgs(RobotArgs):
    teleop: str | None = _help("keyboard", f"operator device: {', '.join(TELEOP_DEVICES)}")
    episodes: int = _help(10, "episodes to record")
    out: str | None = _help(None, "dataset directory to record into (LeRobot v3.0 layout; with the robot's cameras as videos)")
    append: bool = _help(False, "add episodes to an existing dataset out=")
    task: str | None = _help(None, "task description stored with each episode (default: the robot's name)")
    seed: int | None = _help(None, "seed of the first episode (the next ones count up)")


def teleop(args: TeleopArgs) -> int:
    """Drive the robot and record demonstrations."""
    from robot_rl.hil.session import Session

    client = _client(args)
    spec = client.spec()
    device = _teleop(args, spec, {"mode": "always"})
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


COMMAND = robot_command(
    "teleop", "drive the robot, record demonstrations",
    "Drive the robot with an operator device and record demonstrations.", lambda: TeleopArgs, teleop,
    ["robot-rl teleop robot=127.0.0.1:50051 teleop=keyboard episodes=20 out=data/demos",
     "robot-rl teleop teleop=scripted teleop_args.noise=0.3 out=data/demos append=true"],
)
