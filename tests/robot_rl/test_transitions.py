"""`robot_rl.transitions.Transitions`, the one batch-of-transitions type: a dataset recorded from env steps reads back
as the very transitions the trainer's replay stores for those steps, and a HIL chunk converts to it once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl import envs
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.datasets import DatasetWriter, EpisodeRecorder, read_dataset, transition_features
from robot_rl.observations import ObservationPipeline
from robot_rl.replay import ReplayBuffer
from robot_rl.transitions import Transitions, frame_keys, from_chunk

pytestmark = pytest.mark.usefixtures("one_thread")


def _episodes(t: Transitions) -> list[Transitions]:
    """`t` (one env's consecutive steps) cut after every terminated or truncated step; an unfinished tail dropped."""
    ends = (t.terminated | t.truncated).nonzero().flatten().tolist()
    return [t.rows(slice(a, b + 1)) for a, b in zip([0, *[e + 1 for e in ends[:-1]]], ends, strict=True)]


def test_a_recorded_dataset_reads_back_as_the_transitions_the_replay_stored(tmp_path: Path) -> None:
    """The trainer's env steps go through the pipeline into its replay; the same steps recorded by `EpisodeRecorder`
    and read by `read_dataset` give, episode for episode, the same `Transitions` (states, actions, rewards, the
    true next states at episode ends, flags), bit for bit."""
    n, limit, steps = 2, 4, 11
    env = envs.make("arm:reach", num_envs=n, seed=0, max_episode_steps=limit)
    state_spec = env.observation_spec["state"]
    d, a = state_spec[0][0], env.action_dim
    pipeline = ObservationPipeline(SAC(d, a, SACConfig()))
    replay = ReplayBuffer(steps * n, n, pipeline.replay_spec({"state": state_spec}), a)  # capacity: all envs
    writer = DatasetWriter(tmp_path / "ds", fps=10, features=transition_features(d, a), task="reach")
    recorder = EpisodeRecorder(writer, n, task="reach")
    obs = env.reset(seed=0)
    pipeline.start(obs)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        action = torch.rand(n, a, generator=g) * 2 - 1
        next_obs, reward, terminated, truncated, info = env.step(action)
        pipeline.add_step(replay, Transitions(obs, action, reward, info["final_obs"], terminated, truncated), next_obs)
        recorder.record(obs, action, reward, terminated, truncated, info)
        obs = next_obs
    env.close()
    recorder.close()
    writer.close()

    stored = [episode for e in range(n) for episode in _episodes(Transitions(
        {"state": replay.obs["state"][:steps, e]}, replay.action[:steps, e], replay.reward[:steps, e],
        {"state": replay.next_obs["state"][:steps, e]}, replay.terminated[:steps, e], replay.truncated[:steps, e]))]
    data = read_dataset(tmp_path / "ds")
    read = [data.transitions.rows(data.episode_index == i) for i in data.episodes.index.tolist()]
    assert len(read) == len(stored) == n * (steps // limit)
    for episode in read:
        (match,) = [s for s in stored if torch.equal(s.obs["state"][0], episode.obs["state"][0])]
        for name, x, y in zip(Transitions._fields, episode, match, strict=True):
            x, y = (x["state"], y["state"]) if isinstance(x, dict) else (x, y)
            assert x.dtype == y.dtype and torch.equal(x, y), name


def test_a_chunk_becomes_transitions_with_the_cameras_frames() -> None:
    """`from_chunk`: states and each camera's frames as observation groups, copies of the chunk's arrays (a chunk
    that arrives through Ray is read-only)."""
    n = 3
    rng = np.random.default_rng(0)
    chunk = {"obs": rng.random((n, 5), dtype=np.float32), "next_obs": rng.random((n, 5), dtype=np.float32),
             "action": rng.random((n, 2), dtype=np.float32), "reward": rng.random(n, dtype=np.float32),
             "terminated": np.zeros(n, bool), "truncated": np.array([False, False, True]),
             "intervention": np.zeros(n, bool)}
    obs_key, next_key = frame_keys("pixels/front")
    chunk[obs_key] = rng.integers(0, 256, (n, 4, 4, 3), dtype=np.uint8)
    chunk[next_key] = rng.integers(0, 256, (n, 4, 4, 3), dtype=np.uint8)
    for array in chunk.values():
        array.setflags(write=False)
    t = from_chunk(chunk, ["pixels/front"])
    assert set(t.obs) == set(t.next_obs) == {"state", "pixels/front"} and t.size == n
    assert np.array_equal(t.obs["pixels/front"].numpy(), chunk[obs_key])
    assert np.array_equal(t.next_obs["state"].numpy(), chunk["next_obs"]) and t.truncated.tolist() == [0, 0, 1]
    t.obs["state"] += 1  # its own memory
    assert not np.array_equal(t.obs["state"].numpy(), chunk["obs"])
    assert set(from_chunk(chunk).obs) == {"state"}  # a state learner reads no frames
    both = Transitions.cat([t, t.rows(slice(0, 1))])
    assert both.size == n + 1 and torch.equal(both.obs["pixels/front"][n], t.obs["pixels/front"][0])
