"""Prior data: a dataset on disk as tensors on the learner's device, with Monte-Carlo returns, and its replay buffer.

One dataset serves three recipes (see `docs/architecture.md`): RLPD mixes its replay buffer into every online
batch (`data.mix_online`, `data.prior_fraction`); offline pretraining (Cal-QL, CQL or IQL, `robot_rl.offline`)
samples it directly with its Monte-Carlo returns; the HIL learner and residual RL fill their prior buffers from it.

Camera datasets (`robot-rl collect` in an `arm:<task>-pixels` task): `load(..., cameras=("pixels/front", ...))` also
decodes each camera's video (`observation.images.<camera>`) into `frames`, and `to_replay` then builds a frame
buffer (`ReplayBuffer(frames=...)`, each frame stored once) that `replay.sample_mixed` mixes as it mixes a state
buffer. A dataset keeps no frame after an episode's last step, so the last step of an episode cut off by its time
limit (truncated) has no next frame: it is left out of that buffer and the step before it, whose next frame is the
episode's last recorded one, is marked truncated (bootstrapped, as the time limit's cut is). Every stored
transition is then exact. Offline pretraining samples the same steps (`sample`: each step's frames and the next
step's), and a pixel agent's Cal-QL, CQL or IQL critic loss trains its encoder as the online one does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    episode_index: Tensor | None = None  # int64 [M], on the CPU
    # Camera group (``pixels/<camera>``) -> uint8 [M, H, W, 3] frames (the obs of each step), on the CPU: the
    # replay buffer made from them holds the device copy. With cached embeddings the learners replace them by the
    # frozen backbone's features (`ObservationPipeline.prior_data`).
    frames: dict[str, Tensor] = field(default_factory=dict)
    _frame_rows: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False)  # `sample`'s, made once

    @classmethod
    def load(
        cls, path: str | Path, gamma: float, max_episodes: int | None = None, device: str | torch.device = "cpu",
        cameras: Sequence[str] = (), env_spec: str = "",
    ) -> OfflineData:
        """`cameras`: env camera groups whose videos (`observation.images.<camera>`) to decode into `frames`;
        `env_spec`: the run's env, for the command that records a missing dataset."""
        from robot_rl.datasets import DatasetError, monte_carlo_returns, read_dataset
        from robot_rl.datasets.format import camera_feature, load_info

        if not Path(path).exists():
            raise DatasetError(
                f"data.path={path} does not exist; record it first, e.g. "
                f"robot-rl collect env.spec={env_spec or 'arm:push-sparse'} policy=expert episodes=20 out={path}"
            )
        features = {group: camera_feature(group) for group in cameras}
        if features:
            have = load_info(Path(path))["features"]
            missing = [f for f in features.values() if have.get(f, {}).get("dtype") != "video"]
            if missing:
                videos = sorted(k for k, v in have.items() if v.get("dtype") == "video") or "none"
                raise DatasetError(f"{path} has no {', '.join(missing)} video (its videos: {videos}); the env learns "
                                   f"from cameras {', '.join(cameras)}: record the dataset in the same -pixels task")
        t = read_dataset(path, load_images=bool(features))
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
            episode_index=episode_index.clone(),
            frames={group: t.images[feature][keep] for group, feature in features.items()},
        )

    def __len__(self) -> int:
        return int(self.action.shape[0])

    def check_fits(self, obs_dim: int, action_dim: int, where: str,
                   cameras: Mapping[str, tuple[int, ...]] | None = None) -> None:
        """Raise `DatasetError` unless the state, action and (`cameras`: group -> (H, W, C)) frame shapes fit the env."""
        from robot_rl.datasets import DatasetError

        if self.obs.shape[1] != obs_dim or self.action.shape[1] != action_dim:
            raise DatasetError(
                f"{where} has observations of size {self.obs.shape[1]} and actions of size {self.action.shape[1]}, "
                f"but the env has {obs_dim} and {action_dim}: record the dataset on the same task"
            )
        for group, shape in (cameras or {}).items():
            have = tuple(self.frames[group].shape[1:]) if group in self.frames else None
            if have != tuple(shape):
                raise DatasetError(f"{where} has {group} frames of shape {have}, the env {tuple(shape)}: record the "
                                   f"dataset with the same env.pixel_size")

    def sample(self, batch_size: int, gamma: float) -> tuple[Batch, Tensor]:
        """A uniform one-step batch and the Monte-Carlo returns of its transitions; with `frames`, over the steps a
        frame buffer keeps (`frame_steps`), each step's frames as obs and the next step's as next_obs."""
        if not self.frames:
            i = torch.randint(len(self), (batch_size,), device=self.obs.device)
            obs, next_obs, terminated = {"state": self.obs[i]}, {"state": self.next_obs[i]}, self.terminated[i]
        else:
            if self._frame_rows is None:
                kept, last, terminated, _ = self.frame_steps()
                self._frame_rows = (kept, torch.where(last[kept], kept, kept + 1), terminated[kept])
            kept, nxt, kept_terminated = self._frame_rows
            pick = torch.randint(kept.numel(), (batch_size,))
            j, i = kept[pick], kept[pick].to(self.obs.device)
            obs = {"state": self.obs[i], **{g: f[j].to(self.obs.device) for g, f in self.frames.items()}}
            next_obs = {"state": self.next_obs[i],
                        **{g: f[nxt[pick]].to(self.obs.device) for g, f in self.frames.items()}}
            terminated = kept_terminated[pick].to(self.obs.device)
        batch = Batch(obs=obs, action=self.action[i], reward=self.reward[i], next_obs=next_obs,
                      discount=gamma * (~terminated).float())
        return batch, self.mc_return[i]

    def to_replay(self, gamma: float, n_step: int, device: str | torch.device) -> ReplayBuffer:
        """A single-env replay buffer holding exactly these transitions (n-step windows stop at episode ends); with
        `frames`, a frame buffer (module docstring: a truncated episode's last step is left out), whose side ring of
        last frames the shortest episode sizes."""
        kept = self.frame_steps()[0] if self.frames else torch.arange(len(self))
        spec = {"state": ((self.obs.shape[1],), torch.float32),
                **{g: (tuple(f.shape[1:]), f.dtype) for g, f in self.frames.items()}}  # uint8, or cached features
        buffer = ReplayBuffer(
            int(kept.numel()), 1, spec, self.action.shape[1], device=device, gamma=gamma, n_step=n_step,
            frames=tuple(self.frames), episode_steps=int(torch.unique_consecutive(
                self._episodes()[kept], return_counts=True)[1].min()) if self.frames else None,
        )
        self.add_to(buffer)
        return buffer

    def _episodes(self) -> Tensor:
        m = len(self)
        episode = self.episode_index if self.episode_index is not None else torch.zeros(m, dtype=torch.long)
        return episode.cpu()

    def frame_steps(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(indices of the steps a frame buffer keeps, last step of its episode, terminated, truncated) [M]: a
        truncated (or unflagged) episode end has no next frame, so that step is dropped and the one before it ends
        the episode as a truncation (module docstring)."""
        m = len(self)
        episode = self._episodes()
        last = torch.ones(m, dtype=torch.bool)
        if m:
            last[:-1] = episode[1:] != episode[:-1]
        terminated = self.terminated.cpu() & last  # a terminated flag inside an episode cannot be: ignore it
        drop = last & ~terminated
        keep = ~drop
        truncated = torch.zeros(m, dtype=torch.bool)
        truncated[:-1] = drop[1:] & keep[:-1] & ~last[:-1]
        kept = keep.nonzero().flatten()
        if kept.numel() == 0:
            from robot_rl.datasets import DatasetError

            raise DatasetError("the camera data has no transition with a next frame (only one-step truncated episodes)")
        return kept, last, terminated, truncated

    def add_to(self, buffer: ReplayBuffer) -> int:
        """Append these transitions to `buffer`, a single-env buffer (this data's own, or a learner's prior buffer);
        returns how many. A state buffer takes them all at once (the last step of every episode ends it, so n-step
        windows never run into the next); a frame buffer, with these camera groups as `frames`, the steps it can
        hold exactly (`frame_steps`) one by one, storing each frame once."""
        if not self.frames:
            buffer.extend({"state": self.obs}, self.action, self.reward, {"state": self.next_obs}, self.terminated,
                          self.truncated)
            return len(self)
        kept, last, terminated, truncated = self.frame_steps()
        dev = buffer.device
        state, next_state = self.obs.to(dev), self.next_obs.to(dev)
        action, reward = self.action.to(dev), self.reward.to(dev)
        frames = {g: f.to(dev) for g, f in self.frames.items()}
        for i in kept.tolist():
            nxt = i + 1 if not last[i] else i  # a terminal step's next frame is never read (discount 0)
            buffer.add(
                {"state": state[i : i + 1], **{g: f[i : i + 1] for g, f in frames.items()}},
                action[i : i + 1], reward[i : i + 1],
                {"state": next_state[i : i + 1], **{g: f[nxt : nxt + 1] for g, f in frames.items()}},
                terminated[i : i + 1].to(dev), truncated[i : i + 1].to(dev),
            )
        return int(kept.numel())
