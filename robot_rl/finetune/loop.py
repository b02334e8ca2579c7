"""`robot-rl finetune method=...`: the run around a fine-tuning method (residual, dsrl, reinflow, dppo).

The method owns the algorithm (`advance()` collects and updates, `eval_policy()` gives the policy to evaluate);
this loop owns what every run needs: the envs, the saved base policy, an evaluation of the BC starting point
at step 0 and then every `eval_every` executed env steps, `metrics.csv`, `learning_curve.png`, checkpoints
(`checkpoints/latest.pt` to resume, `checkpoints/best.pt`), and for ReinFlow and DPPO the fine-tuned policy
saved as a policy directory (`<run_dir>/policy`, loadable with `robot_rl.policies.io.load_policy`).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from robot_rl import checkpoint, envs
from robot_rl.evaluation import evaluate
from robot_rl.finetune import FinetuneError
from robot_rl.finetune.config import FinetuneConfig
from robot_rl.logger import METRIC_COLUMNS, MetricsLogger, Progress
from robot_rl.plots import plot_learning_curve
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import load_policy, save_policy
from robot_rl.trainer import EVAL_SEED_OFFSET, _rng_state, _set_rng_state, seed_everything

CHECKPOINT_FORMAT = 1
_EPISODE_KEYS = ("episode_return", "success")  # per finished episode, not per update
COLUMNS = [*METRIC_COLUMNS, "train_success_rate", "policy_loss", "value_loss", "approx_kl", "clip_fraction",
           "explained_variance"]


def build_method(cfg: FinetuneConfig, base: ChunkPolicy, env: envs.BatchedEnv) -> Any:
    """The method object for `cfg.method` around `base` (checked to be the kind the method needs)."""
    if cfg.method == "residual":
        from robot_rl.finetune.residual import ResidualRL
        from robot_rl.offline import OfflineData

        demos = None
        if cfg.data:
            demos = OfflineData.load(cfg.data, cfg.agent.gamma, device=cfg.device)
            demos.check_fits(base.obs_dim, base.action_dim, f"dataset {cfg.data}")
        return ResidualRL(cfg.residual, cfg.agent, base, env, cfg.replay_capacity, cfg.device, demos)
    if cfg.method == "dsrl":
        from robot_rl.finetune.dsrl import DSRL

        _require(base, (DiffusionPolicy, FlowPolicy), "dsrl steers a diffusion or flow policy's noise")
        return DSRL(cfg.dsrl, cfg.agent, base, env, cfg.replay_capacity, cfg.device)
    from robot_rl.finetune.ppo import PPO

    if cfg.method == "reinflow":
        from robot_rl.finetune.reinflow import ReinFlowChain

        _require(base, (FlowPolicy,), "reinflow fine-tunes a flow policy (robot-rl bc policy=flow)")
        r = cfg.reinflow
        chain = ReinFlowChain(base, r.num_steps, r.min_std, r.max_std, tuple(r.noise_hidden))
    else:
        from robot_rl.finetune.dppo import DPPOChain

        _require(base, (DiffusionPolicy,), "dppo fine-tunes a diffusion policy (robot-rl bc policy=diffusion)")
        chain = DPPOChain(base, cfg.dppo.ft_steps, cfg.dppo.num_inference_steps, cfg.dppo.min_std)
    return PPO(cfg.ppo, chain.to(cfg.device), env, cfg.seed, cfg.device)


def _require(base: ChunkPolicy, kinds: tuple[type, ...], message: str) -> None:
    if not isinstance(base, kinds):
        raise FinetuneError(f"{message}; base_policy is a {type(base).__name__}")


class Finetuner:
    """Envs, base policy, method and run directory of one fine-tuning run."""

    def __init__(self, cfg: FinetuneConfig, run_dir: Path, resume: bool = False) -> None:
        cfg.validate()
        self.cfg, self.run_dir = cfg, Path(run_dir)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        base = load_policy(cfg.base_policy, device=cfg.device)
        make = dict(device=cfg.device, max_episode_steps=cfg.env.max_episode_steps)
        self.env = envs.make(cfg.env.spec, num_envs=cfg.env.num_envs, **make)
        self.eval_env = envs.make(cfg.env.spec, num_envs=cfg.env.num_eval_envs, **make)
        (obs_dim,) = self.env.observation_spec["state"][0]
        if (obs_dim, self.env.action_dim) != (base.obs_dim, base.action_dim):
            raise FinetuneError(
                f"base_policy {cfg.base_policy} maps {base.obs_dim} observations to {base.action_dim} actions but "
                f"{cfg.env.spec} has {obs_dim} and {self.env.action_dim}; use the env it was trained on"
            )
        self.method = build_method(cfg, base, self.env)
        self.evals, self.best_score, self.wall_offset_s = 0, -float("inf"), 0.0
        self.last_score: float | None = None  # of the latest evaluation: success rate, else return
        self.last_result: dict | None = None
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self._restore(checkpoint.load(self.ckpt_dir / "latest.pt"))
        OmegaConf.save(OmegaConf.structured(cfg), self.run_dir / "config.yaml")
        self.logger = MetricsLogger(self.run_dir, resume_step=self.method.env_steps if resume else None,
                                    columns=COLUMNS)
        self.progress = Progress(cfg.steps, quiet=cfg.quiet)
        self._t0 = time.monotonic()

    def _wall_time(self) -> float:
        return self.wall_offset_s + time.monotonic() - self._t0

    def run(self) -> dict:
        cfg, method = self.cfg, self.method
        method.start(cfg.seed + method.env_steps)  # a resumed run starts fresh episodes, seeded apart
        sums: dict[str, Any] = {}
        counts: dict[str, int] = {}
        if method.env_steps == 0 and self.evals == 0:
            self._evaluate_and_log({}, 0.0)  # the BC starting point
        next_eval = (method.env_steps // cfg.eval_every + 1) * cfg.eval_every
        rate_t, rate_steps, rate = time.monotonic(), method.env_steps, 0.0
        try:
            while method.env_steps < cfg.steps:
                for k, v in method.advance().items():
                    if k in _EPISODE_KEYS:  # one value per episode that ended
                        sums[k] = sums.get(k, 0.0) + v.sum()
                        counts[k] = counts.get(k, 0) + v.numel()
                    else:
                        sums[k] = sums.get(k, 0.0) + v
                        counts[k] = counts.get(k, 0) + 1
                now = time.monotonic()
                if now - rate_t >= 1.0:
                    rate = (method.env_steps - rate_steps) / (now - rate_t)
                    rate_t, rate_steps = now, method.env_steps
                self.progress.update(method.env_steps, rate, self.last_score)
                if method.env_steps >= next_eval or method.env_steps >= cfg.steps:
                    next_eval += cfg.eval_every
                    means = {k: float(sums[k]) / counts[k] for k in sums if counts[k]}
                    self._evaluate_and_log(means, rate)
                    sums, counts = {}, {}
                    self.save_checkpoint()
        except KeyboardInterrupt:
            self.progress.close()
            self.save_checkpoint()
            print(f"interrupted at step {method.env_steps:,}; checkpoint saved. Continue with:\n"
                  f"  robot-rl finetune resume={self.run_dir}", flush=True)
            raise
        finally:
            self.logger.close()
        self.progress.close()
        policy_dir = self._save_policy()
        return {"run_dir": str(self.run_dir), "env_steps": method.env_steps, "wall_time_s": self._wall_time(),
                "last": self.last_result, "best_score": self.best_score, "policy_dir": policy_dir}

    def _evaluate_and_log(self, means: dict[str, float], rate: float) -> None:
        act, on_done = self.method.eval_policy()
        result = evaluate(act, self.eval_env, seed=self.cfg.seed + EVAL_SEED_OFFSET, on_done=on_done)
        self.evals += 1
        row: dict[str, float | None] = {
            "env_step": self.method.env_steps,
            "wall_time_s": round(self._wall_time(), 2),
            **result,
            "train_return_mean": means.pop("episode_return", None),
            "train_success_rate": means.pop("success", None),
            "env_steps_per_s": round(rate, 2),
            **means,
        }
        self.logger.log(row)
        # Success rate ranks evaluations where the task has one; the return otherwise.
        score = result["success_rate"] if result["success_rate"] is not None else result["eval_return_mean"]
        self.last_score, self.last_result = score, result
        if score > self.best_score:
            self.best_score = score
            checkpoint.atomic_save(self._state(), self.ckpt_dir / "best.pt")
        title = f"{self.cfg.method} on {self.cfg.env.spec}"
        plot_learning_curve(self.logger.csv_path, self.run_dir / "learning_curve.png", title=title)
        success = "" if result["success_rate"] is None else f" | success {result['success_rate']:.0%}"
        self.progress.message(
            f"[eval] step {self.method.env_steps:,} | return {result['eval_return_mean']:.1f}{success} | "
            f"{self._wall_time():.0f}s"
        )

    def _state(self) -> dict:
        return {"format": CHECKPOINT_FORMAT, "config": asdict(self.cfg), "method": self.method.state_dict(),
                "evals": self.evals, "best_score": self.best_score, "wall_time_s": self._wall_time(),
                "rng": _rng_state()}

    def save_checkpoint(self) -> None:
        checkpoint.atomic_save(self._state(), self.ckpt_dir / "latest.pt")

    def _restore(self, state: dict) -> None:
        if state.get("format") != CHECKPOINT_FORMAT:
            raise checkpoint.CheckpointError(f"checkpoint format {state.get('format')} is not supported")
        try:
            self.method.load_state_dict(state["method"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise checkpoint.CheckpointError(
                f"checkpoint does not fit this configuration ({e}); resume with the run's own config.yaml"
            ) from e
        self.evals, self.best_score, self.wall_offset_s = state["evals"], state["best_score"], state["wall_time_s"]
        _set_rng_state(state["rng"])

    def _save_policy(self) -> str | None:
        """ReinFlow and DPPO fine-tune the policy itself: save it as a policy directory for deployment."""
        chain = getattr(self.method, "chain_policy", None)
        if chain is None:
            return None
        if getattr(chain, "first_ft", 0) > 0:
            # DPPO with frozen early steps: a plain DiffusionPolicy would run the fine-tuned network on every step
            self.progress.message("no policy directory: dppo.ft_steps < the DDIM steps (the chain has frozen "
                                  "steps); the fine-tuned chain is in checkpoints/best.pt")
            return None
        path = self.run_dir / "policy"
        save_policy(chain.base_policy(), path)
        return str(path)
