"""`robot-rl collect`: record episodes of a scripted expert, a random policy or a trained checkpoint to a dataset.

Episodes are written as they finish (LeRobotDataset v3 layout, see `robot_rl.datasets`), so an interrupted
recording keeps every finished episode; `append=true` adds to an existing dataset, which is how a
mixed-quality dataset is built (expert, noisy and failed episodes, one `collect` each).

Camera tasks (`arm:<task>-pixels`) record `observation.state` (the observation's state group: proprioception only)
and one video per camera (`pixels/<camera>` -> `observation.images.<camera>`). Their scripted expert is privileged:
it steers by `env.privileged_state()`, the simulator's full state, which is never written to the dataset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from robot_rl import envs
from robot_rl.fields import help_field as _help

Policy = Callable[[dict[str, Tensor]], Tensor]


@dataclass
class CollectEnvArgs:
    """The env keys of `robot-rl train` that recording needs, under the same names."""

    spec: str = _help("arm:push", "environment spec to record in (as env.spec= of robot-rl train)")
    num_envs: int = _help(4, "parallel envs recording at once")
    max_episode_steps: int | None = _help(None, "time limit in env steps (default: the task's)")
    pixel_size: list[int] = _help([84, 84], "camera observations' height and width (arm:<task>-pixels)")


@dataclass
class CollectArgs:
    env: CollectEnvArgs = field(default_factory=CollectEnvArgs)
    out: str = _help("", "dataset directory to write")
    episodes: int = _help(20, "finished episodes to record")
    policy: str = _help("expert", "expert (the task's scripted expert), random, or a checkpoint file (.pt; "
                        "one trained on arm:<task> also records in arm:<task>-pixels, acting on the full state)")
    noise: float = _help(0.0, "std of Gaussian noise added to the policy's actions (clipped to [-1, 1])")
    seed: int = _help(0, "seed of the envs and the noise")
    append: bool = _help(False, "add episodes to an existing dataset instead of refusing to overwrite it")
    task: str = _help("", "task description stored with each episode (default: derived from the env spec)")
    device: str = _help("cpu", "device of a checkpoint policy")


def checkpoint_policy(path: Path, env: envs.BatchedEnv, device: str = "cpu") -> Policy:
    """The stochastic SAC policy of a training checkpoint (latest.pt, best.pt or pretrained.pt).

    A policy trained on a state arm task (`arm:push-sparse`) recording in its camera variant
    (`arm:push-sparse-pixels`) acts on the simulator's full state (`env.privileged_state()`, which is that state
    task's observation) while the dataset gets the camera variant's observation: how the frames of what a state
    policy does are recorded, e.g. a policy trained on a reward classifier's reward, whose false positives the
    classifier is then trained again on (HIL-SERL's second round of labels)."""
    from robot_rl import checkpoint
    from robot_rl.agents.sac import SAC, SACConfig
    from robot_rl.agents.sac import camera_groups as cameras

    state = checkpoint.load(path)
    if "agent" not in state or "config" not in state:
        raise checkpoint.CheckpointError(f"{path} is not a robot-rl training checkpoint (no agent/config in it)")
    trained_on = str(state["config"].get("env", {}).get("spec", ""))
    privileged = bool(trained_on) and env.spec == f"{trained_on}-pixels"
    if privileged:
        obs_dim, groups = int(env.privileged_state().shape[1]), []
    else:
        (obs_dim,) = env.observation_spec["state"][0]
        groups = cameras(env.observation_spec)
    agent = SAC(obs_dim, env.action_dim, SACConfig.from_dict(state["config"]["agent"]), device=device, cameras=groups)
    try:
        agent.load_state_dict(state["agent"])
    except RuntimeError as e:
        raise checkpoint.CheckpointError(f"{path} was trained on {trained_on or 'a different task'}, not on "
                                         f"{env.spec} or its state task ({e})") from e
    if privileged:
        return lambda obs: agent.act({"state": env.privileged_state().to(device)}).to(env.device)
    return lambda obs: agent.act(obs).to(env.device)


def camera_groups(env: envs.BatchedEnv) -> list[str]:
    """The env's camera observation groups (``pixels``, ``pixels/<camera>``), recorded as videos."""
    return [k for k in env.observation_spec if k == "pixels" or k.startswith("pixels/")]


def make_policy(args: CollectArgs, env: envs.BatchedEnv) -> tuple[Policy, Callable[[Tensor], None]]:
    """(policy, reset(done_mask)) for `args.policy`, with `args.noise` added."""
    reset: Callable[[Tensor], None] = lambda done: None  # noqa: E731
    if args.policy == "expert":
        from robot_rl.envs.arm.experts import make_expert

        # A camera task hides the scene's state from the observation: the expert is privileged and steers by the
        # simulator's full state (env.privileged_state()); the recorder still writes only the observation.
        privileged = bool(camera_groups(env))
        expert = make_expert(args.env.spec, env.num_envs, noise=0.0, seed=args.seed, device=env.device,
                             privileged=privileged)
        reset = expert.reset
        base = (lambda obs: expert.act(env.privileged_state())) if privileged else expert.act
    elif args.policy == "random":
        base = lambda obs: torch.rand(env.num_envs, env.action_dim, device=env.device) * 2 - 1  # noqa: E731
    else:
        base = checkpoint_policy(Path(args.policy), env, args.device)
    if args.noise <= 0:
        return base, reset
    g = torch.Generator(device=env.device).manual_seed(args.seed + 7919)

    def noisy(obs: dict[str, Tensor]) -> Tensor:
        action = base(obs)
        noise = torch.randn(action.shape, generator=g, device=action.device) * args.noise
        return (action + noise).clamp(-1.0, 1.0)

    return noisy, reset


#: what a run directory holds (train, finetune, bc, hil-train): a dataset written there would mix into the run
RUN_MARKERS = ("config.yaml", "checkpoints", "metrics.csv", "bc_config.json")


def check_out(args: CollectArgs, task: str) -> None:
    """Refuse an `out=` that would spoil something, before any env is built: an existing dataset without
    append=true, a run directory (its files and the dataset's would mix), and appending episodes of another task
    than the dataset's (a learner reading it would mix them) unless `task=` names the new task on purpose."""
    from robot_rl.datasets import DatasetError
    from robot_rl.datasets.format import read_tasks

    out = Path(args.out)
    dataset = (out / "meta" / "info.json").is_file()
    if not dataset and (marker := next((m for m in RUN_MARKERS if (out / m).exists()), None)):
        raise DatasetError(f"out={out} is a run directory (it holds {marker}); record the dataset in a directory of "
                           f"its own, e.g. out=data/{_slug(args.env.spec)}")
    if dataset and not args.append:
        raise DatasetError(f"{out}: a dataset already exists; pass append=true to add episodes to it, or choose "
                           f"another out=")
    if dataset and not args.task:
        others = sorted(set(read_tasks(out)) - {task})
        if others:
            raise DatasetError(f"{out} holds episodes of task {', '.join(others)}, not {task} (env.spec="
                               f"{args.env.spec}); record into another out=, or set task={task} to add a second "
                               "task on purpose")


def _slug(spec: str) -> str:
    return spec.replace(":", "_").replace("/", "_")


def collect(args: CollectArgs, message: Callable[[str], None] = print) -> dict:
    """Record `args.episodes` finished episodes into `args.out`; returns counts and the success rate."""
    from robot_rl.datasets import DatasetWriter, EpisodeRecorder, transition_features
    from robot_rl.datasets.format import IMAGE_PREFIX, STATE, camera_feature

    task = args.task or args.env.spec.split(":", 1)[-1]
    check_out(args, task)
    env = envs.make(args.env.spec, num_envs=args.env.num_envs, seed=args.seed,
                    max_episode_steps=args.env.max_episode_steps, pixel_size=tuple(args.env.pixel_size))
    try:
        obs = env.reset(seed=args.seed)  # before the policy: a privileged one reads the full state's size
        policy, reset_policy = make_policy(args, env)
        (state_dim,) = env.observation_spec["state"][0]
        # Camera group pixels/<camera> -> video feature observation.images.<camera>; other groups are not recorded.
        cameras = {group: camera_feature(group) for group in camera_groups(env)}
        images = {feature[len(IMAGE_PREFIX):]: tuple(env.observation_spec[group][0][:2])
                  for group, feature in cameras.items()}
        fps = round(1.0 / env.control_dt) if getattr(env, "control_dt", None) else 20
        writer = DatasetWriter(
            Path(args.out), fps=fps, features=transition_features(state_dim, env.action_dim, images=images or None),
            robot_type=args.env.spec.split(":", 1)[0], task=task, resume=args.append,
        )
        others = sorted(set(writer.tasks) - {task})
        if others:
            message(f"warning: {args.out} already holds episodes of task(s) {', '.join(others)}; adding episodes of "
                    f"{task!r} (a learner reading the dataset mixes them)")
        recorder = EpisodeRecorder(writer, env.num_envs, task=task, obs_keys={"state": STATE, **cameras})
        reset_policy(torch.ones(env.num_envs, dtype=torch.bool, device=env.device))
        # Exactly `episodes` episodes: each env records only episodes that were assigned when they started.
        active = torch.arange(env.num_envs) < args.episodes
        assigned, finished, successes = int(active.sum()), 0, 0
        t0, last_print = time.monotonic(), 0.0
        try:
            while finished < args.episodes:
                action = policy(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                recorder.record(obs, action, reward, terminated, truncated, info, active=active)
                done = (terminated | truncated).cpu()
                ended = done & active
                finished += int(ended.sum())
                if "success" in info:
                    successes += int((info["success"].cpu().bool() & ended).sum())
                for i in torch.nonzero(ended).flatten().tolist():
                    active[i] = assigned < args.episodes
                    assigned += int(active[i])
                obs = next_obs
                if bool(done.any()):
                    reset_policy(done.to(env.device))
                now = time.monotonic()
                if now - last_print > 5.0 or finished >= args.episodes:
                    last_print = now
                    message(f"[collect] {finished}/{args.episodes} episodes | success {successes / max(finished, 1):.0%} "
                            f"| {now - t0:.0f}s")
        finally:
            recorder.close()
            writer.close()
    finally:
        env.close()
    return {"episodes": finished, "success_rate": successes / max(finished, 1), "out": args.out}
