"""What a robot run opens on the client side of the bridge: the channel (with its token), the operator's device,
the dataset writer, the learned reward, and `drive`, which runs episodes of a `Session` and releases them all.
`deploy`, `teleop` and `hil-train` (`robot_rl.hil.run`) share these; each mistake is one line naming the key."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from robot_rl.errors import UserError
from robot_rl.signals import sigterm_as_interrupt


class CommandError(UserError):
    """A robot command's user mistake: printed as one line, exit status 2."""


def token(args: Any) -> str | None:
    """The token from token_file=, token= or the environment; warnings on stderr; one-line errors."""
    from robot_rl.real.guard import load_token

    try:
        value, warnings = load_token(args.token, args.token_file)
    except ValueError as e:
        raise CommandError(str(e)) from None
    for warning in warnings:
        print(f"robot-rl: warning: {warning}", file=sys.stderr, flush=True)
    return value


def client(args: Any) -> Any:
    """The channel to `serve-robot` at `robot=`."""
    from robot_rl.real.client import RobotClient

    return RobotClient(args.robot, token(args), tls_root_cert=args.tls_root_cert, step_timeout_s=args.step_timeout_s)


def operator_device(args: Any, spec: Any, mode: str) -> Any:
    """The operator device of `teleop=` for the robot of `spec` (None without one). The simulated operators
    (scripted, person) watch the arm task the robot serves, taking over in `mode` (always, takeover)."""
    if not args.teleop:
        return None
    from robot_rl.real.teleop import make_teleop

    kwargs: dict[str, Any] = {}
    if args.teleop in ("scripted", "person"):
        kwargs = {"mode": mode, "task": spec.name.split(":", 1)[-1].split("-", 1)[0]}  # sim_arm:push-sparse
        if args.teleop == "person":
            kwargs["control_hz"] = spec.control_hz
    kwargs.update(args.teleop_args)
    try:
        return make_teleop(args.teleop, **kwargs)
    except (ValueError, TypeError, ImportError) as e:
        raise CommandError(f"teleop={args.teleop}: {e}") from None


def dataset_writer(path: str | None, spec: Any, append: bool, task: str, cameras: bool = False) -> Any:
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


def connect_device(device: Any) -> None:
    """Connect the operator's device; a device that cannot start (no terminal for the keyboard, no joystick) is
    one line naming it, not a traceback."""
    if device is None:
        return
    try:
        device.connect()
    except (RuntimeError, OSError, ImportError) as e:
        raise CommandError(f"operator device {type(device).__name__} cannot start: {e}") from None


def drive(args: Any, channel: Any, spec: Any, mode: str, task: str, **policy: Any) -> list[Any]:
    """`args.episodes` episodes of a `Session` on `channel` (`policy`: its policy= and policy_reset=), with the
    operator's device of `teleop=` taking over in `mode`, recorded into `out=`: the episodes run. On Ctrl-C the robot
    is held; the device, dataset and channel are always released."""
    from robot_rl.console import attach
    from robot_rl.hil.session import Session

    device = writer = session = console = None
    try:
        device = operator_device(args, spec, mode)
        writer = dataset_writer(args.out, spec, args.append, task, cameras=bool(spec.cameras))
        console = attach(args, channel, spec, device, writer)  # the originals unless console=true
        session = Session(console.client, teleop=console.teleop, writer=console.writer, task=task,
                          success_frames=args.success_frames, **policy)
        console.bind(session)
        with sigterm_as_interrupt():
            connect_device(device)
            session.run(episodes=args.episodes, seed=args.seed)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        channel.step(None)
    finally:
        if console is not None:
            console.close()
        if device is not None:
            device.disconnect()
        if writer is not None:
            writer.close()
        channel.close()
    return session.episodes if session is not None else []


def learned_reward(args: Any, spec: Any, device: str = "cpu") -> Any:
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
