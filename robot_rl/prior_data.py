"""Prior data: a dataset on disk as tensors on the learner's device, with Monte-Carlo returns, and its replay buffer.

One dataset serves three recipes (see `docs/architecture.md`): RLPD mixes its replay buffer into every online
batch (`data.mix_online`, `data.prior_fraction`); offline pretraining (Cal-QL, CQL or IQL, `robot_rl.offline`)
samples it directly with its Monte-Carlo returns; the HIL learner and residual RL fill their prior buffers from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

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
                f"robot-rl collect env.spec=<spec> policy=expert episodes=20 out={path}"
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
