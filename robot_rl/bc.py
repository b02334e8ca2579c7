"""`robot-rl bc`: behaviour cloning of a chunked policy (MLP, diffusion or flow) from a recorded dataset.

Steps, top to bottom in `train_bc`:
1. read the dataset (`robot_rl.datasets.read_dataset`: state observations, actions, episode boundaries, and the
   camera videos `cameras` names: by default every camera the dataset recorded, which makes a camera policy whose
   encoder the BC loss trains, `robot_rl.policies.chunk_policy`);
2. build one training pair per frame: the observation at t and the action chunk a_t .. a_{t+H-1}
   (`chunk_pairs`). Chunks never cross an episode boundary: near an episode's end the chunk is padded by
   repeating the episode's last action (Diffusion Policy does the same), which teaches the policy to hold
   its final action rather than to start the next episode's motion;
3. fit the policy's observation and action normalisers to the dataset (they are saved with the weights);
4. train with Adam on uniformly sampled minibatches for `steps` steps, printing a progress line and
   appending the mean loss of every `log_every` steps to `metrics.csv` and TensorBoard (as every run does),
   and plotting it (`learning_curve.png`);
5. save the policy with `robot_rl.policies.io.save_policy` into `<run_dir>/policy` (with `bc_config.json` beside it);
6. optionally evaluate it on `env.spec`: one episode in each of `eval_episodes` envs, resetting the policy's
   action queue of every env whose episode ended (`terminated | truncated`), as any user of a chunked
   policy must.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from robot_rl.device import choose_threads
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help
from robot_rl.logger import MetricsLogger
from robot_rl.plots import plot_loss_curve
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.diffusion import SCHEDULES, DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import CONFIG, save_policy
from robot_rl.policies.normalize import MODES

POLICIES = ("mlp", "diffusion", "flow")


class BCError(UserError, ValueError):
    """A user mistake in a BC run (bad setting, mismatched env); one line naming it."""


@dataclass
class BCEnvArgs:
    spec: str = _help("", "environment spec to evaluate the trained policy in (e.g. arm:reach); empty: no evaluation")


@dataclass
class BCConfig:
    """Settings of `robot-rl bc` (every field is a `key=value` on the command line)."""

    dataset: str = _help("", "dataset directory (LeRobotDataset v3, e.g. from robot-rl collect)")
    policy: str = _help("mlp", "policy model: mlp, diffusion or flow")
    run_dir: str = _help("", "output directory (default: runs/<date>_bc-<policy>)")
    steps: int = _help(2000, "gradient steps")
    batch_size: int = _help(256, "(observation, action chunk) pairs per step")
    lr: float = _help(1e-3, "Adam learning rate")
    horizon: int = _help(8, "actions per predicted chunk")
    execute: int = _help(4, "actions of each chunk played before planning again (1..horizon)")
    hidden: list[int] = _help([256, 256, 256], "hidden widths of the policy network")
    gaussian: bool = _help(False, "mlp: Gaussian chunk (NLL loss) instead of a point prediction (MSE)")
    obs_norm: str = _help("mean_std", "observation normalisation: mean_std, min_max or identity")
    action_norm: str = _help("min_max", "action normalisation: min_max, mean_std or identity")
    num_train_steps: int = _help(100, "diffusion: T, diffusion timesteps in training")
    num_inference_steps: int = _help(10, "diffusion: DDIM steps; flow: Euler steps (K)")
    beta_schedule: str = _help("cosine", "diffusion: cosine or linear beta schedule")
    eta: float = _help(0.0, "diffusion: DDIM eta of stochastic sampling (0: deterministic given the noise)")
    shortcut: bool = _help(
        False, "flow: a shortcut model (conditioned on the step size, self-consistent large steps) for 1-2 step sampling"
    )
    cameras: list[str] | None = _help(
        None, "camera videos to learn from, by name (front, wrist); null: every camera the dataset has; []: state only"
    )
    encoder_feature_dim: int = _help(64, "camera policies: features per camera from its conv encoder")
    encoder_channels: int = _help(32, "camera policies: channels of every conv layer (DrQ: 32)")
    encoder_layers: int = _help(4, "camera policies: 3x3 conv layers, the first with stride 2 (DrQ: 4)")
    image_shift: int = _help(4, "camera policies: random-shift augmentation of training images, in pixels (0: none)")
    seed: int = _help(0, "seed of the initialisation, minibatches, noise and eval envs")
    device: str = _help("cpu", "torch device to train on")
    threads: int | None = _help(
        None, "torch CPU threads (default: torch's, or the free cores where others keep them busy; 1 is "
              "fastest for small nets)"
    )
    log_every: int = _help(200, "steps between progress lines and metrics.csv rows")
    env: BCEnvArgs = field(default_factory=lambda: BCEnvArgs())
    eval_episodes: int = _help(10, "evaluation episodes (one per env, run in parallel)")
    eval_max_episode_steps: int | None = _help(
        None, "time limit of evaluation episodes (default: the task's)"
    )
    eval_deterministic: bool = _help(True, "evaluate with zero noise (the policy's deterministic action)")
    quiet: bool = _help(False, "no progress lines")

    def validate(self) -> None:
        """Raise BCError naming the first bad field."""
        checks = [
            (bool(self.dataset), "bc needs dataset=<dataset dir> (robot-rl collect writes one)"),
            (
                self.policy in POLICIES,
                f"unknown policy '{self.policy}'; choose one of: {', '.join(POLICIES)}",
            ),
            (self.steps >= 1 and self.batch_size >= 1, "steps and batch_size must be >= 1"),
            (self.lr > 0, "lr must be > 0"),
            (1 <= self.execute <= self.horizon, "need 1 <= execute <= horizon"),
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "hidden must list positive widths"),
            (self.obs_norm in MODES, f"obs_norm must be one of: {', '.join(MODES)}"),
            (self.action_norm in MODES, f"action_norm must be one of: {', '.join(MODES)}"),
            (self.beta_schedule in SCHEDULES, f"beta_schedule must be one of: {', '.join(SCHEDULES)}"),
            (
                1 <= self.num_inference_steps <= self.num_train_steps,
                "need 1 <= num_inference_steps <= num_train_steps",
            ),
            (0.0 <= self.eta <= 1.0, "eta must be in [0, 1]"),
            (not self.shortcut or self.policy == "flow", "shortcut=true is an option of policy=flow"),
            (self.log_every >= 1, "log_every must be >= 1"),
            (self.threads is None or self.threads >= 1, "threads must be >= 1 or null"),
            (self.eval_episodes >= 1, "eval_episodes must be >= 1"),
            (min(self.encoder_feature_dim, self.encoder_channels, self.encoder_layers) >= 1,
             "encoder_feature_dim, encoder_channels and encoder_layers must be >= 1"),
            (self.image_shift >= 0, "image_shift must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise BCError(message)


def chunk_pairs(obs: Tensor, actions: Tensor, episode_lengths: Tensor, horizon: int) -> tuple[Tensor, Tensor]:
    """(obs [M, O], action chunks [M, H, A]) for frames stored episode after episode (lengths sum to M).

    Chunk t of an episode is its actions t .. t+H-1, with indices past the episode's last frame replaced by
    the last frame (the module docstring says why).
    """
    lengths = episode_lengths.long()
    m = int(lengths.sum())
    if m != obs.shape[0] or m != actions.shape[0]:
        raise ValueError(f"episode lengths sum to {m}, but there are {obs.shape[0]} frames")
    # [M]: the index of the last frame of each frame's episode
    ends = torch.repeat_interleave(torch.cumsum(lengths, 0) - 1, lengths)
    index = torch.minimum(torch.arange(m)[:, None] + torch.arange(horizon)[None, :], ends[:, None])
    return obs, actions[index]


def make_policy(cfg: BCConfig, obs_dim: int, action_dim: int,
                cameras: dict[str, list[int]] | None = None) -> ChunkPolicy:
    """The untrained policy `cfg.policy` with the settings of `cfg`; with `cameras` (group -> [H, W, C]) a camera
    policy with `cfg`'s encoder settings."""
    common = dict(
        obs_dim=obs_dim,
        action_dim=action_dim,
        horizon=cfg.horizon,
        execute=cfg.execute,
        hidden=list(cfg.hidden),
        obs_norm=cfg.obs_norm,
        action_norm=cfg.action_norm,
    )
    if cameras:
        common.update(cameras=cameras, encoder={
            "encoder": "conv", "feature_dim": cfg.encoder_feature_dim, "channels": cfg.encoder_channels,
            "layers": cfg.encoder_layers, "shift_pad": cfg.image_shift})
    if cfg.policy == "mlp":
        return MLPPolicy(**common, gaussian=cfg.gaussian)
    if cfg.policy == "diffusion":
        return DiffusionPolicy(
            **common,
            num_train_steps=cfg.num_train_steps,
            num_inference_steps=cfg.num_inference_steps,
            beta_schedule=cfg.beta_schedule,
            eta=cfg.eta,
        )
    return FlowPolicy(**common, num_inference_steps=cfg.num_inference_steps, shortcut=cfg.shortcut)


def default_run_dir(cfg: BCConfig) -> Path:
    return Path("runs") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_bc-{cfg.policy}"


def train_bc(cfg: BCConfig, message: Callable[[str], None] = print) -> dict:
    """Train, save and (optionally) evaluate a BC policy.

    Returns a summary: `run_dir`, `policy_dir`, `first_loss` / `final_loss` (mean loss of the first / last
    `log_every` steps), `loss_curve` [(step, mean loss)], `train_time_s`, and `eval` (`evaluate_policy`'s
    result, or None without `env.spec`).
    """
    from robot_rl.datasets import read_dataset

    cfg.validate()
    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg)
    policy_dir = run_dir / "policy"
    if (policy_dir / CONFIG).exists():
        raise BCError(f"{run_dir} already holds a trained policy; pick another run_dir")
    groups = dataset_cameras(cfg.dataset, cfg.cameras)
    data = read_dataset(cfg.dataset, load_images=bool(groups))
    if len(data) == 0:
        raise BCError(f"{cfg.dataset}: the dataset has no frames")
    t = data.transitions
    frames = {group: t.obs[group].to(cfg.device) for group in groups}
    cameras = {group: list(f.shape[1:]) for group, f in frames.items()}
    if cfg.env.spec:  # fail before training, not after it
        check_env(cfg.env.spec, t.obs["state"].shape[1], t.action.shape[1], cameras)
    obs, chunks = chunk_pairs(t.obs["state"], t.action, data.episodes.length, cfg.horizon)
    obs, chunks = obs.to(cfg.device), chunks.to(cfg.device)

    threads, notice = choose_threads(cfg.threads)
    torch.set_num_threads(threads)
    if notice and not getattr(cfg, "quiet", False):  # stdout, with the run's header: stderr is for errors
        print(notice, flush=True)
    torch.manual_seed(cfg.seed)
    policy = make_policy(cfg, obs.shape[1], chunks.shape[2], cameras).to(cfg.device)
    policy.fit_normalization(obs, t.action.to(cfg.device))
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "bc_config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
    say = (lambda s: None) if cfg.quiet else message
    say(
        f"bc: {cfg.policy} policy on {cfg.dataset} ({len(data.episodes)} episodes, {len(data)} frames, "
        f"obs {obs.shape[1]}, action {chunks.shape[2]}, chunks of {cfg.horizon}"
        + "".join(f", {g} {'x'.join(map(str, shape[:2]))}" for g, shape in cameras.items()) + f") -> {run_dir}"
    )

    curve: list[tuple[int, float]] = []
    policy.train()
    t0 = time.monotonic()
    window = torch.zeros((), device=cfg.device)
    # metrics.csv and TensorBoard as every run writes them (robot_rl.logger), keyed by gradient step
    metrics = MetricsLogger(run_dir, columns=["step", "loss", "wall_time_s"], step_key="step")
    try:
        for step in range(1, cfg.steps + 1):
            idx = torch.randint(0, obs.shape[0], (cfg.batch_size,), device=cfg.device)
            batch = {"state": obs[idx], **{g: f[idx] for g, f in frames.items()}} if frames else obs[idx]
            loss = policy.loss(batch, chunks[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            window += loss.detach()
            if step % cfg.log_every == 0 or step == cfg.steps:
                mean_loss = float(window) / (step - (curve[-1][0] if curve else 0))
                window.zero_()
                curve.append((step, mean_loss))
                elapsed = time.monotonic() - t0
                metrics.log({"step": step, "loss": mean_loss, "wall_time_s": round(elapsed, 2)})
                say(
                    f"[bc] step {step}/{cfg.steps} | loss {mean_loss:.4f} | {step / elapsed:.0f} steps/s "
                    f"| {elapsed:.0f}s"
                )
    finally:
        metrics.close()
    policy.eval()
    train_time = time.monotonic() - t0
    plot_loss_curve(run_dir / "metrics.csv", run_dir / "learning_curve.png", f"bc {cfg.policy} on {cfg.dataset}")
    metadata = {
        "trained_by": "robot-rl bc",
        "dataset": str(cfg.dataset),
        "tasks": sorted(set(data.episodes.task)),
        "steps": cfg.steps,
        "final_loss": curve[-1][1],
    }
    save_policy(policy, policy_dir, metadata=metadata)
    summary = {
        "run_dir": str(run_dir),
        "policy_dir": str(policy_dir),
        "first_loss": curve[0][1],
        "final_loss": curve[-1][1],
        "loss_curve": curve,
        "train_time_s": train_time,
        "eval": None,
    }
    if cfg.env.spec:
        summary["eval"] = evaluate_policy(
            policy,
            cfg.env.spec,
            cfg.eval_episodes,
            seed=cfg.seed,
            deterministic=cfg.eval_deterministic,
            max_episode_steps=cfg.eval_max_episode_steps,
        )
    return summary


@torch.no_grad()
def evaluate_policy(
    policy: ChunkPolicy,
    spec: str,
    num_envs: int,
    seed: int = 0,
    deterministic: bool = True,
    max_episode_steps: int | None = None,
    episodes: int | None = None,
    message: Callable[[str], None] | None = None,
    delay: Any = None,
) -> dict[str, float | None]:
    """`episodes` episodes (default: one in each env) in `num_envs` envs of `spec`, in rounds if there are more
    episodes than envs: mean return, mean length and success rate (None where the task defines no success). The
    policy's action queue is reset for every env that finishes. A camera policy (`cameras`: an exported pixel SAC
    agent) gets the env's camera observations at its own image size; `delay` (`robot_rl.envs.delay.ActionDelay`):
    the observation-to-action delay a policy was trained under (its metadata's `delay`)."""
    from robot_rl import envs
    from robot_rl.evaluation import evaluate

    cameras = getattr(policy, "cameras", None) or {}
    sizes = sorted({tuple(shape[:2]) for shape in cameras.values()})
    if len(sizes) > 1:
        raise BCError(f"the policy's cameras have different image sizes {sizes}; an env renders one pixel_size")
    env = envs.make(spec, num_envs=num_envs, seed=seed, max_episode_steps=max_episode_steps,
                    pixel_size=sizes[0] if sizes else None, delay=delay)
    try:
        check_env_dims(env, spec, policy.obs_dim, policy.action_dim, cameras)
        policy.reset()
        result = evaluate(
            lambda obs: policy.act(obs, deterministic=deterministic).to(env.device),
            env,
            seed=seed,
            on_done=policy.reset,
            episodes=episodes,
            message=message,
        )
    finally:
        env.close()
        policy.reset()
    return {
        "return_mean": result["eval_return_mean"],
        "length_mean": result["eval_length_mean"],
        "success_rate": result["success_rate"],
    }


def dataset_cameras(dataset: str, names: list[str] | None) -> list[str]:
    """The camera groups (`pixels/<camera>`) to learn from: `names`, or every camera video the dataset has when
    `names` is None; a name the dataset has no video for is a BCError listing the ones it has."""
    from robot_rl.datasets.format import IMAGE_PREFIX, camera_group, load_info

    try:
        features = load_info(Path(dataset))["features"]
    except (OSError, ValueError, KeyError):
        return []  # read_dataset names what is wrong with the directory
    have = sorted(k[len(IMAGE_PREFIX):] for k, v in features.items()
                  if k.startswith(IMAGE_PREFIX) and v.get("dtype") == "video")
    wanted = have if names is None else list(names)
    missing = [n for n in wanted if n not in have]
    if missing:
        raise BCError(f"cameras: {dataset} has no {missing[0]!r} video (its cameras: {', '.join(have) or 'none'})")
    return [camera_group(n) for n in wanted]


def check_env(spec: str, obs_dim: int, action_dim: int, cameras: dict[str, list[int]] | None = None) -> None:
    """Raise (UnknownEnvError or BCError) unless `spec` makes envs with these state and action sizes (and, for a
    camera policy, these camera groups at their image size)."""
    from robot_rl import envs

    sizes = sorted({tuple(shape[:2]) for shape in (cameras or {}).values()})
    if len(sizes) > 1:
        raise BCError(f"the dataset's cameras have different image sizes {sizes}; an env renders one pixel_size")
    env = envs.make(spec, num_envs=1, pixel_size=sizes[0] if sizes else None)
    try:
        check_env_dims(env, spec, obs_dim, action_dim, cameras)
    finally:
        env.close()


def check_env_dims(env, spec: str, obs_dim: int, action_dim: int, cameras: dict | None = None) -> None:
    """Raise BCError unless `env` (made from `spec`) has these state and action sizes and these camera groups."""
    if "state" not in env.observation_spec:
        raise BCError(f"{spec} has no state observations; BC policies take the state group")
    for group, shape in (cameras or {}).items():
        got = env.observation_spec.get(group)
        if got is None or list(got[0]) != list(shape):
            has = f"has {group!r} of {list(got[0])}" if got is not None else f"has no camera group {group!r}"
            raise BCError(f"{spec} {has}; the policy reads {group!r} as uint8 {list(shape)} (a camera policy: "
                          "evaluate it on a -pixels env spec)")
    (env_obs_dim,) = env.observation_spec["state"][0]
    if (env_obs_dim, env.action_dim) != (obs_dim, action_dim):
        raise BCError(
            f"{spec} has observations of {env_obs_dim} and actions of {env.action_dim}, the policy expects "
            f"{obs_dim} and {action_dim}; use the env it was trained on (where its dataset was recorded)"
        )
