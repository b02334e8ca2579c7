"""The training loop: collect from N envs, update, evaluate on separate envs, log, checkpoint, resume.

With prior data (`data.path`) the same loop runs RLPD (prior and online data in every batch), and with
`offline.steps` it first pretrains offline (Cal-QL, CQL or IQL), then warms up by rolling out the pretrained
policy for `train.learning_starts` steps without updates, then fine-tunes online: WSRL (see `robot_rl.offline`).

A run directory holds everything needed to continue: `config.yaml`, `checkpoints/latest.pt` (weights,
optimisers, replay, RNG states, counters), `checkpoints/best.pt` (weights of the best evaluation),
`checkpoints/pretrained.pt` (after offline pretraining), `metrics.csv` (`offline_metrics.csv`),
`tensorboard/`, `learning_curve.png` and `videos/`.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from robot_rl import checkpoint, envs
from robot_rl.agents.sac import SAC
from robot_rl.config import TrainConfig
from robot_rl.evaluation import evaluate, record_video
from robot_rl.logger import MetricsLogger, Progress
from robot_rl.offline import OfflineData, pretrain
from robot_rl.plots import plot_learning_curve
from robot_rl.replay import Batch, ReplayBuffer

CHECKPOINT_FORMAT = 1
EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share initial states with training episodes


def make_env(cfg: TrainConfig, num_envs: int, **options) -> envs.BatchedEnv:
    return envs.make(
        cfg.env.spec,
        num_envs=num_envs,
        device=cfg.device,  # GPU backends (mjx:, warp:, isaaclab:) then simulate where the learner is
        action_repeat=cfg.env.action_repeat,
        max_episode_steps=cfg.env.max_episode_steps,
        **options,
    )


def build_agent(cfg: TrainConfig, env: envs.BatchedEnv) -> SAC:
    (obs_dim,) = env.observation_spec["state"][0]
    return SAC(obs_dim, env.action_dim, cfg.agent, device=cfg.device)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Trainer:
    """Owns the envs, agent, replay and run directory of one training run."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, resume: bool = False) -> None:
        cfg.validate()
        self.cfg, self.run_dir = cfg, Path(run_dir)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        self.env = make_env(cfg, cfg.env.num_envs)
        self.eval_env = make_env(cfg, cfg.env.num_eval_envs) if cfg.env.num_eval_envs > 0 else None
        if "state" not in self.env.observation_spec:
            raise ValueError(f"{cfg.env.spec} has no 'state' observation group; SAC needs state observations")
        self.agent = build_agent(cfg, self.env)
        self.replay = ReplayBuffer(
            cfg.train.replay_capacity,
            cfg.env.num_envs,
            self.env.observation_spec,
            self.env.action_dim,
            device=cfg.device,
            gamma=cfg.agent.gamma,
            n_step=cfg.agent.n_step,
        )
        self.prior: OfflineData | None = None
        self.prior_replay: ReplayBuffer | None = None
        if cfg.data.path:
            self.prior = OfflineData.load(cfg.data.path, cfg.agent.gamma, cfg.data.max_episodes, cfg.device)
            self.prior.check_fits(self.agent.obs_dim, self.agent.action_dim, f"dataset {cfg.data.path}")
            self.agent.observe_dataset(self.prior.obs, self.prior.mc_return)
            if cfg.data.mix_online:
                self.prior_replay = self.prior.to_replay(cfg.agent.gamma, cfg.agent.n_step, cfg.device)
        # A pretrained agent explores with its own policy before learning starts (WSRL warm-up), not uniformly.
        self.pretrained = cfg.offline.steps > 0 or cfg.offline.init is not None
        self.offline_updates = 0
        self.env_steps = 0
        self.updates = 0
        self.evals = 0
        self.best_return = -float("inf")
        self.wall_offset_s = 0.0
        self.eval_time_s = 0.0  # of the wall time, spent evaluating (training time = wall time - this)
        self._t0: float | None = None  # set when run() starts
        self.last_eval_return: float | None = None

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = self.run_dir / "checkpoints"
        if resume:
            self._restore(checkpoint.load(self.ckpt_dir / "latest.pt"))
        elif cfg.offline.init:
            self._load_init_agent(Path(cfg.offline.init))
        OmegaConf.save(OmegaConf.structured(cfg), self.run_dir / "config.yaml")
        self.logger = MetricsLogger(self.run_dir, resume_step=self.env_steps if resume else None)
        self.progress = Progress(cfg.train.steps, quiet=cfg.quiet)

    # -- checkpoints ----------------------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT,
            "config": asdict(self.cfg),
            "env_steps": self.env_steps,
            "offline_updates": self.offline_updates,
            "updates": self.updates,
            "evals": self.evals,
            "best_return": self.best_return,
            "last_eval_return": self.last_eval_return,
            "wall_time_s": self._wall_time(),
            "eval_time_s": self.eval_time_s,
            "agent": self.agent.state_dict(),
            "replay": self.replay.state_dict(),
            "rng": _rng_state(),
        }

    def save_checkpoint(self) -> None:
        checkpoint.atomic_save(self._checkpoint_state(), self.ckpt_dir / "latest.pt")

    def _save_best(self) -> None:
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": asdict(self.cfg),
            "env_steps": self.env_steps,
            "eval_return": self.best_return,
            "agent": self.agent.state_dict(),
        }
        checkpoint.atomic_save(state, self.ckpt_dir / "best.pt")

    def _restore(self, state: dict) -> None:
        if state.get("format") != CHECKPOINT_FORMAT:
            raise checkpoint.CheckpointError(f"checkpoint format {state.get('format')} is not supported")
        try:
            self.agent.load_state_dict(state["agent"])
            self.replay.load_state_dict(state["replay"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise checkpoint.CheckpointError(
                f"checkpoint does not fit this configuration ({e}); resume with the run's own config.yaml"
            ) from e
        self.env_steps, self.updates, self.evals = state["env_steps"], state["updates"], state["evals"]
        self.offline_updates = state.get("offline_updates", 0)
        self.best_return, self.last_eval_return = state["best_return"], state["last_eval_return"]
        self.wall_offset_s = state["wall_time_s"]
        self.eval_time_s = state.get("eval_time_s", 0.0)
        _set_rng_state(state["rng"])

    def _load_init_agent(self, path: Path) -> None:
        state = checkpoint.load(path)
        try:
            self.agent.load_state_dict(state["agent"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise checkpoint.CheckpointError(
                f"offline.init={path}: its agent does not fit this configuration ({e}); use the same env and "
                "agent settings as the run that wrote it"
            ) from e

    def _pretrain(self) -> None:
        assert self.prior is not None

        def save(step: int) -> None:
            self.offline_updates = step
            self.save_checkpoint()
            if step == self.cfg.offline.steps:
                checkpoint.atomic_save(
                    {"format": CHECKPOINT_FORMAT, "config": asdict(self.cfg), "agent": self.agent.state_dict()},
                    self.ckpt_dir / "pretrained.pt",
                )

        pretrain(
            self.cfg, self.agent, self.prior, self.offline_updates, self._eval_policy, self.run_dir, save,
            self.progress.message,
        )

    def _sample(self, batch_size: int, utd: int):
        """`utd` minibatches of `batch_size`; with RLPD each mixes prior and online data in a fixed ratio."""
        if self.prior_replay is None:
            return self.replay.sample(batch_size * utd).reshape(utd, batch_size)
        n_prior = max(1, round(batch_size * self.cfg.data.prior_fraction))
        n_online = batch_size - n_prior
        prior = self.prior_replay.sample(n_prior * utd).reshape(utd, n_prior)
        online = self.replay.sample(n_online * utd).reshape(utd, n_online)
        return Batch.cat([prior, online], dim=1)

    # -- the loop -------------------------------------------------------------------------------------------
    def _wall_time(self) -> float:
        return self.wall_offset_s + (time.monotonic() - self._t0 if self._t0 is not None else 0.0)

    def run(self) -> dict:
        cfg, env, agent = self.cfg, self.env, self.agent
        n = env.num_envs
        batch_size, utd = cfg.agent.batch_size, cfg.agent.utd
        updates_per_step = n if cfg.train.updates_per_step is None else cfg.train.updates_per_step
        checkpoint_every = cfg.train.checkpoint_every or cfg.train.eval_every
        next_eval = (self.env_steps // cfg.train.eval_every + 1) * cfg.train.eval_every
        next_ckpt = (self.env_steps // checkpoint_every + 1) * checkpoint_every
        resumed = self.env_steps > 0

        self._t0 = time.monotonic()
        rate_t, rate_steps = self._t0, self.env_steps
        steps_per_s = 0.0
        # A resumed run starts fresh episodes (simulator state is not checkpointed), seeded apart from the first.
        obs = env.reset(seed=cfg.seed + self.env_steps)
        metric_sums: dict[str, torch.Tensor] = {}
        metric_count = 0
        episode_return_sum = torch.zeros((), device=env.device)
        episode_count = torch.zeros((), device=env.device)
        if resumed:
            self.progress.message(f"resumed {self.run_dir} at step {self.env_steps:,}")
        try:
            if self.offline_updates < cfg.offline.steps:
                self._pretrain()
            if self.pretrained and self.env_steps == 0 and self.evals == 0:
                self._evaluate_and_log({}, 0, None, 0.0)  # the starting point: the pretrained policy
            while self.env_steps < cfg.train.steps:
                if self.env_steps < cfg.train.learning_starts and not self.pretrained:
                    action = torch.rand(n, env.action_dim, device=env.device) * 2 - 1
                else:
                    action = agent.act(obs).to(env.device)
                next_obs, reward, terminated, truncated, info = env.step(action)
                self.replay.add(obs, action, reward, info["final_obs"], terminated, truncated)
                done = terminated | truncated
                agent.observe(obs, reward, done)
                obs = next_obs
                self.env_steps += n
                episode_return_sum += (info["episode_return"] * done).sum()
                episode_count += done.sum()

                if self.env_steps >= cfg.train.learning_starts and len(self.replay) >= batch_size:
                    for _ in range(updates_per_step):
                        metrics = agent.update(self._sample(batch_size, utd))
                        for k, v in metrics.items():
                            metric_sums[k] = metric_sums[k] + v if k in metric_sums else v.clone()
                        metric_count += 1
                        self.updates += 1

                now = time.monotonic()
                if now - rate_t >= 1.0:
                    steps_per_s = (self.env_steps - rate_steps) / (now - rate_t)
                    rate_t, rate_steps = now, self.env_steps
                self.progress.update(self.env_steps, steps_per_s, self.last_eval_return)

                if self.env_steps >= next_eval or self.env_steps >= cfg.train.steps:
                    next_eval += cfg.train.eval_every
                    train_return = (episode_return_sum / episode_count).item() if episode_count > 0 else None
                    self._evaluate_and_log(metric_sums, metric_count, train_return, steps_per_s)
                    metric_sums, metric_count = {}, 0
                    episode_return_sum.zero_()
                    episode_count.zero_()
                if self.env_steps >= next_ckpt or self.env_steps >= cfg.train.steps:
                    next_ckpt += checkpoint_every
                    self.save_checkpoint()
        except KeyboardInterrupt:
            self.progress.close()
            self.save_checkpoint()
            print(f"interrupted at step {self.env_steps:,}; checkpoint saved. Continue with:\n"
                  f"  robot-rl train resume={self.run_dir}", flush=True)
            raise
        finally:
            self.logger.close()
        self.progress.close()
        if cfg.train.video:
            self._record_final_video()
        return {
            "run_dir": str(self.run_dir),
            "env_steps": self.env_steps,
            "last_eval_return": self.last_eval_return,
            "best_eval_return": self.best_return,
            "wall_time_s": self._wall_time(),
        }

    def _evaluate_and_log(
        self, metric_sums: dict[str, torch.Tensor], metric_count: int, train_return: float | None, rate: float
    ) -> None:
        cfg = self.cfg
        t0 = time.monotonic()
        result = self._eval_policy(train_return)
        self.eval_time_s += time.monotonic() - t0
        self.evals += 1
        self.last_eval_return = result["eval_return_mean"]
        row: dict[str, float | None] = {
            "env_step": self.env_steps,
            "wall_time_s": round(self._wall_time(), 2),
            "eval_time_s": round(self.eval_time_s, 2),
            **result,
            "train_return_mean": train_return,
            "updates": self.updates,
            "env_steps_per_s": round(rate, 2),
        }
        for k, v in metric_sums.items():
            row[k] = (v / metric_count).item()
        self.logger.log(row)
        if result["eval_return_mean"] > self.best_return:
            self.best_return = result["eval_return_mean"]
            self._save_best()
        plot_learning_curve(self.logger.csv_path, self.run_dir / "learning_curve.png", title=cfg.env.spec)
        success = "" if result["success_rate"] is None else f" | success {result['success_rate']:.0%}"
        self.progress.message(
            f"[eval] step {self.env_steps:,} | return {result['eval_return_mean']:.1f} "
            f"± {result['eval_return_std']:.1f}{success} | {self._wall_time():.0f}s"
        )

    def _eval_policy(self, train_return: float | None = None) -> dict[str, float | None]:
        if self.eval_env is None:  # env.num_eval_envs=0: the training episodes stand in for an evaluation
            mean = float("nan") if train_return is None else train_return
            return {"eval_return_mean": mean, "eval_return_std": float("nan"), "eval_length_mean": None,
                    "success_rate": None}
        return evaluate(
            lambda o: self.agent.act(o, deterministic=True).to(self.eval_env.device),
            self.eval_env,
            seed=self.cfg.seed + EVAL_SEED_OFFSET,
        )

    def _record_final_video(self) -> None:
        if self.eval_env is None:
            self.progress.message("no video: env.num_eval_envs=0 (one env per process)")
            return
        height, width = self.cfg.train.video_size
        try:
            with make_env(self.cfg, 1, render=True, render_size=(height, width)) as video_env:
                info = record_video(
                    lambda o: self.agent.act(o, deterministic=True).to(video_env.device),
                    video_env,
                    self.run_dir / "videos" / "final.mp4",
                    seed=self.cfg.seed + EVAL_SEED_OFFSET,
                )
            self.progress.message(f"video: {self.run_dir / 'videos' / 'final.mp4'} (return {info['return']:.1f})")
        except Exception as e:  # rendering needs a GL context; never lose a finished run over it
            self.progress.message(f"warning: no video recorded ({type(e).__name__}: {e})")
