"""Offline pretraining of the SAC networks on prior data (`robot_rl.prior_data.OfflineData`), the first phase
of `robot-rl train` when `offline.steps > 0` (run by `robot_rl.trainer.OnlineSAC.pretrain`).

One dataset serves three recipes:
- RLPD: the prior data fills a replay buffer of its own, and each online batch is drawn from it and from the
  online buffer in a fixed ratio (`data.mix_online`, `data.prior_fraction`);
- offline pretraining (Cal-QL, CQL or IQL) of the SAC networks on the dataset alone (`offline.steps`);
- WSRL: pretraining, then a warm-up of rollouts by the pretrained policy with no updates (`train.learning_starts`),
  then online SAC on online data only (`data.mix_online=false`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from robot_rl.agents.calql import CalQL
from robot_rl.agents.iql import IQL
from robot_rl.agents.sac import SAC
from robot_rl.config import TrainConfig
from robot_rl.logger import MetricMean, Progress
from robot_rl.prior_data import OfflineData

if TYPE_CHECKING:
    from robot_rl.runner import Runner


def make_offline_learner(cfg: TrainConfig, agent: SAC) -> CalQL | IQL:
    algorithm = cfg.offline.algorithm
    if algorithm == "iql":
        return IQL(agent, cfg.offline.iql)
    return CalQL(agent, cfg.offline.calql, calibrated=algorithm == "calql")


OFFLINE_COLUMNS = [
    "offline_step", "wall_time_s", "eval_return_mean", "success_rate", "critic_loss", "q_mean", "cql_gap",
    "q_ood_mean", "actor_loss", "temperature",
]


def pretrain(
    cfg: TrainConfig, agent: SAC, data: OfflineData, start_step: int, run: Runner, save: Callable[[int], None]
) -> int:
    """Offline updates from `start_step` to `cfg.offline.steps`, the pretraining phase of `run`: every
    `offline.eval_every` steps it evaluates with the run's evaluation, logs a row of `offline_metrics.csv` (and
    TensorBoard under `tensorboard/offline`, or W&B tags under `offline/`) and calls `save(step)`, so an interrupted pretraining resumes.
    Returns the step reached."""
    learner = make_offline_learner(cfg, agent)
    total, every = cfg.offline.steps, cfg.offline.eval_every
    batch_size, gamma = cfg.agent.optimiser.batch_size, cfg.agent.critic.gamma
    logger = run.metrics_logger(resume_step=start_step, columns=OFFLINE_COLUMNS, file_name="offline_metrics.csv",
                                step_key="offline_step", tensorboard_dir="tensorboard/offline", wandb_prefix="offline/")
    progress = Progress(total, quiet=run.settings.quiet, initial=start_step)
    step, t0, means, shown = start_step, time.monotonic(), MetricMean(), {}
    run.progress.message(
        f"offline pretraining ({cfg.offline.algorithm}) on {data.num_episodes} episodes / {len(data):,} transitions "
        f"for {total - start_step:,} steps"
    )
    try:
        while step < total:
            batch, mc_return = data.sample(batch_size, gamma)
            means.add(learner.update(batch, mc_return))
            step += 1
            progress.update(step, None, shown)
            if step % every == 0 or step == total:
                result = run.evaluate()
                row = {"offline_step": step, "wall_time_s": round(time.monotonic() - t0, 1), **result}
                row.update({k: round(v, 5) for k, v in means.means().items()})
                logger.log(row)
                shown = {k: row[k] for k in ("critic_loss", "actor_loss") if k in row}
                means.reset()
                success = "" if result["success_rate"] is None else f" | success {result['success_rate']:.0%}"
                progress.message(
                    f"[offline] step {step:,}/{total:,} | return {result['eval_return_mean']:.2f}{success} "
                    f"| q {row.get('q_mean', float('nan')):.3f} | {row['wall_time_s']:.0f}s"
                )
                save(step)
    finally:
        progress.close()
        logger.close()
    return step
