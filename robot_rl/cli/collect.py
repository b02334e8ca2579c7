"""`robot-rl collect`: record finished episodes of a policy (the scripted expert, random, a checkpoint) to a
dataset in the LeRobotDataset v3 layout."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from robot_rl.cli.common import Command, check_env_spec, parse_args
from robot_rl.errors import UserError


def run(args: list[str]) -> int:
    from robot_rl.collect import CollectArgs, collect

    check_env_spec(args, "collect")
    a = parse_args(CollectArgs, args, "collect")
    if not a.out:
        raise UserError("collect needs out=<dataset dir>")
    if a.episodes < 1 or a.env.num_envs < 1:
        raise UserError("episodes and env.num_envs must be >= 1")
    if a.noise < 0:
        raise UserError("noise must be >= 0")
    if len(a.env.pixel_size) != 2 or min(a.env.pixel_size) < 16:
        raise UserError("env.pixel_size must be [height, width], each >= 16")
    if a.policy not in {"expert", "random"} and not Path(a.policy).is_file():
        raise UserError(f"policy must be expert, random or a checkpoint file; {a.policy} does not exist")
    result = collect(a)
    print(f"done: {result['episodes']} episodes in {result['out']} | success rate {result['success_rate']:.0%}")
    return 0


COMMAND = Command(
    name="collect", summary="record episodes to a dataset", run=run,
    schema=lambda: import_module("robot_rl.collect").CollectArgs,
    usage=["usage: robot-rl collect env.spec=<spec> out=<dataset dir> [policy=expert|random|<checkpoint.pt>] "
           "[key=value ...]"],
    about=["Records finished episodes to a dataset in the LeRobotDataset v3 layout (parquet + meta/, MP4 for cameras).",
           "Episodes are written as they finish; an interrupted recording keeps every finished episode."],
    examples=[
        "robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 out=data/push_demos",
        "robot-rl collect env.spec=arm:push-sparse policy=expert noise=0.6 episodes=30 out=data/push_mixed append=true",
        "robot-rl collect env.spec=arm:reach policy=runs/<run>/checkpoints/best.pt episodes=50 out=data/reach_sac",
        "robot-rl collect env.spec=arm:push-sparse-pixels policy=expert episodes=20 out=data/push_pixel_demos",
        "  (cameras as videos; the expert steers by the simulator's state, the dataset holds only the observation)",
    ],
)
