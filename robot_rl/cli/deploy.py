"""`robot-rl deploy`: run a trained policy (a run, checkpoint or policy directory) on the robot with every safety
on and no learning. A policy trained under `env_delay` gets the actions in flight it was trained to read, and the
bridge's measured observation-to-action delay is reported against the trained one (`robot_rl.deploy_delay`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.cli import robot as cli
from robot_rl.fields import help_field as _help


@dataclass
class DeployArgs(cli.RobotArgs):
    teleop: str | None = _help(None, f"operator device who may take over: {', '.join(cli.TELEOP_DEVICES)} (null: none)")
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
    policy_server: str | None = _help(
        None, "host:port of robot-rl serve-policy: the policy runs there (checkpoint= is then not needed) and sends "
              "action chunks; this loop never waits for one: it plays the chunk it has, blends the next one in, and "
              "holds the robot when none is left"
    )
    policy_token_file: str | None = _help(None, "token file of the policy server (default: the robot's token)")
    blend_steps: int = _help(3, "policy_server: steps over which a new chunk is blended in where it meets the old")
    splice_max_change: float = _help(
        0.2, "policy_server: at most this change of any action entry per step where two chunks meet (actions in "
             "[-1, 1])"
    )


def _check_cameras(path: Path, cameras: dict[str, Any], spec: Any) -> None:
    """A camera policy needs each of its camera groups from the robot at the size it was trained at (the
    Session hands it `RobotObservation.as_dict()`); a robot's extra cameras are ignored. One line otherwise."""
    served = {c.group: (c.height, c.width) for c in spec.cameras}
    for group, shape in cameras.items():
        want = tuple(int(v) for v in shape[:2])
        if group not in served:
            have = ", ".join(f"{g} {h}x{w}" for g, (h, w) in served.items()) or "none"
            raise cli.CommandError(f"{path} reads {group} ({want[0]}x{want[1]}) besides the state; {spec.name} serves "
                               f"cameras: {have} (simulated arm: serve-robot pixels=true pixel_size=[{want[0]},"
                               f"{want[1]}])")
        if served[group] != want:
            raise cli.CommandError(f"{path} reads {group} at {want[0]}x{want[1]}; {spec.name} serves it at "
                               f"{served[group][0]}x{served[group][1]} (serve-robot pixel_size=[{want[0]},{want[1]}])")


def _remote(args: DeployArgs) -> tuple[Any, Any]:
    """(the served policy as `Session`'s policy, its info) of `policy_server=`, checked against the robot."""
    from robot_rl.hil import connect
    from robot_rl.real.guard import load_token
    from robot_rl.real.policy_client import PolicyClient, PolicyServerError, RemotePolicy

    token = connect.token(args)
    if args.policy_token_file:
        try:
            token, _ = load_token(None, args.policy_token_file)
        except ValueError as e:
            raise cli.CommandError(f"policy_token_file: {e}") from None
    client = PolicyClient(args.policy_server, token, tls_root_cert=args.tls_root_cert)
    try:
        info = client.info()
    except PolicyServerError as e:
        client.close()
        raise cli.CommandError(str(e)) from None
    try:
        remote = RemotePolicy(client.open(), info, blend_steps=args.blend_steps, max_change=args.splice_max_change)
    except ValueError as e:
        client.close()
        raise cli.CommandError(str(e)) from None
    return remote, info


def deploy(args: DeployArgs) -> int:
    """Run a trained policy on the robot with every safety on and no learning."""
    if args.policy_server:
        return _deploy_remote(args)
    if not args.checkpoint:
        raise cli.CommandError("deploy needs checkpoint=<run dir, checkpoint file or policy dir> (runs/<run>, "
                           "runs/<run>/checkpoints/best.pt or <bc run>/policy)")
    import gymnasium as gym
    import numpy as np

    from robot_rl.api import Agent
    from robot_rl.deploy_delay import DeployDelay
    from robot_rl.export import ExportError, check_task
    from robot_rl.hil import connect

    client = connect.client(args)
    spec = client.spec()
    path = Path(args.checkpoint)
    try:
        check_task(path, spec.name, args.allow_other_task)
    except ExportError as e:
        raise cli.CommandError(str(e)) from None
    # Any run, checkpoint or policy directory, through the one loader (`robot_rl.export`); actions stay in the
    # bridge's [-1, 1] whatever env the run was trained on.
    agent = Agent.load(path, action_space=gym.spaces.Box(-1.0, 1.0, (spec.action_dim,), np.float32))
    _check_cameras(path, agent.cameras, spec)
    # A policy trained under env_delay: a delay-aware one reads the actions in flight after the state, which this
    # client keeps from what the robot executed; either way the bridge's own delay is measured against the trained.
    delay = DeployDelay(agent.delay, spec.action_dim, 1.0 / spec.control_hz)
    if (agent.obs_dim, agent.action_dim) != (spec.state_dim + delay.extra, spec.action_dim):
        raise cli.CommandError(f"{path} maps {agent.obs_dim} states to {agent.action_dim} actions; {spec.name} has "
                           f"{spec.state_dim}{f' (+ {delay.extra} in flight)' if delay.extra else ''} and "
                           f"{spec.action_dim}")

    def act(state: Any) -> Any:
        return agent.predict(state, deterministic=not args.stochastic).astype("float32")

    def reset() -> None:
        agent.reset()
        delay.reset()

    eps = connect.drive(args, client, spec, "takeover", spec.name, policy=delay.policy(act), policy_reset=reset,
                        executed=delay.executed)
    print(f"done: {len(eps)} episodes | success {sum(e.success for e in eps)}/{len(eps)} | mean return "
          f"{sum(e.ret for e in eps) / max(1, len(eps)):.2f}")
    print(delay.summary())
    return 0


def _deploy_remote(args: DeployArgs) -> int:
    """`deploy policy_server=`: the policy's chunks from serve-policy, this loop at the robot's rate."""
    from robot_rl.deploy_delay import DeployDelay
    from robot_rl.export import ExportError
    from robot_rl.hil import connect

    if args.blend_steps < 0 or not args.splice_max_change > 0:
        raise cli.CommandError(f"blend_steps={args.blend_steps} must be >= 0 and splice_max_change="
                               f"{args.splice_max_change} > 0")
    client = connect.client(args)
    spec = client.spec()
    remote, info = _remote(args)
    try:
        trained = info.metadata.get("env_spec")
        if trained and not args.allow_other_task:
            try:
                _same_task(trained, spec.name)
            except ExportError as e:
                raise cli.CommandError(str(e)) from None
        _check_cameras(Path(args.policy_server), info.cameras, spec)
        delay = DeployDelay(info.metadata.get("delay"), spec.action_dim, 1.0 / spec.control_hz,
                            added_steps=remote.lead)
        if (info.obs_dim, info.action_dim) != (spec.state_dim + delay.extra, spec.action_dim):
            raise cli.CommandError(f"the policy at {args.policy_server} maps {info.obs_dim} states to "
                                   f"{info.action_dim} actions; {spec.name} has {spec.state_dim}"
                                   f"{f' (+ {delay.extra} in flight)' if delay.extra else ''} and {spec.action_dim}")

        def reset() -> None:
            remote.reset()
            delay.reset()

        eps = connect.drive(args, client, spec, "takeover", spec.name, policy=delay.policy(remote), policy_reset=reset,
                            executed=delay.executed)
    finally:
        remote.client.close()
    print(f"done: {len(eps)} episodes | success {sum(e.success for e in eps)}/{len(eps)} | mean return "
          f"{sum(e.ret for e in eps) / max(1, len(eps)):.2f}")
    print(remote.summary())
    print(delay.summary())
    return 0


def _same_task(trained: str, robot: str) -> None:
    from robot_rl.export import ExportError, task_of

    if ":" in robot and task_of(trained) != task_of(robot):
        raise ExportError(f"the served policy was trained on {trained} (task {task_of(trained)}), not on {robot} "
                          f"(task {task_of(robot)}); set allow_other_task=true if it is meant to transfer")


COMMAND = cli.robot_command(
    "deploy", "run a trained policy on the robot safely",
    "Run a trained policy on the robot with every safety on and no learning.", lambda: DeployArgs, deploy,
    ["robot-rl deploy robot=127.0.0.1:50051 checkpoint=runs/hil_reach episodes=20",
     "robot-rl deploy robot=127.0.0.1:50051 policy_server=127.0.0.1:50061 episodes=20  # robot-rl serve-policy",
     "robot-rl deploy checkpoint=runs/<run>/checkpoints/best.pt teleop=keyboard out=data/deploy"],
)
