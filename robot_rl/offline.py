"""Prior data for the learner: a dataset on disk as tensors, its replay buffer, and offline pretraining.

One dataset serves three recipes (see `../shared/DESIGN.md`):
- RLPD: the prior data fills a replay buffer of its own, and each online batch is drawn from it and from the
  online buffer in a fixed ratio (`data.mix_online`, `data.prior_fraction`);
- offline pretraining (Cal-QL, CQL or IQL) of the SAC networks on the dataset alone (`offline.steps`);
- WSRL: pretraining, then a warm-up of rollouts by the pretrained policy with no updates (`train.learning_starts`),
  then online SAC on online data only (`data.mix_online=false`).
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from robot_rl.agents.calql import CalQL
from robot_rl.agents.iql import IQL
from robot_rl.agents.sac import SAC
from robot_rl.config import TrainConfig
from robot_rl.logger import MetricMean
from robot_rl.replay import Batch, ReplayBuffer


@dataclass
class OfflineData:
    """All transitions of a dataset as tensors on the learner's device, with Monte-Carlo returns (for Cal-QL)."""

    obs: Tensor
    action: Tensor
    reward: Tensor
    next_obs: Tensor
    terminated: Tensor
    truncated: Tensor
    mc_return: Tensor
    num_episodes: int
    success_rate: float | None

    @classmethod
    def load(
        cls, path: str | Path, gamma: float, max_episodes: int | None = None, device: str | torch.device = "cpu"
    ) -> OfflineData:
        from robot_rl.datasets import DatasetError, monte_carlo_returns, read_dataset

        if not Path(path).exists():
            raise DatasetError(
                f"data.path={path} does not exist; record it first, e.g. "
                f"robot-rl collect env=<spec> policy=expert episodes=20 out={path}"
            )
        t = read_dataset(path)
        keep = torch.ones_like(t.reward, dtype=torch.bool)
        if max_episodes is not None:
            episodes = torch.unique(t.episode_index)[:max_episodes]
            keep = torch.isin(t.episode_index, episodes)
        episode_index = t.episode_index[keep]
        reward, terminated = t.reward[keep].float(), t.terminated[keep].bool()
        mc = monte_carlo_returns(reward, episode_index, terminated, gamma)
        episodes = torch.unique(episode_index)
        num_episodes = int(episodes.numel())
        success_rate = None
        if num_episodes:
            per_episode = torch.zeros(int(episode_index.max()) + 1, dtype=torch.bool)
            per_episode[episode_index[t.success[keep].bool()]] = True
            success_rate = per_episode[episodes].float().mean().item()
        dev = torch.device(device)
        return cls(
            obs=t.obs[keep].float().to(dev),
            action=t.action[keep].float().to(dev),
            reward=reward.to(dev),
            next_obs=t.next_obs[keep].float().to(dev),
            terminated=terminated.to(dev),
            truncated=t.truncated[keep].bool().to(dev),
            mc_return=mc.float().to(dev),
            num_episodes=num_episodes,
            success_rate=success_rate,
        )

    def __len__(self) -> int:
        return int(self.action.shape[0])

    def check_fits(self, obs_dim: int, action_dim: int, where: str) -> None:
        from robot_rl.datasets import DatasetError

        if self.obs.shape[1] != obs_dim or self.action.shape[1] != action_dim:
            raise DatasetError(
                f"{where} has observations of size {self.obs.shape[1]} and actions of size {self.action.shape[1]}, "
                f"but the env has {obs_dim} and {action_dim}: record the dataset on the same task"
            )

    def sample(self, batch_size: int, gamma: float) -> tuple[Batch, Tensor]:
        """A uniform one-step batch and the Monte-Carlo returns of its transitions."""
        i = torch.randint(len(self), (batch_size,), device=self.obs.device)
        batch = Batch(
            obs={"state": self.obs[i]},
            action=self.action[i],
            reward=self.reward[i],
            next_obs={"state": self.next_obs[i]},
            discount=gamma * (~self.terminated[i]).float(),
        )
        return batch, self.mc_return[i]

    def to_replay(self, gamma: float, n_step: int, device: str | torch.device) -> ReplayBuffer:
        """A single-env replay buffer holding exactly these transitions (n-step windows stop at episode ends)."""
        buffer = ReplayBuffer(
            len(self), 1, {"state": ((self.obs.shape[1],), torch.float32)}, self.action.shape[1],
            device=device, gamma=gamma, n_step=n_step,
        )
        # The last step of every episode must end it, or n-step windows would run into the next episode.
        buffer.extend(
            {"state": self.obs}, self.action, self.reward, {"state": self.next_obs}, self.terminated, self.truncated
        )
        return buffer


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
    cfg: TrainConfig,
    agent: SAC,
    data: OfflineData,
    start_step: int,
    evaluate: Callable[[], dict[str, float | None]],
    log_dir: Path,
    save: Callable[[int], None],
    message: Callable[[str], None] = print,
) -> int:
    """Offline updates from `start_step` to `cfg.offline.steps`; evaluates, logs `offline_metrics.csv` and calls
    `save(step)` every `offline.eval_every` steps (so an interrupted pretraining resumes). Returns the step."""
    learner = make_offline_learner(cfg, agent)
    total, every, batch_size, gamma = cfg.offline.steps, cfg.offline.eval_every, cfg.agent.batch_size, cfg.agent.gamma
    csv_path = log_dir / "offline_metrics.csv"
    new_file = not csv_path.exists()
    step, t0, means = start_step, time.monotonic(), MetricMean()
    message(
        f"offline pretraining ({cfg.offline.algorithm}) on {data.num_episodes} episodes / {len(data):,} transitions "
        f"for {total - start_step:,} steps"
    )
    with open(csv_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=OFFLINE_COLUMNS, extrasaction="ignore")
        if new_file:
            writer.writeheader()
        while step < total:
            batch, mc_return = data.sample(batch_size, gamma)
            means.add(learner.update(batch, mc_return))
            step += 1
            if step % every == 0 or step == total:
                result = evaluate()
                row = {"offline_step": step, "wall_time_s": round(time.monotonic() - t0, 1), **result}
                row.update({k: round(v, 5) for k, v in means.means().items()})
                writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
                f.flush()
                means.reset()
                success = "" if result["success_rate"] is None else f" | success {result['success_rate']:.0%}"
                message(
                    f"[offline] step {step:,}/{total:,} | return {result['eval_return_mean']:.2f}{success} "
                    f"| q {row.get('q_mean', float('nan')):.3f} | {row['wall_time_s']:.0f}s"
                )
                save(step)
    return step
