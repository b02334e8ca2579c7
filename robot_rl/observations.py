"""The observation pipeline between collection and the replay: each loop that fills a replay (the trainer's env
steps, the HIL learner's chunks and demos, prior data) hands its transitions to one `ObservationPipeline`, so each
step exists once and a new augmentation is one more `Augmentation`, not a copy in every loop. It feeds the agent's
running statistics from the transitions as collected (an augmented copy is no new experience; the statistics stay in
the agent, whose checkpoints and deployed policies carry them), adds each augmentation's image (`Mirror`), then with
`agent.encoder.cache_embeddings` stores each frame's frozen backbone features (`replay_spec`, `for_replay`): the backbone
runs once per frame, not in every update, and after the augmentations (a feature map cannot be flipped)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from robot_rl.envs.core import Reflection
from robot_rl.replay import ReplayBuffer
from robot_rl.transitions import Obs, Transitions, cat_obs

if TYPE_CHECKING:
    from robot_rl.agents.sac import SAC
    from robot_rl.prior_data import OfflineData

class Augmentation(Protocol):
    """A map of a task's transitions onto other valid ones with the same rewards and ends, of their observations
    and actions; `uncovered`: the observation groups among `groups` it cannot map (data holding them is refused)."""

    def observation(self, obs: Obs) -> Obs: ...

    def action(self, action: Tensor) -> Tensor: ...

    def uncovered(self, groups: Iterable[str]) -> list[str]: ...


class Mirror:
    """A task's mirror symmetry (`BatchedEnv.reflection`, a robot's ``mirror_*`` signs): states and actions times the
    signs, the reflection's cameras' frames flipped. It doubles the states the data covers at no cost: 20 push demos
    show a cube on the +y side pushed towards -y once and the mirror case four times, and RLPD's policies most often
    failed to reach the cube in the first (`bench/results/push_rlpd`)."""

    def __init__(self, reflection: Reflection) -> None:
        self.reflection = reflection

    def observation(self, obs: Obs) -> Obs:
        return self.reflection.observation(obs)

    def action(self, action: Tensor) -> Tensor:
        return action * self.reflection.action.to(action)

    def uncovered(self, groups: Iterable[str]) -> list[str]:
        return [g for g in groups if g != "state" and g not in self.reflection.cameras]


class ObservationPipeline:
    """`agent`'s observations from collection to the replay (module docstring), with `groups` stored. Vector envs
    (the trainer) go through `start`/`acting`/`add_step`, chunks of one env (the HIL learner) `chunk`, then
    `chunk_for_replay`; datasets `prior_data`."""

    def __init__(self, agent: SAC, groups: Sequence[str] = ("state",), online: Sequence[Augmentation] = (),
                 prior: Sequence[Augmentation] = ()) -> None:
        self.agent, self.groups = agent, tuple(groups)
        self.online, self.prior = tuple(online), tuple(prior)
        self.copies = 1 + len(self.online)  # replay columns per env: its own, then each augmentation's
        self.caches = bool(agent.cfg.encoder.cache_embeddings) and agent.encoder is not None
        self._current: Obs | None = None  # with the cache: the stored columns of a vector env's current observations
        self._last_frames: tuple[Obs, Obs] | None = None  # with the cache: the last chunk's last next frames, features

    def replay_spec(self, spec: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict:
        """What a replay stores for observation groups `spec`: the groups as they are, or with the cache each camera
        group as its frozen backbone's float16 features (`for_replay` makes them)."""
        if not self.caches:
            return spec
        encoder = self.agent.encoder
        shapes = {k: encoder.encoders[k.replace("/", "__")].backbone_shape for k in encoder.keys}
        return {k: ((shapes[k], torch.float16) if k in shapes else v) for k, v in spec.items()}

    @torch.no_grad()
    def for_replay(self, obs: Obs) -> Obs:
        """Observations as the replay stores them (`replay_spec`): with the cache the camera frames go through the
        frozen backbone once, here, instead of in every update that samples them."""
        if not self.caches:
            return obs
        encoder = self.agent.encoder
        return {k: encoder.frozen_features(k, v.to(self.agent.device)) if k in encoder.keys else v
                for k, v in obs.items()}

    @torch.no_grad()
    def chunk_for_replay(self, chunk: Transitions) -> Transitions:
        """Consecutive steps of one env (a HIL chunk) as the replay stores them. With the cache each frame passes the
        backbone once, in one batch: a step's next frames are the following step's frames except where an episode
        ended, and the first step's frames are usually the previous chunk's last next frames (a HIL actor sends one
        step per chunk), whose features are kept (not across a mirror image's chunk in between: those pass in full).
        Frames are compared, not flags, so a reuse is always exact."""
        if not self.caches:
            return chunk
        cameras, n = self.agent.encoder.keys, chunk.reward.shape[0]
        follows = torch.ones(n - 1, dtype=torch.bool)  # next frames i are frames i + 1
        for k in cameras:
            follows &= (chunk.next_obs[k][:-1] == chunk.obs[k][1:]).flatten(1).all(1)
        fresh = torch.cat([~follows, torch.ones(1, dtype=torch.bool)]).nonzero().squeeze(1)
        last = self._last_frames
        seen = last is not None and all(torch.equal(last[0][k], chunk.obs[k][:1]) for k in cameras)
        first = int(seen)  # the first step's frames need no pass when they are the previous chunk's last next ones
        new = self.for_replay({k: torch.cat([chunk.obs[k][first:], chunk.next_obs[k][fresh]]) for k in cameras})
        obs, next_obs = dict(chunk.obs), dict(chunk.next_obs)
        for k in cameras:
            obs[k] = torch.cat([last[1][k], new[k][: n - 1]]) if seen else new[k][:n]
            next_obs[k] = torch.cat([obs[k][1:], obs[k][-1:]])
            next_obs[k][fresh.to(obs[k].device)] = new[k][n - first:]
        self._last_frames = ({k: chunk.next_obs[k][-1:] for k in cameras}, {k: next_obs[k][-1:] for k in cameras})
        return chunk._replace(obs=obs, next_obs=next_obs)

    def columns(self, obs: Obs) -> Obs:
        """N observations as one replay add's rows: the N, then each online augmentation's N, as stored."""
        kept = {k: obs[k] for k in self.groups}
        return self.for_replay(cat_obs([kept, *(a.observation(kept) for a in self.online)]) if self.online else kept)

    def start(self, obs: Obs) -> None:  # the vector envs' first observations, after a reset
        self._current = self.columns(obs) if self.caches else None

    def acting(self, obs: Obs) -> Obs:
        """What the agent acts on for the current observations `obs`: they, or with the cache the features that
        `add_step` stored for them (the backbone ran once on them)."""
        return obs if self._current is None else {k: v[: obs["state"].shape[0]] for k, v in self._current.items()}

    def add_step(self, replay: ReplayBuffer, step: Transitions, next_obs: Obs, statistics: bool = True) -> None:
        """One step of N envs (`step.next_obs`: the final observations) as `copies` * N columns of `replay`, so each
        column stays one episode's stream. With the cache the backbone runs once on `next_obs` (after autoreset), the
        next step's observations and, where no episode ended, this step's next ones; only finished envs' final
        observations pass it too."""
        if self._current is None:
            obs, final = self.columns(step.obs), self.columns(step.next_obs)
        else:
            obs, self._current = self._current, self.columns(next_obs)
            final, done = self._current, step.terminated | step.truncated
            if bool(done.any()):
                ids = done.nonzero().squeeze(1)
                rows = torch.cat([ids + j * done.shape[0] for j in range(self.copies)])  # and its images' rows
                final = {k: v.clone() for k, v in final.items()}
                for k, v in self.columns({k: step.next_obs[k][ids] for k in self.groups}).items():
                    final[k][rows] = v
        k = self.copies
        replay.add(obs, torch.cat([step.action, *(a.action(step.action) for a in self.online)]), step.reward.repeat(k),
                   final, step.terminated.repeat(k), step.truncated.repeat(k))
        if statistics:
            self.agent.observe(step.obs, step.reward, step.terminated | step.truncated)

    def chunk(self, chunk: Transitions, online: bool = True) -> list[Transitions]:
        """Consecutive steps of one env (a HIL chunk) and each online augmentation's image of them, the statistics
        fed one step at a time (returns accumulate along them); `online=False`: demonstrations, the prior
        augmentations' images and no statistics."""
        if online and (self.agent.cfg.network.obs_norm or self.agent.cfg.critic.reward_scale):
            done = chunk.terminated | chunk.truncated
            for i in range(done.shape[0]):
                self.agent.observe({"state": chunk.obs["state"][i : i + 1]}, chunk.reward[i : i + 1], done[i : i + 1])
        return [chunk, *(chunk._replace(obs=a.observation(chunk.obs), action=a.action(chunk.action),
                                        next_obs=a.observation(chunk.next_obs))
                         for a in (self.online if online else self.prior))]

    def prior_data(self, data: OfflineData) -> OfflineData:
        """A dataset followed by each prior augmentation's image of it (as new episodes), its states and Monte-Carlo
        returns fed to the statistics, its frames as stored (a dataset's do not pass a backbone in one batch: 256
        at a time; on the CPU)."""
        from robot_rl.datasets import DatasetError
        from robot_rl.prior_data import OfflineData

        for augmentation in self.prior:
            uncovered = augmentation.uncovered(data.transitions.cameras)
            if uncovered:
                raise DatasetError(f"data.mirror=true: the task's reflection does not cover camera {uncovered[0]} of "
                                   "this dataset: set data.mirror=false")
        if self.prior:
            k, index = 1 + len(self.prior), data.episode_index
            shift = int(index.max()) + 1 if index is not None and index.numel() else 0
            data = OfflineData(Transitions.cat(self.chunk(data.transitions, online=False)), data.mc_return.repeat(k),
                               k * data.num_episodes, data.success_rate,
                               None if index is None else torch.cat([index + j * shift for j in range(k)]))
        self.agent.observe_dataset(data.transitions.obs["state"], data.mc_return)
        if self.caches:
            data.transitions = data.transitions._replace(obs={
                g: torch.cat([self.for_replay({g: f[i:i + 256]})[g].cpu() for i in range(0, len(f), 256)])
                if g != "state" and len(f) else f for g, f in data.transitions.obs.items()})
        return data
