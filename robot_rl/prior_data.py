"""Prior data: a dataset on disk as tensors on the learner's device, with Monte-Carlo returns, and its replay buffer.

One dataset serves three recipes (see `docs/architecture.md`): RLPD mixes its replay buffer into every online
batch (`data.mix_online`, `data.prior_fraction`); offline pretraining (Cal-QL, CQL or IQL, `robot_rl.offline`)
samples it directly with its Monte-Carlo returns; the HIL learner and residual RL fill their prior buffers from it.

Camera datasets (`robot-rl collect` in an `arm:<task>-pixels` task): `load(..., cameras=("pixels/front", ...))` also
decodes each camera's video (`observation.images.<camera>`) into its observation group, and `to_replay` then builds
a frame buffer (`ReplayBuffer(frames=...)`, each frame stored once) that `replay.sample_mixed` mixes as it mixes a
state buffer. A dataset keeps no frame after an episode's last step, so the last step of an episode cut off by its
time limit (truncated) has no next frame: it is left out of that buffer and the step before it, whose next frame is
the episode's last recorded one, is marked truncated (bootstrapped, as the time limit's cut is). Every stored
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
from robot_rl.transitions import Transitions


@dataclass
class OfflineData:
    """All transitions of a dataset with Monte-Carlo returns (for Cal-QL). ``transitions``: the `Transitions` of
    `read_dataset`, their states on the learner's device, camera frames (``pixels/<camera>`` uint8 [M, H, W, 3],
    each step's obs; the next frame is the following row's) on the CPU, the replay buffer made from them holding the
    device copy; with cached embeddings the learners replace them by the frozen backbone's features
    (`ObservationPipeline.prior_data`)."""

    transitions: Transitions
    mc_return: Tensor
    num_episodes: int
    success_rate: float | None
    episode_index: Tensor | None = None  # int64 [M], on the CPU
    _frame_rows: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False)  # `sample`'s, made once

    @classmethod
    def load(
        cls, path: str | Path, gamma: float, max_episodes: int | None = None, device: str | torch.device = "cpu",
        cameras: Sequence[str] = (), env_spec: str = "",
    ) -> OfflineData:
        """`cameras`: env camera groups whose videos (`observation.images.<camera>`) to decode into frames;
        `env_spec`: the run's env, for the command that records a missing dataset."""
        from robot_rl.datasets import DatasetError, monte_carlo_returns, read_dataset
        from robot_rl.datasets.format import camera_feature, load_info

        if not Path(path).exists():
            raise DatasetError(
                f"data.path={path} does not exist; record it first, e.g. "
                f"robot-rl collect env.spec={env_spec or 'arm:push-sparse'} policy=expert episodes=20 out={path}"
            )
        if cameras:
            have = load_info(Path(path))["features"]
            missing = [f for f in map(camera_feature, cameras) if have.get(f, {}).get("dtype") != "video"]
            if missing:
                videos = sorted(k for k, v in have.items() if v.get("dtype") == "video") or "none"
                raise DatasetError(f"{path} has no {', '.join(missing)} video (its videos: {videos}); the env learns "
                                   f"from cameras {', '.join(cameras)}: record the dataset in the same -pixels task")
        t = read_dataset(path, load_images=bool(cameras))
        keep = torch.ones_like(t.transitions.reward, dtype=torch.bool)
        if max_episodes is not None:
            keep = torch.isin(t.episode_index, torch.unique(t.episode_index)[:max_episodes])
        x = t.transitions._replace(obs={g: t.transitions.obs[g] for g in ("state", *cameras)}).rows(keep)
        episode_index = t.episode_index[keep]
        episodes = torch.unique(episode_index)
        success_rate = None
        if episodes.numel():
            per_episode = torch.zeros(int(episode_index.max()) + 1, dtype=torch.bool)
            per_episode[episode_index[t.success[keep]]] = True
            success_rate = per_episode[episodes].float().mean().item()
        dev = torch.device(device)
        return cls(
            Transitions({**x.obs, "state": x.obs["state"].to(dev)}, x.action.to(dev), x.reward.to(dev),
                        {"state": x.next_obs["state"].to(dev)}, x.terminated.to(dev), x.truncated.to(dev)),
            monte_carlo_returns(x.reward, episode_index, x.terminated, gamma).to(dev), int(episodes.numel()),
            success_rate, episode_index,
        )

    def __len__(self) -> int:
        return self.transitions.size

    def check_fits(self, obs_dim: int, action_dim: int, where: str,
                   cameras: Mapping[str, tuple[int, ...]] | None = None) -> None:
        """Raise `DatasetError` unless the state, action and (`cameras`: group -> (H, W, C)) frame shapes fit the env."""
        from robot_rl.datasets import DatasetError

        state, action = self.transitions.obs["state"].shape[1], self.transitions.action.shape[1]
        if state != obs_dim or action != action_dim:
            raise DatasetError(
                f"{where} has observations of size {state} and actions of size {action}, "
                f"but the env has {obs_dim} and {action_dim}: record the dataset on the same task"
            )
        for group, shape in (cameras or {}).items():
            frames = self.transitions.cameras
            have = tuple(frames[group].shape[1:]) if group in frames else None
            if have != tuple(shape):
                raise DatasetError(f"{where} has {group} frames of shape {have}, the env {tuple(shape)}: record the "
                                   f"dataset with the same env.pixel_size")

    def sample(self, batch_size: int, gamma: float) -> tuple[Batch, Tensor]:
        """A uniform one-step batch and the Monte-Carlo returns of its transitions; with frames, over the steps a
        frame buffer keeps (`frame_steps`), each step's frames as obs and the next step's as next_obs."""
        t = self.transitions
        dev = t.action.device
        if not t.cameras:
            i = torch.randint(len(self), (batch_size,), device=dev)
            obs, next_obs, terminated = {"state": t.obs["state"][i]}, {"state": t.next_obs["state"][i]}, t.terminated[i]
        else:
            if self._frame_rows is None:
                kept, last, terminated, _ = self.frame_steps()
                self._frame_rows = (kept, torch.where(last[kept], kept, kept + 1), terminated[kept])
            kept, nxt, kept_terminated = self._frame_rows
            pick = torch.randint(kept.numel(), (batch_size,))
            j, i = kept[pick], kept[pick].to(dev)
            obs = {"state": t.obs["state"][i], **{g: f[j].to(dev) for g, f in t.cameras.items()}}
            next_obs = {"state": t.next_obs["state"][i], **{g: f[nxt[pick]].to(dev) for g, f in t.cameras.items()}}
            terminated = kept_terminated[pick].to(dev)
        batch = Batch(obs=obs, action=t.action[i], reward=t.reward[i], next_obs=next_obs,
                      discount=gamma * (~terminated).float())
        return batch, self.mc_return[i]

    def to_replay(self, gamma: float, n_step: int, device: str | torch.device) -> ReplayBuffer:
        """A single-env replay buffer holding exactly these transitions (n-step windows stop at episode ends); with
        frames, a frame buffer (module docstring: a truncated episode's last step is left out), whose side ring of
        last frames the shortest episode sizes."""
        t = self.transitions
        kept = self.frame_steps()[0] if t.cameras else torch.arange(len(self))
        buffer = ReplayBuffer(
            int(kept.numel()), 1, {g: (tuple(v.shape[1:]), v.dtype) for g, v in t.obs.items()}, t.action.shape[1],
            device=device, gamma=gamma, n_step=n_step, frames=tuple(t.cameras), episode_steps=int(
                torch.unique_consecutive(self._episodes()[kept], return_counts=True)[1].min()) if t.cameras else None,
        )  # the frames uint8, or cached features
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
        terminated = self.transitions.terminated.cpu() & last  # a terminated flag inside an episode cannot be: ignore it
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
        t = self.transitions
        if not t.cameras:
            buffer.extend(*t)
            return len(self)
        kept, last, terminated, truncated = self.frame_steps()
        dev = buffer.device
        obs, next_state = {g: v.to(dev) for g, v in t.obs.items()}, t.next_obs["state"].to(dev)
        action, reward = t.action.to(dev), t.reward.to(dev)
        for i in kept.tolist():
            nxt = i + 1 if not last[i] else i  # a terminal step's next frame is never read (discount 0)
            buffer.add(
                {g: v[i : i + 1] for g, v in obs.items()}, action[i : i + 1], reward[i : i + 1],
                {"state": next_state[i : i + 1], **{g: obs[g][nxt : nxt + 1] for g in t.cameras}},
                terminated[i : i + 1].to(dev), truncated[i : i + 1].to(dev),
            )
        return int(kept.numel())
