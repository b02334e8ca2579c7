"""`robot-rl export`: any run (or policy directory) as one policy directory, optionally with an ONNX graph.

Runs store their results in several ways: `robot-rl train` (SAC, any agent preset) and hil-train keep the actor
inside training checkpoints, residual RL and DSRL keep only their SAC agent (the base policy is a separate
directory named in the run's config), and BC, ReinFlow and DPPO write a policy directory. `policy_from_run`
turns each into a `robot_rl.policies.io` policy whose `act` is the run's own evaluation policy, so deployment
(`eval policy=`, `deploy`, `Agent.load`, onnxruntime) needs only the `policies` package. A SAC agent that learned
from cameras exports with its encoder and state statistics (`ActorPolicy(cameras=...)`; the image sizes are read
from the run's env at its `env.pixel_size`); `deploy` runs it on a robot that serves those cameras at that size.

Which weights: a policy directory the run published (`<run>/policy`) first, else `checkpoints/best.pt`, else
`checkpoints/latest.pt`; a checkpoint file can be named directly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from robot_rl import checkpoint
from robot_rl.errors import UserError
from robot_rl.policies.io import CONFIG, SavedPolicy, load_policy, read_metadata, save_policy


class ExportError(UserError, ValueError):
    """A run that cannot be exported, or an output that must not be replaced; one line naming it."""


ONNX_EXTRA = "export"  # the pyproject extra that installs onnx and onnxruntime


def policy_from_run(run: str | os.PathLike[str], device: str = "cpu") -> tuple[SavedPolicy, dict[str, Any]]:
    """(policy, metadata) of a run directory, a checkpoint file or a policy directory (module docstring)."""
    path = Path(run)
    if not path.exists():
        raise ExportError(f"run not found: {path}")
    for policy_dir in (path, path / "policy"):
        if (policy_dir / CONFIG).is_file():
            meta = read_metadata(policy_dir)
            meta.pop("onnx", None)  # describes a graph of an earlier export, which this one replaces or drops
            return load_policy(policy_dir, device), {**meta, "exported_from": str(policy_dir)}
    if path.is_dir():
        ckpts = path / "checkpoints"
        found = [ckpts / name for name in ("best.pt", "latest.pt") if (ckpts / name).is_file()]
        if not found:
            if (path / "config.yaml").is_file():
                raise ExportError(f"{path} has no checkpoint yet (checkpoints/best.pt or latest.pt): "
                                  "export it after its first evaluation")
            raise ExportError(f"{path} is neither a run directory (config.yaml, checkpoints/) nor a policy "
                              f"directory ({CONFIG})")
        path = found[0]
    return policy_from_checkpoint(path, checkpoint.load(path), device)


def policy_from_checkpoint(path: Path, state: dict, device: str = "cpu") -> tuple[SavedPolicy, dict[str, Any]]:
    """(policy, metadata) of a loaded checkpoint `state` (read from `path`): a `robot-rl train` or `finetune`
    checkpoint, or a hil-train `learner.pt`. Raises `CheckpointError` for anything else or weights that do not
    fit the checkpoint's own config."""
    if isinstance(state.get("learner"), dict):  # the Ray learner's checkpoint wraps the learner state
        state = state["learner"]
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    meta: dict[str, Any] = {"exported_from": str(path)}
    if "env_steps" in state:
        meta["env_steps"] = int(state["env_steps"])
    if "method" in config:
        policy, more = _finetune_policy(path, config, state.get("method", state), device)
    else:
        policy, more = _sac_policy(path, config, state, device)
    return policy, {**meta, **more}


def _sac_policy(path: Path, config: dict, state: dict, device: str) -> tuple[SavedPolicy, dict[str, Any]]:
    """The actor of a `robot-rl train` checkpoint or a hil-train `learner.pt`; for a pixel (camera) agent with
    its encoder and state statistics, reading the camera groups' image sizes from the run's env."""
    from robot_rl.agents.sac import SACConfig, actor_policy_kwargs, policy_state_dict
    from robot_rl.policies.actor_policy import ActorPolicy

    if "agent" not in state or not ({"agent", "sac"} & config.keys()):
        raise checkpoint.CheckpointError(f"{path} is not a robot-rl training checkpoint or learner.pt")
    sac = SACConfig.from_dict(config.get("agent", config.get("sac")))
    env = config.get("env") or {}
    spec = env.get("spec")
    pixels = "encoder" in state["agent"]
    cameras: dict[str, tuple[int, ...]] = {}
    delay = None  # hil-train learns on the robot's own delay; only `train` runs have env_delay
    if "obs_dim" in config:  # hil-train's learner config; a camera learner's names its groups and image sizes
        cameras = {g: tuple(int(v) for v in shape) for g, shape in (config.get("cameras") or {}).items()}
        if pixels and not cameras:
            raise ExportError(f"{path}: a learner.pt with a camera encoder names no image sizes; export its run")
        obs_dim, action_dim = int(config["obs_dim"]), int(config["action_dim"])
    else:
        pixel_size = tuple(env["pixel_size"]) if pixels and env.get("pixel_size") else None
        obs_dim, action_dim, cameras, delay = _env_dims(spec, path, pixel_size, config.get("env_delay"))
        if pixels and not cameras:
            raise ExportError(f"{path}: a camera agent, but its env {spec!r} has no camera groups")
    kwargs = actor_policy_kwargs(obs_dim, action_dim, sac, int(env.get("action_repeat", 1)),
                                 cameras if pixels else None)
    policy = ActorPolicy(**kwargs)
    _load(policy, policy_state_dict(state["agent"]), path)
    meta: dict[str, Any] = {"kind": "sac", "env_spec": spec}
    if delay is not None:  # trained under env_delay: deploy must feed the actions in flight (and checks the delay)
        meta["delay"] = delay
    return policy.to(device).eval(), meta


def _finetune_policy(path: Path, config: dict, state: dict, device: str) -> tuple[SavedPolicy, dict[str, Any]]:
    """The evaluation policy of a `robot-rl finetune method=...` checkpoint, built around its base policy."""
    from robot_rl.agents.sac import SACConfig, actor_policy_kwargs
    from robot_rl.policies.composed import NoiseSteeredPolicy, ResidualPolicy, base_spec

    method = config["method"]
    meta = {"kind": method, "env_spec": (config.get("env") or {}).get("spec"), "base_policy": config["base_policy"]}
    base = load_policy(config["base_policy"], device="cpu")
    if method in ("residual", "dsrl"):
        sac = SACConfig.from_dict(config["agent"])
        if method == "residual":
            r = config["residual"]
            actor = actor_policy_kwargs(base.features_dim + base.action_dim, base.action_dim, sac)
            policy: Any = ResidualPolicy(base_spec(base), actor, r["scale"], r["base_deterministic"])
            net = policy.correction.actor
        else:
            actor = actor_policy_kwargs(base.features_dim, base.horizon * base.action_dim, sac)
            policy = NoiseSteeredPolicy(base_spec(base), actor, config["dsrl"]["noise_bound"])
            net = policy.steering.actor
        policy.base.load_state_dict(base.state_dict())
        _load(net, state["agent"]["actor"], path)
        return policy.to(device).eval(), meta
    if method == "rl100":  # the accepted policy: the base policy's network with the rounds' weights
        _load(base, state["policy"], path)
        return base.requires_grad_(False).to(device).eval(), meta
    if method == "reinflow":
        from robot_rl.finetune.reinflow import ReinFlowChain

        r = config["reinflow"]
        chain: Any = ReinFlowChain(base, r["num_steps"], r["min_std"], r["max_std"], tuple(r["noise_hidden"]))
    else:
        from robot_rl.finetune.dppo import DPPOChain

        d = config["dppo"]
        chain = DPPOChain(base, d["ft_steps"], d["num_inference_steps"], d["min_std"])
        if chain.first_ft > 0:
            raise ExportError(f"{path}: a dppo chain with frozen steps (dppo.ft_steps={d['ft_steps']} < "
                              f"{len(chain.timesteps)} DDIM steps) is not a single diffusion policy; export "
                              "runs fine-tuned with ft_steps equal to the DDIM steps")
    _load(chain, state["policy"], path)
    return chain.base_policy().requires_grad_(False).to(device).eval(), meta


def _env_dims(spec: str, path: Path, pixel_size: tuple[int, ...] | None = None, env_delay: dict | None = None
              ) -> tuple[int, int, dict[str, tuple[int, ...]], dict[str, Any] | None]:
    """(obs_dim, action_dim, camera groups -> (H, W, C), the delay's metadata or None) of the run's env (one env
    built to read them, with the run's `pixel_size` for a camera agent and its `env_delay`: a delay-aware actor
    reads the actions in flight after the state)."""
    from robot_rl import envs
    from robot_rl.agents.sac import camera_groups
    from robot_rl.envs.delay import ActionDelay, DelayedEnv

    try:
        delay = ActionDelay.from_dict(env_delay, "env_delay") if env_delay else None
        with envs.make(spec, num_envs=1, pixel_size=pixel_size, delay=delay) as env:
            spec_ = env.observation_spec
            meta = env.metadata() if isinstance(env, DelayedEnv) else None
            return int(spec_["state"][0][0]), int(env.action_dim), camera_groups(spec_), meta
    except Exception as e:
        raise checkpoint.CheckpointError(
            f"{path}: cannot build its env {spec!r} to read the policy's sizes ({type(e).__name__}: {e})"
        ) from None


def _load(module: Any, weights: dict, path: Path) -> None:
    try:
        module.load_state_dict(weights)
    except RuntimeError as e:
        raise checkpoint.CheckpointError(
            f"{path}: weights do not fit the run's config ({str(e).splitlines()[0]})"
        ) from None


def export(run: str | os.PathLike[str], out: str | os.PathLike[str], onnx: bool = False) -> Path:
    """Write `run`'s policy to the policy directory `out` (replacing only a policy directory), with `policy.onnx`
    when `onnx`; returns `out`."""
    out = Path(out)
    if out.exists() and not (out / CONFIG).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not a policy directory; choose another out= (nothing was written)")
    if onnx:
        missing = [name for name in ("onnx", "onnxruntime") if not _installed(name)]
        if missing:
            raise ExportError(f"format=onnx needs {' and '.join(missing)}: pip install 'robot-rl[{ONNX_EXTRA}]'")
    policy, meta = policy_from_run(run)
    extra: dict[str, str | os.PathLike[str]] = {}
    scratch = None
    try:
        if onnx:
            from robot_rl.policies.onnx import ONNX_FILE, export_onnx

            out.parent.mkdir(parents=True, exist_ok=True)
            scratch = out.parent / f".{out.name}.onnx-{os.getpid()}"
            scratch.mkdir(exist_ok=True)
            try:
                meta["onnx"] = export_onnx(policy, scratch / ONNX_FILE)
            except ValueError as e:
                raise ExportError(f"{run}: {e}") from None
            extra[ONNX_FILE] = scratch / ONNX_FILE
        save_policy(policy, out, meta, extra)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def _installed(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


def task_of(name: str) -> str:
    """The task an env spec, a robot's name or a dataset's task label names, without backend, reward and camera
    variants: `arm:push-sparse`, `sim_arm:push-pixels` and `push` are all `push` (a policy of one runs on the
    others' observations); `gym:my_envs:Slide-v0` is `Slide-v0`."""
    task = name.rsplit(":", 1)[-1]
    for suffix in ("-pixels", "-sparse"):
        task = task.removesuffix(suffix)
    return task


def _trained_tasks(path: Path) -> list[str]:
    """The task names a policy directory, run directory or checkpoint says it was trained on (its config.json's
    `env_spec` or its dataset's `tasks`; a run's config.yaml `env.spec`); empty where it names none. Free-text task
    descriptions (`collect task="pick up the cube"`) name no env and are left out."""
    import yaml

    names: list[str] = []
    for policy_dir in (path, path / "policy"):
        if (policy_dir / CONFIG).is_file():
            meta = read_metadata(policy_dir)
            names = [meta["env_spec"]] if meta.get("env_spec") else [str(t) for t in meta.get("tasks") or []]
            break
    else:
        run_dir = path.parent.parent if path.is_file() else path  # <run>/checkpoints/best.pt
        try:
            config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
            spec = (config.get("env") or {}).get("spec")
        except (OSError, yaml.YAMLError, AttributeError):
            spec = None
        names = [spec] if isinstance(spec, str) and spec else []
    return [n for n in names if n and not any(c.isspace() for c in n)]


def check_task(path: str | os.PathLike[str], target: str, allow_other_task: bool = False) -> None:
    """Refuse to run the policy at `path` (policy dir, run dir or checkpoint) on `target` (an env spec or a
    robot's name) when it names the task it was trained on and that is another one: a push policy on a reach
    robot runs without error and does nothing useful, so the mistake would otherwise go unnoticed. A target with
    no backend prefix (a real robot's driver name, e.g. `ur_rtde`) names no task and is not checked;
    `allow_other_task=true` is for a policy meant to transfer."""
    if allow_other_task or ":" not in target:
        return
    trained = _trained_tasks(Path(path))
    if not trained or task_of(target) in {task_of(t) for t in trained}:
        return
    tasks = ", ".join(sorted({task_of(t) for t in trained}))
    raise ExportError(f"{path} was trained on {', '.join(trained)} (task {tasks}), not on {target} (task "
                      f"{task_of(target)}); run it on its own task, or set "
                      "allow_other_task=true if it is meant to transfer")
