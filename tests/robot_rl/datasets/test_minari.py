"""Minari import: a small Pendulum-v1 dataset made locally (never downloaded), converted and read back."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.datasets import DatasetError, read_dataset
from robot_rl.datasets.minari import import_minari

LENGTHS = [20, 20, 12]


def make_minari_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Roll out random actions in Pendulum-v1 and store them as a Minari dataset under tmp_path.

    Minari's DataCollector needs jax (``minari[create]``); ``create_dataset_from_buffers`` with the arrow
    backend (pyarrow is ours already) builds the same on-disk dataset without it.
    """
    minari = pytest.importorskip("minari")
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = gym.make("Pendulum-v1", max_episode_steps=20)
    env.action_space.seed(0)
    buffers, raw = [], []
    for ep, n in enumerate(LENGTHS):
        obs, _ = env.reset(seed=ep)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        for t in range(n):
            action = env.action_space.sample()
            obs, reward, term, trunc, _ = env.step(action)
            trunc = trunc or t == n - 1  # the last episode is cut short by "the operator"
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
            terms.append(term)
            truncs.append(trunc)
        raw.append(
            (np.array(observations), np.array(actions), np.array(rewards), np.array(terms), np.array(truncs))
        )
        buffers.append(
            EpisodeBuffer(
                id=ep,
                observations=np.array(observations),
                actions=np.array(actions),
                rewards=rewards,
                terminations=terms,
                truncations=truncs,
                infos={},
            )
        )
    ds = minari.create_dataset_from_buffers(
        "test/pendulum-random-v0",
        buffers,
        env=env,
        algorithm_name="random",
        description="test",
        data_format="arrow",
    )
    env.close()
    return ds, raw


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_import_minari_by_id_and_by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds, raw = make_minari_dataset(tmp_path, monkeypatch)
    root = import_minari("test/pendulum-random-v0", tmp_path / "lr", fps=20)
    tr = read_dataset(root)
    assert tr.episodes.length.tolist() == LENGTHS
    assert tr.episodes.task == ["test/pendulum-random-v0"] * 3
    obs = np.concatenate([r[0][:-1] for r in raw])
    next_obs = np.concatenate([r[0][1:] for r in raw])
    torch.testing.assert_close(tr.transitions.obs["state"], torch.from_numpy(obs.astype(np.float32)))
    torch.testing.assert_close(tr.transitions.next_obs["state"], torch.from_numpy(next_obs.astype(np.float32)))
    torch.testing.assert_close(
        tr.transitions.reward, torch.from_numpy(np.concatenate([r[2] for r in raw]).astype(np.float32))
    )
    actions = np.concatenate([r[1] for r in raw]).astype(np.float32)
    torch.testing.assert_close(tr.transitions.action, torch.from_numpy(actions / 2.0))  # Box(-2, 2) -> [-1, 1]
    assert tr.transitions.truncated.sum() == 3 and not tr.transitions.terminated.any()
    assert tr.transitions.truncated[torch.cumsum(tr.episodes.length, 0) - 1].all()
    info = json.loads((root / "meta/info.json").read_text())
    assert info["robot_rl"]["source"] == "minari:test/pendulum-random-v0"
    assert info["robot_rl"]["action_low"] == [-2.0] and info["fps"] == 20

    by_path = import_minari(Path(ds.spec.data_path).parent, tmp_path / "lr2", normalize_actions=False)
    torch.testing.assert_close(read_dataset(by_path).transitions.action, torch.from_numpy(actions))


def test_import_minari_never_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    with pytest.raises(DatasetError, match="nothing is downloaded"):
        import_minari("D4RL/door/human-v2", tmp_path / "lr")
    assert not (tmp_path / "lr").exists()


def test_missing_minari_names_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_minari(name, *args, **kwargs):
        if name == "minari" or name.startswith("minari."):
            raise ImportError("No module named 'minari'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_minari)
    with pytest.raises(ImportError, match=r'pip install "robot-rl\[minari\]"'):
        import_minari("test/pendulum-random-v0", tmp_path / "lr")
