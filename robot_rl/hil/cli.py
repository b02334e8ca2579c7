"""The robot commands: ``serve-robot``, ``teleop``, ``hil-train`` and ``deploy``.

They take ``--flags`` (``--help`` on each) rather than Hydra overrides: they are operational tools run beside
a robot, and ``serve-robot`` in particular must be scriptable as a service. ``robot_rl.cli`` dispatches to them.
"""

from __future__ import annotations

import argparse
import ast
import logging
import signal
import sys
import time
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

from robot_rl.real.server import TOKEN_ENV


class CommandError(Exception):
    """A user mistake: printed as one line, exit status 2."""


def _kv(pairs: list[str] | None, flag: str) -> dict[str, Any]:
    """``key=value`` strings to a dict, values parsed as Python literals when they are one (else strings)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"{flag} expects key=value, got {pair!r}")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def _token_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token-file", default=None,
                   help=f"file whose first line is the shared token (default: the {TOKEN_ENV} environment variable)")
    p.add_argument("--token", default=None,
                   help="shared token on the command line (visible to every local user in the process list: "
                        f"prefer {TOKEN_ENV} or --token-file)")


def _token(args: argparse.Namespace) -> str | None:
    """The token from --token-file, --token or the environment; warnings on stderr; one-line errors."""
    from robot_rl.real.guard import load_token

    try:
        token, warnings = load_token(args.token, args.token_file)
    except ValueError as e:
        raise CommandError(str(e)) from None
    for warning in warnings:
        print(f"robot-rl: warning: {warning}", file=sys.stderr, flush=True)
    return token


def _robot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot", default="127.0.0.1:50051", help="address of serve-robot (host:port)")
    _token_args(p)
    p.add_argument("--tls-root-cert", default=None, help="PEM certificate to trust; enables TLS")
    p.add_argument("--step-timeout-s", type=float, default=0.5,
                   help="deadline of one step; a step that misses it ends the episode (the run goes on)")


def _teleop_args(p: argparse.ArgumentParser, default: str | None) -> None:
    p.add_argument("--device", default=default,
                   help="operator device: keyboard, gamepad, spacemouse, scripted, replay" +
                        (" (default: none)" if default is None else f" (default: {default})"))
    p.add_argument("--device-arg", action="append", metavar="KEY=VALUE",
                   help="device constructor argument, repeatable (e.g. noise=0.3, frame=beside)")


def _client(args: argparse.Namespace) -> Any:
    from robot_rl.real.client import RobotClient

    return RobotClient(args.robot, _token(args), tls_root_cert=args.tls_root_cert, step_timeout_s=args.step_timeout_s)


def _teleop(args: argparse.Namespace, spec_name: str, defaults: dict[str, Any] | None = None) -> Any:
    if not args.device:
        return None
    from robot_rl.real.teleop import make_teleop

    kwargs = dict(defaults or {}) if args.device == "scripted" else {}
    if args.device == "scripted":
        task = spec_name.split(":", 1)[-1].split("-", 1)[0]  # "sim_arm:push-sparse" -> "push"
        kwargs.setdefault("task", task)
    kwargs.update(_kv(args.device_arg, "--device-arg"))
    try:
        return make_teleop(args.device, **kwargs)
    except (ValueError, TypeError, ImportError) as e:
        raise CommandError(f"--device {args.device}: {e}") from None


def _writer(path: str | None, spec: Any, append: bool, task: str) -> Any:
    if path is None:
        return None
    from robot_rl.datasets import DatasetWriter, transition_features

    features = transition_features(spec.state_dim, spec.action_dim)
    fps = max(1, int(round(spec.control_hz)))
    exists = (Path(path) / "meta" / "info.json").is_file()
    if exists and not append:
        raise CommandError(f"dataset {path} exists; pass --append to add episodes to it or choose another path")
    return DatasetWriter(path, fps=fps, features=features, robot_type=spec.name, task=task, resume=exists)


def _run_episodes(session: Any, client: Any, device: Any, writer: Any, episodes: int, seed: int | None) -> None:
    """Run ``episodes`` of ``session``; on Ctrl-C hold the robot; always release the device, dataset and channel."""
    try:
        if device is not None:
            device.connect()
        session.run(episodes=episodes, seed=seed)
    except KeyboardInterrupt:
        client.step(None)
    finally:
        if device is not None:
            device.disconnect()
        if writer is not None:
            writer.close()
        client.close()


# -- serve-robot --------------------------------------------------------------------------------------------
def serve_robot(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl serve-robot", description="Serve a robot driver over the bridge.")
    p.add_argument("--driver", default="sim_arm", help="sim_arm (simulated MuJoCo arm) or ur_rtde (untested)")
    p.add_argument("--driver-arg", action="append", metavar="KEY=VALUE",
                   help="driver constructor argument, repeatable (ur_rtde: ip=192.168.1.10)")
    p.add_argument("--task", default="reach", help="sim_arm: reach, push or pick_place")
    p.add_argument("--reward", default="dense", help="sim_arm: dense or sparse")
    p.add_argument("--control-hz", type=float, default=20.0, help="control rate of the loop")
    p.add_argument("--seed", type=int, default=0, help="sim_arm: seed of the first episode")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all interfaces)")
    p.add_argument("--port", type=int, default=50051)
    _token_args(p)
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="serve without a token (refused unless --host is a loopback address)")
    p.add_argument("--watchdog-s", type=float, default=0.5, help="hold after this long without commands")
    p.add_argument("--max-message-bytes", type=int, default=64 * 1024, help="larger requests are refused")
    p.add_argument("--tls-cert", default=None, help="PEM certificate chain (with --tls-key: TLS)")
    p.add_argument("--tls-key", default=None)
    p.add_argument("--status-every", type=float, default=10.0, help="seconds between status lines (0: none)")
    p.add_argument("--run-for", type=float, default=0.0, help="stop after this many seconds (0: until Ctrl-C)")
    args = p.parse_args(argv)

    from robot_rl.real.drivers import make_driver
    from robot_rl.real.guard import format_address
    from robot_rl.real.server import RobotServer, ServerConfig

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("robot_rl.real").setLevel(logging.INFO)

    kwargs = _kv(args.driver_arg, "--driver-arg")
    if args.driver == "sim_arm":
        kwargs = {"task": args.task, "reward": args.reward, "control_hz": args.control_hz, "seed": args.seed,
                  **kwargs}
    token = _token(args)
    config = ServerConfig(host=args.host, port=args.port, token=token, allow_unauthenticated=args.allow_unauthenticated,
                          watchdog_s=args.watchdog_s, max_message_bytes=args.max_message_bytes, tls_cert=args.tls_cert, tls_key=args.tls_key)
    try:
        config.validate()
        robot = make_driver(args.driver, **kwargs)
    except (ValueError, TypeError, ImportError) as e:
        raise CommandError(str(e)) from None
    server = RobotServer(robot, config)
    try:
        port = server.start()
    except OSError as e:
        raise CommandError(str(e)) from None
    auth = "token required" if token else "UNAUTHENTICATED (loopback only)"
    tls = ", TLS" if args.tls_cert else ""
    print(f"serving {robot.spec.name} on {format_address(args.host, port)} at {robot.spec.control_hz:g} Hz ({auth}{tls}); "
          "Ctrl-C to stop", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    start = time.monotonic()
    try:
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
        print("server stopped; robot held", flush=True)
    return 0


# -- teleop -------------------------------------------------------------------------------------------------
def teleop(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl teleop", description="Drive the robot and record demonstrations.")
    _robot_args(p)
    _teleop_args(p, "keyboard")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default=None, help="dataset directory to record into (LeRobot v3.0 layout)")
    p.add_argument("--append", action="store_true", help="add episodes to an existing dataset")
    p.add_argument("--task-text", default=None, help="task description stored with each episode")
    p.add_argument("--seed", type=int, default=None, help="seed of the first episode (the next ones count up)")
    args = p.parse_args(argv)
    from robot_rl.hil.session import Session

    client = _client(args)
    spec = client.spec()
    device = _teleop(args, spec.name, {"mode": "always"})
    writer = _writer(args.out, spec, args.append, args.task_text or spec.name)
    if device is None:
        raise CommandError("teleop needs a --device")
    session = Session(client, teleop=device, writer=writer, task=args.task_text or spec.name)
    _run_episodes(session, client, device, writer, args.episodes, args.seed)
    eps = session.episodes
    ok = sum(e.success for e in eps)
    where = f" in {args.out}" if args.out else ""
    print(f"done: {len(eps)} episodes ({ok} successful){where}")
    return 0


# -- hil-train ------------------------------------------------------------------------------------------------
_HIL_AGENT = {  # the arm presets' SAC settings (configs/experiment/rlpd_push.yaml and friends)
    "actor_layer_norm": True, "critic_layer_norm": True, "init_temperature": 0.05, "target_entropy_scale": 0.5,
    "backup_entropy": False, "num_critics": 2,
}


def hil_train(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl hil-train",
                                description="Human-in-the-loop RL (HIL-SERL): a learning policy, an operator who "
                                            "takes over, interventions into the online and the prior buffer.")
    _robot_args(p)
    _teleop_args(p, "scripted")
    p.add_argument("--steps", type=int, default=6000, help="env steps (control ticks with an action) to run")
    p.add_argument("--run-dir", default=None, help="default: runs/<date>_hil_<robot name>")
    p.add_argument("--demos", default=None, help="dataset that pre-fills the prior buffer")
    p.add_argument("--no-record", action="store_true", help="do not record episodes to <run-dir>/episodes")
    p.add_argument("--rewind", action="store_true", help="RaC-style rewind segments (operator event REWIND)")
    p.add_argument("--utd", type=float, default=1.0, help="learner updates per transition")
    p.add_argument("--learning-starts", type=int, default=300, help="transitions before the first update")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--agent", action="append", metavar="KEY=VALUE", help="SACConfig field, repeatable")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads of this process")
    p.add_argument("--distributed", action="store_true",
                   help="run the learner as a Ray actor (another process or machine) instead of in this process")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join (default: start a local one)")
    p.add_argument("--learner-name", default="robot-rl-learner")
    p.add_argument("--learner-device", default="cpu", help="torch device of the learner (e.g. cuda)")
    args = p.parse_args(argv)

    import torch

    from robot_rl.agents.sac import SACConfig, build_actor
    from robot_rl.hil.learner import HILLearner, LearnerConfig, LocalLink
    from robot_rl.hil.session import Session

    torch.set_num_threads(args.threads)
    client = _client(args)
    spec = client.spec()
    run_dir = Path(args.run_dir or f"runs/{datetime.now():%Y-%m-%d_%H-%M-%S}_hil_{spec.name.replace(':', '_')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    agent_kwargs = {**_HIL_AGENT, "batch_size": args.batch_size, **_kv(args.agent, "--agent")}
    known = {f.name for f in fields(SACConfig)}
    unknown = sorted(set(agent_kwargs) - known)
    if unknown:
        raise CommandError(f"--agent: unknown SACConfig field(s) {unknown}; choose from {sorted(known)}")
    sac = SACConfig(**agent_kwargs)
    cfg = LearnerConfig(obs_dim=spec.state_dim, action_dim=spec.action_dim, sac=sac, utd=args.utd,
                        learning_starts=args.learning_starts, seed=args.seed, device=args.learner_device,
                        demo_path=args.demos)
    try:
        cfg.validate()
    except ValueError as e:
        raise CommandError(str(e)) from None

    torch.manual_seed(args.seed)
    actor = build_actor(spec.state_dim, spec.action_dim, sac)

    def policy(state: Any) -> Any:
        with torch.no_grad():
            return actor(torch.as_tensor(state, dtype=torch.float32)[None])[0][0].numpy()

    def load(weights: dict[str, Any]) -> None:
        actor.load_state_dict(weights)

    learner_ckpt = run_dir / "learner.pt"
    learner = None
    if args.distributed:
        import ray

        from robot_rl.hil.distributed import RayLink, connect_learner, start_learner

        try:
            ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False,
                     ignore_reinit_error=True, namespace="robot-rl")
        except Exception as e:  # Ray raises a bare Exception when its node does not come up
            raise CommandError(f"could not start or join Ray ({args.ray_address or 'local'}): {e}") from None
        # Keep this handle for the whole run: a non-detached Ray actor dies when its last handle goes away.
        handle = start_learner(args.learner_name, cfg, run_dir / "learner", namespace="robot-rl")
        # Wait for it to answer before the control loop starts: a learner takes seconds to come up, longer
        # than the link's call deadline.
        connect_learner(args.learner_name, "robot-rl", timeout_s=120.0)
        link: Any = RayLink(args.learner_name, "robot-rl", handle=handle)
        mode = f"learner on Ray ({args.learner_name}, {args.learner_device})"
    else:
        learner = HILLearner(cfg)
        if learner_ckpt.is_file():
            from robot_rl import checkpoint

            learner.load_state_dict(checkpoint.load(learner_ckpt))
            print(f"resumed the learner from {learner_ckpt} ({learner.transitions:,} transitions)")
        link = LocalLink(learner)
        mode = "learner in this process"
    device = _teleop(args, spec.name, {"mode": "takeover"})
    writer = None if args.no_record else _writer(str(run_dir / "episodes"), spec, True, spec.name)
    session = Session(client, policy=policy, policy_loader=load, teleop=device, link=link, writer=writer,
                      rewind=args.rewind, metrics_path=run_dir / "hil_metrics.csv", task=spec.name)
    print(f"hil-train on {spec.name} at {spec.control_hz:g} Hz for {args.steps:,} steps ({mode}; operator: "
          f"{args.device or 'none'}); run directory {run_dir}", flush=True)
    t0 = time.monotonic()
    try:
        if device is not None:
            device.connect()
        session.run(steps=args.steps, seed=args.seed * 100_000)
    except KeyboardInterrupt:
        print("interrupted; saving", flush=True)
    finally:
        try:
            client.step(None)
        except Exception:
            pass
        if device is not None:
            device.disconnect()
        if writer is not None:
            writer.close()
        if learner is not None:
            from robot_rl import checkpoint

            checkpoint.atomic_save(learner.state_dict(), learner_ckpt)
        elif args.distributed:
            _stop_ray_learner(link, handle)
        client.close()
    _summary(session.episodes, time.monotonic() - t0, run_dir)
    return 0


def _stop_ray_learner(link: Any, handle: Any) -> None:
    import ray

    link.flush()
    try:
        ray.get(handle.stop.remote(save=True), timeout=60)
    except Exception as e:  # the learner may already be gone; its last periodic checkpoint stands
        print(f"warning: could not stop the learner cleanly: {e}", file=sys.stderr)
    ray.shutdown()


def _summary(episodes: list[Any], wall_s: float, run_dir: Path) -> None:
    if not episodes:
        print("done: no episodes")
        return
    q = max(1, len(episodes) // 4)
    first, last = episodes[:q], episodes[-q:]

    def rate(eps: list[Any]) -> tuple[float, float]:
        steps = sum(e.length for e in eps) or 1
        return sum(e.interventions for e in eps) / steps, sum(e.success for e in eps) / len(eps)

    (i0, s0), (i1, s1) = rate(first), rate(last)
    print(f"done: {len(episodes)} episodes, {episodes[-1].env_steps:,} steps in {wall_s:.0f}s | intervention rate "
          f"{100 * i0:.0f}% (first quarter) -> {100 * i1:.0f}% (last quarter) | success {100 * s0:.0f}% -> "
          f"{100 * s1:.0f}% | per-episode log {run_dir / 'hil_metrics.csv'}")


# -- deploy ---------------------------------------------------------------------------------------------------
def deploy(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl deploy",
                                description="Run a trained policy on the robot with every safety on and no learning.")
    _robot_args(p)
    _teleop_args(p, None)
    p.add_argument("--checkpoint", required=True,
                   help="a training checkpoint (runs/<run>/checkpoints/best.pt) or a hil-train learner.pt "
                        "(<run-dir>/learner.pt, or <run-dir>/learner/checkpoints/learner.pt with --distributed)")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of the mean")
    p.add_argument("--record", default=None, help="dataset directory to record the episodes into")
    p.add_argument("--append", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    import torch

    from robot_rl.hil.session import Session

    client = _client(args)
    spec = client.spec()
    actor = load_actor(Path(args.checkpoint), spec.state_dim, spec.action_dim)

    def policy(state: Any) -> Any:
        with torch.no_grad():
            return actor(torch.as_tensor(state, dtype=torch.float32)[None], not args.stochastic)[0][0].numpy()

    device = _teleop(args, spec.name, {"mode": "takeover"})
    writer = _writer(args.record, spec, args.append, spec.name)
    session = Session(client, policy=policy, teleop=device, writer=writer, task=spec.name)
    _run_episodes(session, client, device, writer, args.episodes, args.seed)
    eps = session.episodes
    print(f"done: {len(eps)} episodes | success {sum(e.success for e in eps)}/{len(eps)} | mean return "
          f"{sum(e.ret for e in eps) / max(1, len(eps)):.2f}")
    return 0


def load_actor(path: Path, obs_dim: int, action_dim: int) -> Any:
    """The actor network of a training checkpoint or a hil-train ``learner.pt``."""
    from robot_rl import checkpoint
    from robot_rl.agents.sac import SACConfig, build_actor

    state = checkpoint.load(path)
    if isinstance(state.get("learner"), dict):  # the Ray learner's checkpoint wraps the learner state
        state = state["learner"]
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    if "agent" in state and "agent" in config:  # robot-rl train / finetune
        sac = SACConfig(**config["agent"])
    elif "agent" in state and "sac" in config:  # hil-train (robot_rl.hil.learner.HILLearner.state_dict)
        sac = SACConfig(**config["sac"])
    else:
        raise checkpoint.CheckpointError(f"{path} is neither a training checkpoint nor a hil-train learner.pt")
    actor = build_actor(obs_dim, action_dim, sac)
    try:
        actor.load_state_dict(state["agent"]["actor"])
    except RuntimeError as e:
        raise checkpoint.CheckpointError(f"{path} does not fit this robot ({obs_dim} state, {action_dim} "
                                         f"actions): {e}") from None
    return actor.eval()


COMMANDS = {"serve-robot": serve_robot, "teleop": teleop, "hil-train": hil_train, "deploy": deploy}
