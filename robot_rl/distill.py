"""`robot-rl distill`: a multi-step generative policy (flow or diffusion) distilled into a one-step flow policy.

Why: a flow policy integrates K Euler steps and a diffusion policy runs K DDIM steps per chunk, K network calls on
the robot computer each time it plans; RL-100 distils its diffusion policy into a one-step policy for ~10x lower
latency. Both teachers are deterministic given their latent noise (flow always, diffusion with eta = 0), so the
teacher is a map (observation, noise) -> chunk, and the student learns that map in one network call:

    student:  x_1 = x_0 + v_phi(obs, x_0, t=0, d=1)          (a `FlowPolicy` sampled with 1 Euler step)
    target:   teacher_K(obs, x_0)                              (the teacher's full chain from the same x_0)
    loss:     || x_1 - target ||^2   in the normalised action space

Keeping the noise-to-chunk pairing is what keeps a multi-modal teacher multi-modal: a student regressing the
teacher's chunks without its noise would learn their average (the one-step collapse the flow module's docstring
describes). A share of every batch (`zero_noise_fraction`) uses x_0 = 0, the noise of deterministic deployment.

Steps in `distill`: load the teacher; read the dataset's observations (the states the student is trained on; the
teacher's demos are the natural choice); compute the teacher's conditioning once (its normalised state, or for a
camera policy its state fused with its frozen camera features: the student copies the teacher's encoder and
normalisers, so both see the same inputs); train the student's network, initialised from the teacher's where
names and shapes match (a flow teacher's velocity network is a good start; a diffusion teacher's is not); optionally (`dagger_episodes`, after half the steps) add the observations of the
student's own episodes, which the teacher labels like the rest (DAgger: the states where a student that drifts
from the demos would otherwise extrapolate); save it as any other policy (it
exports to ONNX like one); measure both policies' latency per chunk at batch 1 and, with `env.spec`, their success
on the same evaluation episodes.
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

from robot_rl.bc import BCEnvArgs, check_env, dataset_cameras, evaluate_policy
from robot_rl.device import choose_threads
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help
from robot_rl.logger import MetricsLogger
from robot_rl.plots import plot_loss_curve
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import CONFIG, load_policy, read_metadata, save_policy


class DistillError(UserError, ValueError):
    """A user mistake in a distillation run; one line naming it."""


@dataclass
class DistillConfig:
    """Settings of `robot-rl distill` (every field is a `key=value` on the command line)."""

    teacher: str = _help("", "saved flow or diffusion policy to distil (a bc/finetune run's policy/ directory)")
    dataset: str = _help("", "dataset whose observations the student learns on (the teacher's demos, robot-rl collect)")
    run_dir: str = _help("", "output directory (default: runs/<date>_distill)")
    steps: int = _help(10000, "gradient steps (push-sparse: 3,000 left a 4.8-point gap to the teacher, 10,000 1.8)")
    batch_size: int = _help(256, "(observation, noise) pairs per step")
    lr: float = _help(3e-4, "Adam learning rate")
    teacher_steps: int | None = _help(None, "the teacher's sampling steps (Euler or DDIM); null: its own setting")
    zero_noise_fraction: float = _help(0.125, "share of each batch with zero noise (what deterministic deploy uses)")
    dagger_episodes: int = _help(0, "after half the steps, the student's own episodes on env.spec (one per env) whose "
                                 "observations the teacher labels too (DAgger: where the student drifts); 0: off")
    warm_start: bool = _help(True, "a flow teacher's velocity network initialises the student's (a diffusion teacher's "
                                   "noise-prediction network is a worse start than none, measured)")
    seed: int = _help(0, "seed of the initialisation, minibatches, noise and eval envs")
    device: str = _help("cpu", "torch device to train on")
    threads: int | None = _help(None, "torch CPU threads (default: torch's, or the free cores)")
    log_every: int = _help(200, "steps between progress lines and metrics.csv rows")
    env: BCEnvArgs = field(default_factory=lambda: BCEnvArgs())
    eval_episodes: int = _help(50, "evaluation episodes of teacher and student each (one per env, in parallel)")
    eval_max_episode_steps: int | None = _help(None, "time limit of evaluation episodes (default: the task's)")
    latency_repeats: int = _help(200, "chunks timed per policy at batch 1 (0: no latency measure)")
    quiet: bool = _help(False, "no progress lines")

    def validate(self) -> None:
        """Raise DistillError naming the first bad field."""
        checks = [
            (bool(self.teacher), "distill needs teacher=<policy dir> (a flow or diffusion policy, e.g. from robot-rl bc)"),
            (bool(self.dataset), "distill needs dataset=<dataset dir> (the observations to learn on)"),
            (self.steps >= 1 and self.batch_size >= 1, "steps and batch_size must be >= 1"),
            (self.lr > 0, "lr must be > 0"),
            (self.teacher_steps is None or self.teacher_steps >= 1, "teacher_steps must be >= 1 or null"),
            (0.0 <= self.zero_noise_fraction < 1.0, "zero_noise_fraction must be in [0, 1)"),
            (self.log_every >= 1, "log_every must be >= 1"),
            (self.threads is None or self.threads >= 1, "threads must be >= 1 or null"),
            (self.eval_episodes >= 1, "eval_episodes must be >= 1"),
            (self.latency_repeats >= 0, "latency_repeats must be >= 0"),
            (self.dagger_episodes >= 0, "dagger_episodes must be >= 0"),
            (not self.dagger_episodes or bool(self.env.spec),
             "dagger_episodes needs env.spec=<the teacher's env> to run the student in"),
        ]
        for ok, message in checks:
            if not ok:
                raise DistillError(message)


def load_teacher(path: str, device: str = "cpu") -> FlowPolicy | DiffusionPolicy:
    """The saved policy at `path`, which must be a multi-step generative chunk policy."""
    if not Path(path).is_dir():
        raise DistillError(f"teacher {path} does not exist (train one with robot-rl bc policy=flow|diffusion)")
    teacher = load_policy(path, device)
    if not isinstance(teacher, (FlowPolicy, DiffusionPolicy)):
        raise DistillError(
            f"teacher {path} is a {type(teacher).__name__}, which acts in one network call already; "
            "distill takes a flow or diffusion policy"
        )
    return teacher


def make_student(teacher: FlowPolicy | DiffusionPolicy, warm_start: bool = True) -> FlowPolicy:
    """A one-step `FlowPolicy` with the teacher's sizes, chunking, normalisers and camera encoder (copied; the
    student conditions on exactly what the teacher does); its network initialised from a flow teacher's
    (`warm_start`), otherwise fresh. A diffusion teacher's network predicts noise, not velocity: starting from it,
    the student was 8x further from the teacher after 400 steps than starting fresh (reach demos, 8 DDIM steps)."""
    kwargs = {k: v for k, v in teacher.config().items()
              if k in ("obs_dim", "action_dim", "horizon", "execute", "hidden", "time_dim", "obs_norm",
                       "action_norm", "clip_sample", "cameras", "encoder")}
    warm = warm_start and isinstance(teacher, FlowPolicy)
    shortcut = bool(getattr(teacher, "shortcut", False)) and warm
    student = FlowPolicy(**kwargs, num_inference_steps=1, shortcut=shortcut).to(teacher.obs_norm.shift.device)
    own = student.state_dict()
    copied = {k: v for k, v in teacher.state_dict().items()
              if k in own and own[k].shape == v.shape
              and (warm or not k.startswith("net."))}
    student.load_state_dict(copied, strict=False)
    if student.encoder is not None:  # conditioning is the teacher's, computed once: the encoder stays frozen
        student.encoder.requires_grad_(False)
    return student


@torch.no_grad()
def conditioning(policy: ChunkPolicy, obs: Tensor, frames: dict[str, Tensor], batch: int = 1024) -> Tensor:
    """`policy.condition` of every frame [M, cond_dim], without augmentation, in batches (camera frames are big)."""
    out = []
    for i in range(0, obs.shape[0], batch):
        part = {"state": obs[i:i + batch], **{g: f[i:i + batch] for g, f in frames.items()}} if frames else obs[i:i + batch]
        out.append(policy.condition(part, augment=False))
    return torch.cat(out)


def one_step(student: FlowPolicy, cond: Tensor, noise: Tensor) -> Tensor:
    """The student's chunk from `noise` in one Euler step of size 1, before clipping (normalised space)."""
    return noise + student.velocity(cond, noise, 0.0, step=1.0)


def distill_loss(student: FlowPolicy, teacher: ChunkPolicy, cond: Tensor, noise: Tensor,
                 teacher_steps: int | None) -> Tensor:
    """Mean squared distance between the student's one-step chunk and the teacher's full chain from the same noise."""
    with torch.no_grad():
        target = teacher._sample(cond, noise, True, teacher_steps)
    return torch.nn.functional.mse_loss(one_step(student, cond, noise), target)


@torch.no_grad()
def chunk_latency_ms(policy: ChunkPolicy, obs: dict[str, Tensor] | Tensor, repeats: int) -> dict[str, float]:
    """Wall time of `predict_chunk` on one observation (batch 1), in ms: median and p99 over `repeats` calls after
    10 warm-up calls. What a robot computer pays each time the policy plans."""
    for _ in range(10):
        policy.predict_chunk(obs, deterministic=True)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        policy.predict_chunk(obs, deterministic=True)
        times.append((time.perf_counter() - t0) * 1e3)
    ordered = torch.tensor(times)
    return {"median_ms": float(ordered.median()), "p99_ms": float(ordered.quantile(0.99))}


@torch.no_grad()
def student_observations(student: FlowPolicy, spec: str, episodes: int, seed: int,
                         max_episode_steps: int | None = None) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
    """The states (and camera frames) of `episodes` deterministic episodes of `student` on `spec`, one per env: the
    observations a student that drifts from its teacher's demos meets, for the teacher to label (DAgger)."""
    from robot_rl import envs
    from robot_rl.evaluation import evaluate

    sizes = sorted({tuple(shape[:2]) for shape in student.cameras.values()})
    env = envs.make(spec, num_envs=episodes, seed=seed, max_episode_steps=max_episode_steps,
                    pixel_size=sizes[0] if sizes else None)
    seen: list[dict[str, Tensor]] = []

    def act(obs: dict[str, Tensor]) -> Tensor:
        seen.append({g: obs[g].cpu() for g in ("state", *student.cameras)})
        return student.act(obs, deterministic=True).to(env.device)

    try:
        student.reset()
        result = evaluate(act, env, seed=seed, on_done=student.reset)
    finally:
        env.close()
        student.reset()
    states = torch.cat([o["state"] for o in seen]).float()
    frames = {g: torch.cat([o[g] for o in seen]) for g in student.cameras}
    return states, frames, result


def default_run_dir() -> Path:
    return Path("runs") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_distill"


def distill(cfg: DistillConfig, message: Callable[[str], None] = print) -> dict[str, Any]:
    """Train, save, time and (optionally) evaluate a one-step student of `cfg.teacher`.

    Returns a summary (also written to `<run_dir>/distill_summary.json`): `policy_dir`, `first_loss` /
    `final_loss`, `train_time_s`, `teacher_steps`, `latency` (teacher's and student's per-chunk ms at batch 1, and
    the ratio), `eval` ({"teacher": ..., "student": ...} of `evaluate_policy`, or None without `env.spec`).
    """
    from robot_rl.datasets import read_dataset

    cfg.validate()
    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir()
    policy_dir = run_dir / "policy"
    if (policy_dir / CONFIG).exists():
        raise DistillError(f"{run_dir} already holds a trained policy; pick another run_dir")
    if not Path(cfg.dataset).is_dir():
        raise DistillError(f"dataset {cfg.dataset} does not exist (record one with robot-rl collect)")
    teacher = load_teacher(cfg.teacher, cfg.device)
    groups = sorted(teacher.cameras)
    if groups:  # the teacher's cameras must be in the dataset, under the same names
        dataset_cameras(cfg.dataset, [g.split("/", 1)[-1] for g in groups])
    data = read_dataset(cfg.dataset, load_images=bool(groups))
    if len(data) == 0:
        raise DistillError(f"{cfg.dataset}: the dataset has no frames")
    obs = data.transitions.obs["state"]
    if obs.shape[1] != teacher.obs_dim:
        raise DistillError(f"{cfg.dataset} has observations of {obs.shape[1]}, the teacher takes {teacher.obs_dim}; "
                           "use the dataset it was trained on")
    frames = {g: data.transitions.obs[g] for g in groups}
    if cfg.env.spec:  # fail before training, not after it
        check_env(cfg.env.spec, teacher.obs_dim, teacher.action_dim, teacher.cameras)

    threads, notice = choose_threads(cfg.threads)
    torch.set_num_threads(threads)
    say = (lambda s: None) if cfg.quiet else message
    if notice and not cfg.quiet:
        print(notice, flush=True)
    torch.manual_seed(cfg.seed)
    k = cfg.teacher_steps or teacher.num_inference_steps
    student = make_student(teacher, cfg.warm_start)
    cond = conditioning(teacher, obs.to(cfg.device), {g: f.to(cfg.device) for g, f in frames.items()})
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    zero_rows = round(cfg.batch_size * cfg.zero_noise_fraction)
    demo_rows = cond.shape[0]

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "distill_config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
    say(f"distill: {type(teacher).__name__} ({k} steps) from {cfg.teacher} -> one-step flow student, on "
        f"{len(data)} observations of {cfg.dataset} -> {run_dir}")
    curve: list[tuple[int, float]] = []
    window = torch.zeros((), device=cfg.device)
    metrics = MetricsLogger(run_dir, columns=["step", "loss", "wall_time_s"], step_key="step")
    t0 = time.monotonic()
    student.train()
    try:
        for step in range(1, cfg.steps + 1):
            if cfg.dagger_episodes and step == cfg.steps // 2 + 1:
                student.eval()
                states, seen_frames, seen = student_observations(
                    student, cfg.env.spec, cfg.dagger_episodes, cfg.seed + 10_000, cfg.eval_max_episode_steps)
                student.train()
                cond = torch.cat([cond, conditioning(teacher, states.to(cfg.device),
                                                     {g: f.to(cfg.device) for g, f in seen_frames.items()})])
                say(f"[distill] step {step}: {states.shape[0]:,} observations of the student's own "
                    f"{cfg.dagger_episodes} episodes (success {seen['success_rate'] or 0:.0%}) labelled by the teacher")
            idx = torch.randint(0, cond.shape[0], (cfg.batch_size,), device=cfg.device)
            noise = torch.randn(cfg.batch_size, *teacher.noise_shape, device=cfg.device)
            noise[:zero_rows] = 0.0
            loss = distill_loss(student, teacher, cond[idx], noise, k)
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
                say(f"[distill] step {step}/{cfg.steps} | loss {mean_loss:.5f} | {step / elapsed:.0f} steps/s "
                    f"| {elapsed:.0f}s")
    finally:
        metrics.close()
    student.eval()
    train_time = time.monotonic() - t0
    plot_loss_curve(run_dir / "metrics.csv", run_dir / "learning_curve.png", f"distill {cfg.teacher}")
    metadata = {
        # the teacher's tasks, dataset and trained delay hold for the student; its training counts do not
        **{k: v for k, v in read_metadata(cfg.teacher).items() if k not in ("steps", "final_loss", "trained_by")},
        "trained_by": "robot-rl distill",
        "teacher": str(cfg.teacher),
        "teacher_class": type(teacher).__name__,
        "teacher_steps": k,
        "distill_dataset": str(cfg.dataset),
        "distill_steps": cfg.steps,
        "final_loss": curve[-1][1],
    }
    save_policy(student, policy_dir, metadata=metadata)

    summary: dict[str, Any] = {
        "run_dir": str(run_dir), "policy_dir": str(policy_dir), "first_loss": curve[0][1],
        "final_loss": curve[-1][1], "loss_curve": curve, "train_time_s": train_time, "teacher_steps": k,
        "threads": torch.get_num_threads(), "latency": None, "eval": None,
        "observations": {"dataset": demo_rows, "student_episodes": cond.shape[0] - demo_rows},
    }
    if cfg.latency_repeats:
        one = {"state": obs[:1].to(cfg.device), **{g: f[:1].to(cfg.device) for g, f in frames.items()}}
        old_k = teacher.num_inference_steps
        teacher.num_inference_steps = k
        try:
            lt, ls = (chunk_latency_ms(p, one, cfg.latency_repeats) for p in (teacher, student))
        finally:
            teacher.num_inference_steps = old_k
        summary["latency"] = {"teacher": lt, "student": ls, "speedup_median": lt["median_ms"] / ls["median_ms"]}
        say(f"latency per chunk at batch 1: teacher {lt['median_ms']:.2f} ms (p99 {lt['p99_ms']:.2f}), student "
            f"{ls['median_ms']:.2f} ms (p99 {ls['p99_ms']:.2f}), {summary['latency']['speedup_median']:.1f}x")
    if cfg.env.spec:
        teacher.num_inference_steps = k
        summary["eval"] = {
            name: evaluate_policy(p, cfg.env.spec, cfg.eval_episodes, seed=cfg.seed, deterministic=True,
                                  max_episode_steps=cfg.eval_max_episode_steps)
            for name, p in (("teacher", teacher), ("student", student))
        }
    (run_dir / "distill_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
