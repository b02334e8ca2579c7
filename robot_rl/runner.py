"""The one run skeleton: a `Runner` drives any learning `Method` (online SAC/RLPD/WSRL in `robot_rl.trainer`,
the policy fine-tuning methods of `robot_rl.finetune`, human-in-the-loop training on a robot in
`robot_rl.hil.method`), as RSL-RL's runner drives any algorithm.

The method owns the algorithm: collecting, replay, updates, its own counters and what evaluation runs. The
runner owns what every run needs: seeding and RNG state, the evaluation env and cadence (`eval_every` executed
env steps, and optionally the starting policy at step 0), `metrics.csv` + TensorBoard or Weights & Biases
(`logger=`, the one place a run's logging backends are chosen) + `learning_curve.png`,
the live progress line, checkpoints (`checkpoints/latest.pt` every `checkpoint_every` steps, every
`checkpoint_every_s` seconds if set, and at the end, to resume; `checkpoints/best.pt` at the best evaluation),
Ctrl-C and SIGTERM (both save `latest.pt` and end with a resume hint), and the summary.

Checkpoints are flat dicts: the runner's keys (`format`, `config`, `evals`, `best_score`, `last_result`,
`wall_time_s`, `eval_time_s`, `rng`) plus the method's `state_dict()`; `best.pt` holds the method state
without its replay buffer, plus `env_steps`, `eval_return` and `score`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import Tensor

from robot_rl import checkpoint
from robot_rl.core_share import CoreShare
from robot_rl.device import choose_threads
from robot_rl.evaluation import evaluate
from robot_rl.logger import Episodes, MetricMean, MetricsLogger, Progress, start_wandb
from robot_rl.plots import plot_learning_curve
from robot_rl.signals import Terminated, stop_between_steps

#: The run directory's record of what wrote it: {"command": ..., "method": ...}. `finetune resume=` and `eval run=`
#: read the method here rather than guessing it from which keys config.yaml has.
RUN_RECORD = "run.json"

__all__ = [
    "CHECKPOINT_FORMAT", "EVAL_SEED_OFFSET", "Method", "MethodDefaults", "RunSettings", "Runner", "Terminated",
    "prepare", "rng_state", "seed_everything", "set_rng_state",
]

CHECKPOINT_FORMAT = 1
EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share initial states with training episodes

# The runner's own keys in latest.pt; a method's state_dict() keys sit beside them and must differ.
RUN_KEYS = frozenset({"format", "config", "evals", "best_score", "last_result", "wall_time_s", "eval_time_s", "rng"})

Metrics = Mapping[str, "Tensor | float | list[Tensor] | Episodes"]
EvalPolicy = tuple[Callable[[dict[str, Tensor]], Tensor], Callable[[Tensor], None] | None]


# -- seeding --------------------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """The global RNG states (Python, NumPy, torch CPU and CUDA), for a checkpoint."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# torch's thread count before any run of this process set it: the most a run that shares the cores takes
_TORCH_THREADS = torch.get_num_threads()
# this process's share of the machine's cores (`robot_rl.core_share`), when `threads=` was left unset
_core_share: CoreShare | None = None


def prepare(cfg: Any) -> None:
    """The set-up before any env or network exists: validate the config, set torch's threads, seed.

    With `threads=` unset the run joins the machine's count of runs (`robot_rl.core_share`) and takes its share
    of the cores, which `Runner.run` keeps up to date as other runs start and end."""
    global _core_share
    cfg.validate()
    threads, notice = choose_threads(cfg.threads, default=_TORCH_THREADS)
    if _core_share is not None:
        _core_share.close()
        _core_share = None
    if cfg.threads is None:
        _core_share = CoreShare(threads, default=_TORCH_THREADS)
        share = _core_share.threads()
        if share < threads:
            runs = len(_core_share.live_runs())
            threads, notice = share, (f"threads={share}: {runs} robot-rl runs share this machine's "
                                      f"{_core_share.cores} cores (set threads= to choose)")
        _core_share.settle(threads)
    torch.set_num_threads(threads)
    if notice and not getattr(cfg, "quiet", False):  # stdout, with the run's header: stderr is for errors
        print(notice, flush=True)
    seed_everything(cfg.seed)


# -- the method interface -------------------------------------------------------------------------------------
class Method(Protocol):
    """What a `Runner` drives. `env_steps` counts executed env steps (all envs), the run's clock."""

    env_steps: int

    def start(self, seed: int) -> None:
        """Start fresh training episodes (also after a resume: simulator state is not checkpointed)."""

    def pretrain(self, run: Runner) -> None:
        """Work before the first env step that needs the run (offline pretraining: `run.evaluate`,
        `run.save_checkpoint`, `run.progress`); called after `start`, also on resume."""

    stopped: bool  # True ends the run before `steps` (an operator's e-stop); `MethodDefaults` gives False

    def advance(self) -> Metrics:
        """One step of collection and learning. Returns what to average into the next log row: a value per
        update (a list: one per update), and under `EPISODE_KEYS` the finished episodes (see `MetricMean`)."""

    def eval_policy(self) -> EvalPolicy:
        """(act, on_done) for `robot_rl.evaluation.evaluate` (on_done: reset per-env state, or None)."""

    def log_fields(self) -> dict[str, float | None]:
        """Counters to log with every evaluation row (e.g. `updates`)."""

    def finish(self, run: Runner) -> dict[str, Any]:
        """After the last step: final artefacts (a video, a policy directory); returns summary entries."""

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume (a `replay` key is left out of `best.pt`)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class MethodDefaults:
    """No-op `pretrain`, `log_fields` and `finish` for methods that need none, and `stopped` False."""

    stopped = False

    def pretrain(self, run: Runner) -> None:
        pass

    def log_fields(self) -> dict[str, float | None]:
        return {}

    def finish(self, run: Runner) -> dict[str, Any]:
        return {}


@dataclass
class RunSettings:
    """The run's cadence and presentation, given by the entry point (`robot-rl train`, `robot-rl finetune`)."""

    steps: int
    eval_every: int
    seed: int
    command: str  # the robot-rl command that resumes the run
    title: str  # of the learning curve
    checkpoint_every: int | None = None  # None: at every evaluation
    checkpoint_every_s: float | None = None  # also save latest.pt this often (a robot's minutes are dear)
    quiet: bool = False
    evaluate_first: bool = False  # evaluate the starting policy at step 0
    # what ranks evaluations for best.pt: "return", "success", or another column of the log row (e.g. hil-train's
    # "autonomous_success"); the return where the row has no value for it
    score: str = "return"
    # a column of the log row, a rate in [0, 1], that breaks ties of `score` with lower being better (hil-train's
    # "intervention_rate": while no episode is autonomous yet, best.pt is the policy that needed the operator least,
    # not the first one logged)
    score_tiebreak_lower: str | None = None
    columns: list[str] | None = None  # of metrics.csv (default `robot_rl.logger.METRIC_COLUMNS`)
    means_on_host: bool = False  # see `MetricMean`
    resume_hint: str | None = None  # how to continue an interrupted run (default: `robot-rl <command> resume=<dir>`)
    method: str | None = None  # the method's registered name (`robot-rl finetune method=`), kept in run.json


def _mean_std(result: Mapping[str, float | None]) -> str:
    """`mean ± std` of an evaluation's return; without a std where there is none (the training episodes of a run
    without an eval env: "± nan"), and "—" before any episode finished."""
    mean, std = result.get("eval_return_mean"), result.get("eval_return_std")
    if mean is None or not np.isfinite(mean):
        return "—"
    return f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None and np.isfinite(std) else "")


class Runner:
    """Evaluation env, run directory, logging, checkpoints and the loop around one `Method`."""

    def __init__(
        self, method: Method, eval_env: Any, run_dir: Path, config: Any, settings: RunSettings, resume: bool = False
    ) -> None:
        self.method, self.eval_env, self.config, self.settings = method, eval_env, config, settings
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.evals = 0
        self.best_score = -float("inf")
        self.last_result: dict[str, float | None] | None = None
        self.wall_offset_s = 0.0
        self.eval_time_s = 0.0  # of the wall time, spent evaluating (training time = wall time - this)
        self._t0: float | None = None  # set when run() starts
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self._restore(checkpoint.load(self.ckpt_dir / "latest.pt"))
        OmegaConf.save(OmegaConf.structured(config), self.run_dir / "config.yaml")
        if not (resume and (self.run_dir / RUN_RECORD).is_file()):  # a resumed run keeps what started it
            record = {"command": settings.command, "method": settings.method}
            (self.run_dir / RUN_RECORD).write_text(json.dumps(record) + "\n")
        self.backend = getattr(config, "logger", "tensorboard")
        self.wandb: Any = None
        if self.backend == "wandb":
            w = config.wandb
            self.wandb = start_wandb(self.run_dir, asdict(config), w.project, w.entity, w.mode, resume)
        self.logger = self.metrics_logger(resume_step=method.env_steps if resume else None, columns=settings.columns)
        self.progress = Progress(settings.steps, quiet=settings.quiet, initial=method.env_steps, shows_eval=True)
        self._shown_losses: dict[str, float] = {}  # of the last log row, beside the progress bar

    def metrics_logger(self, wandb_prefix: str = "", **kwargs: Any) -> MetricsLogger:
        """A `MetricsLogger` in this run's directory with this run's backends (`logger=`): the Runner's own and
        offline pretraining's (`wandb_prefix="offline/"`, since both phases share the run's one W&B run)."""
        return MetricsLogger(self.run_dir, tensorboard=self.backend == "tensorboard", wandb_run=self.wandb,
                             wandb_prefix=wandb_prefix, **kwargs)

    def _finish_wandb(self) -> None:
        """Upload the run's videos (the final evaluation episode) and close the W&B run."""
        if self.wandb is None:
            return
        import wandb

        videos = sorted((self.run_dir / "videos").glob("*.mp4"))
        if videos:
            self.wandb.log({f"video/{p.stem}": wandb.Video(str(p), format="mp4") for p in videos})
        self.wandb.finish()
        self.wandb = None

    @property
    def env_steps(self) -> int:
        return self.method.env_steps

    @property
    def last_eval_return(self) -> float | None:
        return None if self.last_result is None else self.last_result["eval_return_mean"]

    def _wall_time(self) -> float:
        return self.wall_offset_s + (time.monotonic() - self._t0 if self._t0 is not None else 0.0)

    # -- the loop -----------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        s, method = self.settings, self.method
        checkpoint_every = s.checkpoint_every or s.eval_every
        next_eval = (method.env_steps // s.eval_every + 1) * s.eval_every
        next_ckpt = (method.env_steps // checkpoint_every + 1) * checkpoint_every
        self._t0 = time.monotonic()
        next_ckpt_t = self._t0 + (s.checkpoint_every_s or float("inf"))
        means = MetricMean(on_host=s.means_on_host)
        completed = False
        if method.env_steps > 0:
            self.progress.message(f"resumed {self.run_dir} at step {method.env_steps:,}")
        method.start(s.seed + method.env_steps)  # a resumed run starts fresh episodes, seeded apart
        try:
            with stop_between_steps() as stop:  # Ctrl-C/SIGTERM end the run between steps, not inside a library
                method.pretrain(self)
                if s.evaluate_first and method.env_steps == 0 and self.evals == 0:
                    self._evaluate_and_log({}, 0.0)  # the starting point
                # env_steps_per_s of a log row: training steps since the previous row over the time they took
                # (evaluation and pretraining excluded)
                span_t, span_steps = time.monotonic(), method.env_steps
                while method.env_steps < s.steps and not method.stopped:
                    if _core_share is not None and (threads := _core_share.rebalance()) is not None:
                        self.progress.message(f"threads={threads}: {len(_core_share.live_runs())} robot-rl runs "
                                              f"share this machine's {_core_share.cores} cores now")
                    means.add(method.advance())
                    done = method.env_steps >= s.steps or method.stopped
                    self.progress.update(method.env_steps, self._last_score(), self._shown_losses)
                    if method.env_steps >= next_eval or done:
                        next_eval += s.eval_every
                        rate = (method.env_steps - span_steps) / max(time.monotonic() - span_t, 1e-9)
                        self._evaluate_and_log(means.means(), rate)
                        means.reset()
                        span_t, span_steps = time.monotonic(), method.env_steps
                    if method.env_steps >= next_ckpt or done or time.monotonic() >= next_ckpt_t:
                        if method.env_steps >= next_ckpt:
                            next_ckpt += checkpoint_every
                        self.save_checkpoint()
                        next_ckpt_t = time.monotonic() + (s.checkpoint_every_s or float("inf"))
                    stop.check()
            completed = True
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`Terminated`)
            self.progress.close()
            self.save_checkpoint()
            hint = s.resume_hint or f"robot-rl {s.command} resume={self.run_dir}"
            print(f"interrupted at step {method.env_steps:,}; checkpoint saved. Continue with:\n  {hint}", flush=True)
            raise
        finally:
            self.logger.close()
            if _core_share is not None:  # this process no longer takes a share (a notebook lives on after a run)
                _core_share.close()
            if not completed:  # interrupted or failed: close W&B now, there is no final video to wait for
                self._finish_wandb()
        self.progress.close()
        try:
            summary = {
                "run_dir": str(self.run_dir),
                "env_steps": method.env_steps,
                "wall_time_s": self._wall_time(),
                "last": self.last_result,
                "last_eval_return": self.last_eval_return,
                "best_score": self.best_score,
                **method.finish(self),
            }
        finally:  # after the method's final video, which goes to W&B too
            self._finish_wandb()
        return summary

    def _last_score(self) -> float | None:
        """The score shown beside the bar: without the tie-break, whose -1e-4 * rate showed as "eval -0.0"."""
        return None if self.last_result is None else self._score(self.last_result, tiebreak=False)

    def _score(self, result: dict[str, float | None], tiebreak: bool = True) -> float:
        key = self.settings.score
        if key == "return":
            return result["eval_return_mean"]
        value = result.get("success_rate" if key == "success" else key)
        score = result["eval_return_mean"] if value is None else value
        lower = self.settings.score_tiebreak_lower
        tiebreak = result.get(lower) if lower and tiebreak else None
        # Scores that are rates differ by at least 1/(n1 n2) > 1e-4 for windows of up to 100 episodes, so the
        # scaled tie-break cannot outweigh a real difference.
        return score if tiebreak is None else score - 1e-4 * tiebreak

    # -- evaluation ---------------------------------------------------------------------------------------------
    def evaluate(self, train_return: float | None = None, train_success: float | None = None) -> dict[str, float | None]:
        """One evaluation episode per eval env with the method's evaluation policy (a fixed seed, so every
        evaluation starts from the same states). Without eval envs (a robot: every episode costs its time) the
        training episodes' return and success stand in."""
        if self.eval_env is None:
            mean = float("nan") if train_return is None else train_return
            return {"eval_return_mean": mean, "eval_return_std": float("nan"), "eval_length_mean": None,
                    "success_rate": train_success}
        act, on_done = self.method.eval_policy()
        return evaluate(act, self.eval_env, seed=self.settings.seed + EVAL_SEED_OFFSET, on_done=on_done)

    def _evaluate_and_log(self, means: dict[str, float], rate: float) -> None:
        t0 = time.monotonic()
        train_return, train_success = means.pop("episode_return", None), means.pop("success", None)
        result = self.evaluate(train_return, train_success)
        self.eval_time_s += time.monotonic() - t0
        self.evals += 1
        self.last_result = result
        row: dict[str, float | None] = {
            "env_step": self.method.env_steps,
            "wall_time_s": round(self._wall_time(), 2),
            "eval_time_s": round(self.eval_time_s, 2),
            **result,
            "train_return_mean": train_return,
            "train_success_rate": train_success,
            **self.method.log_fields(),
            "env_steps_per_s": round(rate, 2),
            **means,
        }
        if self.settings.score not in ("return", "success"):
            result[self.settings.score] = row.get(self.settings.score)
        if self.settings.score_tiebreak_lower is not None:
            result[self.settings.score_tiebreak_lower] = row.get(self.settings.score_tiebreak_lower)
        self.logger.log(row)
        self._shown_losses = {k: row[k] for k in ("critic_loss", "actor_loss") if row.get(k) is not None}
        score = self._score(result)
        if score > self.best_score:
            self.best_score = score
            self._save_best(result)
        plot_learning_curve(self.logger.csv_path, self.run_dir / "learning_curve.png", title=self.settings.title)
        success = "" if result["success_rate"] is None else f" | success {result['success_rate']:.0%}"
        kind = "eval" if self.eval_env is not None else "train"
        self.progress.message(f"[{kind}] step {self.method.env_steps:,} | return {_mean_std(result)}{success} | "
                              f"{self._wall_time():.0f}s")

    # -- checkpoints --------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        method_state = self.method.state_dict()
        if clash := RUN_KEYS & method_state.keys():
            raise KeyError(f"{type(self.method).__name__}.state_dict() uses the runner's key(s) {sorted(clash)}")
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": asdict(self.config),
            **method_state,
            "evals": self.evals,
            "best_score": self.best_score,
            "last_result": self.last_result,
            "wall_time_s": self._wall_time(),
            "eval_time_s": self.eval_time_s,
            "rng": rng_state(),
        }
        checkpoint.atomic_save(state, self.ckpt_dir / "latest.pt")

    def _save_best(self, result: dict[str, float | None]) -> None:
        weights = {k: v for k, v in self.method.state_dict().items() if k != "replay"}
        state = {"format": CHECKPOINT_FORMAT, "config": asdict(self.config), **weights,
                 "env_steps": self.method.env_steps, "eval_return": result["eval_return_mean"],
                 "score": self.best_score}
        checkpoint.atomic_save(state, self.ckpt_dir / "best.pt")

    def save_extra(self, name: str, state: dict[str, Any]) -> None:
        """Another checkpoint beside latest/best (e.g. `pretrained.pt`), with the run's format and config."""
        checkpoint.atomic_save({"format": CHECKPOINT_FORMAT, "config": asdict(self.config), **state},
                               self.ckpt_dir / name)

    def _restore(self, state: dict) -> None:
        if state.get("format") != CHECKPOINT_FORMAT:
            raise checkpoint.CheckpointError(f"checkpoint format {state.get('format')} is not supported")
        try:
            self.method.load_state_dict(state.get("method", state))  # "method": fine-tuning runs before the Runner
        except (KeyError, RuntimeError, ValueError) as e:
            saved = state.get("config") or {}
            if isinstance(saved.get("agent"), dict):  # a checkpoint of the release before the agent's groups
                from robot_rl.agents.sac import nest_flat_keys

                saved = {**saved, "agent": nest_flat_keys(saved["agent"])[0]}
            changed = checkpoint.config_changes(saved, asdict(self.config))
            if changed:
                raise checkpoint.CheckpointError(
                    f"checkpoint does not fit this configuration, changed since the run was saved: {', '.join(changed)}; "
                    "set the key that shapes the weights back to its saved value (the run's config.yaml), or "
                    "start a new run_dir"
                ) from None
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise checkpoint.CheckpointError(
                f"checkpoint does not fit this configuration ({first}); resume with the run's own config.yaml"
            ) from e
        self.evals = state["evals"]
        self.best_score = state.get("best_score", state.get("best_return", -float("inf")))
        self.last_result = state.get("last_result")
        if self.last_result is None and state.get("last_eval_return") is not None:  # written before the Runner
            self.last_result = {"eval_return_mean": state["last_eval_return"], "success_rate": None}
        self.wall_offset_s = state["wall_time_s"]
        self.eval_time_s = state.get("eval_time_s", 0.0)
        set_rng_state(state["rng"])
