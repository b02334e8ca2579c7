"""Reward classifier: frame labels from next.success, training with held-out episodes, save/load, the env reward
wrapper, the CLI and its errors. The dataset is written through EpisodeRecorder and DatasetWriter from a toy
loop that follows the env contract (info["success"] describes the observation the action led to)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.classifier import ClassifierError, SuccessClassifier, load_classifier, save_classifier
from robot_rl.classifier_train import (
    TrainSettings,
    frame_labels,
    load_labelled_frames,
    split_episodes,
    train_classifier,
)
from robot_rl.datasets import DatasetWriter, EpisodeRecorder, read_dataset, transition_features

SIZE = 32
LENGTH = 10
EPISODES = 16
FAST = dict(feature_dim=16, channels=8, layers=3, hidden=32, batch_size=32)


def frame(rng: np.random.Generator, success: bool) -> np.ndarray:
    """Dark noisy background, a green distractor square anywhere, and a red marker square when successful."""
    img = rng.integers(0, 40, size=(SIZE, SIZE, 3)).astype(np.uint8)
    y, x = rng.integers(0, SIZE - 8, size=2)
    img[y : y + 8, x : x + 8] = (0, 200, 0)
    if success:
        y, x = rng.integers(0, SIZE - 8, size=2)
        img[y : y + 8, x : x + 8] = (230, 20, 20)
    return img


def record(root: Path, episodes: int = EPISODES, seed: int = 0) -> list[list[bool]]:
    """Write `episodes` episodes of LENGTH steps; returns, per episode, whether each stored frame shows success.

    Every other episode succeeds from a random step on and stays successful until the time limit. The state is
    [t, success] of the observation, so a test can also check the rows' alignment."""
    rng = np.random.default_rng(seed)
    writer = DatasetWriter(root, fps=10, features=transition_features(2, 1, images={"front": (SIZE, SIZE)}),
                           task="mark", fsync=False)
    recorder = EpisodeRecorder(writer, 1, obs_keys={"state": "observation.state", "pixels/front":
                                                    "observation.images.front"})
    shown: list[list[bool]] = []
    for e in range(episodes):
        onset = int(rng.integers(2, LENGTH)) if e % 2 == 0 else LENGTH + 1  # step whose observation succeeds

        def obs(t: int, onset: int = onset) -> dict[str, torch.Tensor]:
            ok = t >= onset
            return {"state": torch.tensor([[t, float(ok)]]), "pixels/front": torch.from_numpy(frame(rng, ok))[None]}

        current, flags = obs(0), []
        for t in range(LENGTH):
            flags.append(bool(current["state"][0, 1]))
            nxt = obs(t + 1)
            last = t == LENGTH - 1
            info = {"success": nxt["state"][:, 1].bool(), "final_obs": nxt}
            recorder.record(current, torch.zeros(1, 1), torch.zeros(1), torch.tensor([False]), torch.tensor([last]),
                            info)
            current = nxt
        shown.append(flags)
    recorder.close()
    writer.close()
    return shown


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[bool]]]:
    root = tmp_path_factory.mktemp("clf") / "data"
    return root, record(root)


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory: pytest.TempPathFactory):
    root, _ = dataset
    frames = load_labelled_frames(root)
    model, metrics = train_classifier(frames, TrainSettings(steps=300, seed=0, holdout=0.25, **FAST),
                                      message=lambda s: None)
    out = tmp_path_factory.mktemp("clf") / "classifier"
    save_classifier(model, out, metrics, {"dataset": str(root)})
    return model, metrics, out


def test_frame_labels_shift_next_success_by_one_within_episodes() -> None:
    next_success = torch.tensor([0, 1, 1, 0, 0, 1, 1], dtype=torch.bool)
    episode = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    assert frame_labels(next_success, episode).tolist() == [False, False, True, False, False, False, True]


def test_labels_match_what_the_stored_frames_show(dataset) -> None:
    root, shown = dataset
    frames = load_labelled_frames(root)
    assert frames.label.tolist() == [f for ep in shown for f in ep]
    assert torch.equal(frames.label, frames.obs["state"][:, 1].bool())  # the row's own observation
    data = read_dataset(root)
    assert not torch.equal(data.success, frames.label)  # next.success is one step ahead
    assert frames.obs["pixels/front"].shape == (EPISODES * LENGTH, SIZE, SIZE, 3)


def test_split_holds_out_whole_episodes() -> None:
    episode = torch.arange(10).repeat_interleave(5)
    train, held = split_episodes(episode, 0.3, seed=1)
    assert set(episode[held].tolist()).isdisjoint(episode[train].tolist())
    assert len(set(episode[held].tolist())) == 3 and bool((train ^ held).all())
    assert torch.equal(held, split_episodes(episode, 0.3, seed=1)[1])


def test_training_reaches_high_precision_and_recall_on_held_out_episodes(trained) -> None:
    _, metrics, _ = trained
    assert metrics["heldout_positives"] > 0 and len(metrics["heldout_episodes"]) == EPISODES // 4
    assert metrics["precision"] >= 0.9 and metrics["recall"] >= 0.9, metrics
    assert metrics["threshold"] == 0.5 and set(metrics["by_threshold"]) == {"0.1", "0.3", "0.5", "0.7", "0.9"}


def test_training_is_seeded(dataset) -> None:
    frames = load_labelled_frames(dataset[0])
    settings = TrainSettings(steps=5, seed=3, **FAST)
    a, _ = train_classifier(frames, settings, message=lambda s: None)
    b, _ = train_classifier(frames, settings, message=lambda s: None)
    for (k, v), w in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(v, w), k


def test_save_load_round_trip_gives_identical_logits(trained, dataset) -> None:
    model, metrics, out = trained
    loaded = load_classifier(out)
    frames = load_labelled_frames(dataset[0])
    obs = {"pixels/front": frames.obs["pixels/front"][:40]}
    assert torch.equal(model(obs), loaded(obs))
    assert loaded.metrics == metrics and loaded.metadata["dataset"] == str(dataset[0])


def test_state_input_round_trips(tmp_path: Path) -> None:
    model = SuccessClassifier({"pixels": [SIZE, SIZE, 3]}, state_dim=2, **{k: v for k, v in FAST.items()
                                                                           if k != "batch_size"})
    model.state_mean.fill_(1.0)
    save_classifier(model, tmp_path / "c")
    obs = {"pixels": torch.randint(0, 255, (3, SIZE, SIZE, 3), dtype=torch.uint8), "state": torch.randn(3, 2)}
    assert torch.equal(model.eval()(obs), load_classifier(tmp_path / "c")(obs))


def test_loading_a_missing_or_foreign_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClassifierError, match="no such classifier directory"):
        load_classifier(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ClassifierError, match="not a saved classifier"):
        load_classifier(tmp_path / "empty")
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "config.json").write_text('{"format": "robot_rl.policy"}')
    (tmp_path / "policy" / "model.safetensors").write_bytes(b"")
    with pytest.raises(ClassifierError, match="a saved policy"):
        load_classifier(tmp_path / "policy")


def test_no_success_frames_is_a_clear_error(tmp_path: Path) -> None:
    record(tmp_path / "d", episodes=2, seed=0)  # episode 0 succeeds, episode 1 never: one of them is held out
    frames = load_labelled_frames(tmp_path / "d")
    frames.label[:] = False
    with pytest.raises(ClassifierError, match="no success frames"):
        train_classifier(frames, TrainSettings(steps=1, **FAST), message=lambda s: None)
