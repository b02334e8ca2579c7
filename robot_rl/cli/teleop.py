"""`robot-rl teleop`: drive the robot with an operator device and record demonstrations."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.cli import robot as cli
from robot_rl.fields import help_field as _help


@dataclass
class TeleopArgs(cli.RobotArgs):
    teleop: str | None = _help("keyboard", f"operator device: {', '.join(cli.TELEOP_DEVICES)}")
    episodes: int = _help(10, "episodes to record")
    out: str | None = _help(None, "dataset directory to record into (LeRobot v3.0 layout; with the robot's cameras as videos)")
    append: bool = _help(False, "add episodes to an existing dataset out=")
    task: str | None = _help(None, "task description stored with each episode (default: the robot's name)")
    seed: int | None = _help(None, "seed of the first episode (the next ones count up)")


def teleop(args: TeleopArgs) -> int:
    """Drive the robot and record demonstrations."""
    from robot_rl.hil import connect

    if not args.teleop:
        raise cli.CommandError(f"teleop needs an operator device: teleop=<{'|'.join(cli.TELEOP_DEVICES)}>")
    client = connect.client(args)
    spec = client.spec()
    # a robot's cameras are recorded with the state: camera demos for RLPD (`data.path`) and hil-train's `demos=`
    eps = connect.drive(args, client, spec, "always", args.task or spec.name)
    ok = sum(e.success for e in eps)
    where = f" in {args.out}" if args.out else ""
    print(f"done: {len(eps)} episodes ({ok} successful){where}")
    return 0


COMMAND = cli.robot_command(
    "teleop", "drive the robot, record demonstrations",
    "Drive the robot with an operator device and record demonstrations.", lambda: TeleopArgs, teleop,
    ["robot-rl teleop robot=127.0.0.1:50051 teleop=keyboard episodes=20 out=data/demos",
     "robot-rl teleop teleop=scripted teleop_args.noise=0.3 out=data/demos append=true",
     "robot-rl teleop teleop=lerobot teleop_args.teleop_type=so101_leader teleop_args.port=/dev/ttyACM1 "
     "teleop_args.always_active=true out=data/so101_demos  # a LeRobot leader arm, driver=lerobot"],
)
