"""Reward classifier: frame labels from next.success, training with held-out episodes, save/load, the env reward
wrapper, the CLI and its errors. The dataset is written through EpisodeRecorder and DatasetWriter from a toy
loop that follows the env contract (info["success"] describes the observation the action led to)."""

from __future__ import annotations

import csv
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from robot_rl.envs import BatchedEnv

from robot_rl import envs
from robot_rl.classifier import ClassifierError, SuccessClassifier, load_classifier, save_classifier
from robot_rl.classifier_reward import ClassifierReward, LearnedReward, SuccessStreak
from robot_rl.classifier_train import (
    LabelledFrames,
    TrainSettings,
    frame_labels,
    join_frames,
    load_labelled_frames,
    split_episodes,
    train_classifier,
)
from robot_rl.cli import main
from robot_rl.datasets import DatasetError, DatasetWriter, EpisodeRecorder, read_dataset, transition_features

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


def test_a_given_held_out_mask_is_the_split(dataset) -> None:
    """`held_out=` fixes which episodes are held out (the same set for every setting compared), whatever the seed."""
    frames = load_labelled_frames(dataset[0])
    held = frames.episode >= int(frames.episode.max())  # the last episode only
    for seed in (0, 1):
        _, metrics = train_classifier(frames, TrainSettings(steps=2, seed=seed, **FAST), message=lambda s: None,
                                      held_out=held)
        assert metrics["heldout_episodes"] == [int(frames.episode.max())]
        assert metrics["heldout_frames"] == int(held.sum()) and metrics["train_frames"] == int((~held).sum())


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


# -- the reward wrapper ----------------------------------------------------------------------------------------
PATTERN = [0, 1, 0, 1, 1, 1, 1, 1, 1]  # the marker in the observation after reset (0) and after each step


class MarkerEnv(gym.Env):
    """Two cameras (`front` shows the marker on the steps PATTERN says, `wrist` is noise), no own success."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        image = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(
            {"state": gym.spaces.Box(-1, 1, (1,), np.float32), "front": image, "wrist": image})
        self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.rng, self.t = np.random.default_rng(0), 0

    def _obs(self) -> dict:
        shown = bool(PATTERN[min(self.t, len(PATTERN) - 1)])
        front = frame(self.rng, shown) if self.size == SIZE else np.zeros((self.size, self.size, 3), np.uint8)
        return {"state": np.zeros(1, np.float32), "front": front,
                "wrist": self.rng.integers(0, 255, (self.size, self.size, 3)).astype(np.uint8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), -5.0, False, False, {}


def marker_env(num_envs: int = 1, size: int = SIZE) -> BatchedEnv:
    return envs.from_gymnasium(lambda: MarkerEnv(size), num_envs, seed=0, max_episode_steps=len(PATTERN) - 1)


def roll(env: BatchedEnv, steps: int) -> list[tuple]:
    env.reset(seed=0)
    out = []
    for _ in range(steps):
        _, reward, terminated, truncated, info = env.step(torch.zeros(env.num_envs, 1))
        out.append((reward.clone(), terminated.clone(), truncated.clone(), info))
    return out


def test_reward_is_the_classifiers_verdict_on_the_frame_the_action_led_to(trained) -> None:
    env = ClassifierReward(marker_env(2), trained[2], threshold=0.5, consecutive=1, terminate=False)
    steps = roll(env, len(PATTERN) - 1)
    prob = torch.stack([info["classifier_prob"] for *_, info in steps])
    reward = torch.stack([r for r, *_ in steps])
    assert torch.equal(reward, (prob >= 0.5).float())
    assert torch.equal(reward[:, 0], torch.tensor(PATTERN[1:], dtype=torch.float32))  # the classifier is right
    assert all(torch.equal(info["success"], r.bool()) for r, *_, info in steps)
    assert not any(bool(t.any()) for _, t, _, _ in steps) and bool(steps[-1][2].all())  # time limit only
    assert torch.equal(steps[-1][3]["episode_return"], torch.full((2,), float(sum(PATTERN[1:]))))
    env.close()


def test_success_streak_threshold_consecutive_and_episode_reset() -> None:
    """The one rule behind ClassifierReward and the robot commands' learned reward."""
    streak = SuccessStreak(threshold=0.5, consecutive=2)
    probs = [0.6, 0.4, 0.5, 0.7, 0.9, 0.49, 0.8]  # 0.5 counts (>=); 0.49 breaks the streak
    assert [bool(streak.update(torch.tensor([p]))[0]) for p in probs] == [False, False, False, True, True, False,
                                                                          False]
    streak.update(torch.tensor([0.9]))
    streak.reset()  # a new episode: the streak does not carry over
    assert not bool(streak.update(torch.tensor([0.9]))[0]) and bool(streak.update(torch.tensor([0.9]))[0])
    batched = SuccessStreak(threshold=0.5, consecutive=1, num_envs=2)
    assert batched.update(torch.tensor([0.9, 0.1])).tolist() == [True, False]
    batched = SuccessStreak(threshold=0.5, consecutive=2, num_envs=2)
    batched.update(torch.tensor([0.9, 0.9]))
    batched.reset(torch.tensor([True, False]))  # only env 0's episode ended
    assert batched.update(torch.tensor([0.9, 0.9])).tolist() == [False, True]
    for threshold, consecutive, match in [(0.0, 1, "threshold must be in"), (1.5, 1, "threshold must be in"),
                                          (0.5, 0, "consecutive must be >= 1")]:
        with pytest.raises(ValueError, match=match):
            SuccessStreak(threshold, consecutive)


def test_learned_reward_judges_one_robots_observations_with_the_same_rule(trained) -> None:
    reward = LearnedReward(trained[2], threshold=0.5, consecutive=2)
    rng = np.random.default_rng(3)
    marked = [False, True, True, True, False, True, True]
    verdicts = [reward({"state": np.zeros(2), "pixels/front": frame(rng, m)}) for m in marked]
    assert verdicts == [(0.0, False), (0.0, False), (1.0, True), (1.0, True), (0.0, False), (0.0, False), (1.0, True)]
    reward.reset()
    assert reward({"pixels/front": frame(rng, True)}) == (0.0, False)  # streak starts over in a new episode
    reward.check_robot(0, {"pixels/front": [SIZE, SIZE, 3], "pixels/wrist": [8, 8, 3]}, "robot")  # extra cameras: fine
    with pytest.raises(ClassifierError, match=r"robot: the classifier reads camera 'pixels/front', the env has none"):
        reward.check_robot(7, {}, "robot")


def test_consecutive_steps_and_termination(trained) -> None:
    env = ClassifierReward(marker_env(), trained[2], threshold=0.5, consecutive=2, terminate=False)
    assert [float(r) for r, *_ in roll(env, len(PATTERN) - 1)] == [0, 0, 0, 1, 1, 1, 1, 1]
    env = ClassifierReward(marker_env(), trained[2], threshold=0.5, consecutive=2, terminate=True)
    steps = roll(env, 6)
    assert [float(r) for r, *_ in steps] == [0, 0, 0, 1, 0, 0]  # ends at the 2nd marker in a row, starts over
    assert [bool(t) for _, t, _, _ in steps] == [False, False, False, True, False, False]
    assert float(steps[3][3]["episode_return"]) == 1.0 and float(steps[3][3]["episode_length"]) == 4
    env.close()


def test_threshold_above_every_probability_never_rewards(trained) -> None:
    env = ClassifierReward(marker_env(), trained[2], threshold=1.0, consecutive=1, terminate=False)
    steps = roll(env, 4)
    assert all(float(r) == float(info["classifier_prob"] >= 1.0) for r, *_, info in steps)
    env.close()


def test_mismatched_or_missing_classifier_is_one_clear_error(trained, tmp_path: Path) -> None:
    with pytest.raises(ClassifierError, match=r"trained on pixels/front frames of \[32, 32, 3\], the env gives \[16"):
        ClassifierReward(marker_env(size=16), trained[2])
    with pytest.raises(ClassifierError, match="reads camera 'pixels/front', the env has none"):
        ClassifierReward(envs.make("gym:Pendulum-v1"), trained[2])
    with pytest.raises(ClassifierError, match="no such classifier directory"):
        ClassifierReward(marker_env(), tmp_path / "missing")


def test_train_cli_names_the_key_of_a_bad_classifier(capsys, tmp_path: Path, trained) -> None:
    for value, expected in [(tmp_path / "missing", "no such classifier directory"),
                            (trained[2], "the classifier reads camera 'pixels/front', the env has none")]:
        code = main(["train", "env.spec=gym:Pendulum-v1", f"env.reward_classifier={value}", "train.steps=10",
                     f"run_dir={tmp_path / 'run'}", "logger=none", "quiet=true"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("robot-rl: error: env.reward_classifier: ") and expected in err, err
        assert len(err.splitlines()) == 1


# -- the classifier command ------------------------------------------------------------------------------------
def test_classifier_cli_trains_saves_and_reports(capsys, dataset, tmp_path: Path) -> None:
    out = tmp_path / "c"
    code = main(["classifier", f"dataset={dataset[0]}", f"out={out}", "steps=20", "seed=1", "holdout=0.25",
                 "channels=8", "layers=3", "feature_dim=16", "batch_size=16", "pool=spatial_softmax"])
    text = capsys.readouterr().out
    assert code == 0 and "[classifier] step 20/20" in text and "done: held-out precision " in text, text
    loaded = load_classifier(out)
    assert "recall" in text.splitlines()[-1] and loaded.metrics["steps"] == 20
    assert loaded.pool == "spatial_softmax" and loaded.config()["pool"] == "spatial_softmax"  # rebuilt as trained


def test_classifier_on_a_frozen_pretrained_backbone_trains_only_its_pooling_and_loads_without_the_file(
        capsys, dataset, tmp_path: Path) -> None:
    """`encoder=pretrained` (HIL-SERL's classifier): the backbone comes from the user's local weights file and stays
    as it was; the saved classifier carries it, so it loads (same logits) after the file is gone. A missing file or
    a missing encoder_weights is one line."""
    from robot_rl.policies.encoders import ResNetBackbone

    torch.manual_seed(3)
    weights = tmp_path / "r10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), weights)
    out = tmp_path / "c"
    code = main(["classifier", f"dataset={dataset[0]}", f"out={out}", "steps=6", "holdout=0.25", "batch_size=8",
                 "feature_dim=8", "encoder=pretrained", f"encoder_weights={weights}", "encoder_spatial_features=2",
                 "cameras=[front]"])
    assert code == 0, capsys.readouterr().err
    saved = torch.load(weights, weights_only=True)
    weights.unlink()
    loaded = load_classifier(out)
    assert loaded.config()["encoder"] == "pretrained" and loaded.config()["backbone"] == "resnet10"
    backbone = loaded.fusion.encoders["pixels__front"].backbone
    for name, value in backbone.state_dict().items():
        torch.testing.assert_close(value, saved[name], msg=name)  # frozen: exactly the file's weights
    frames = load_labelled_frames(dataset[0], ["front"])
    again = load_classifier(out)
    torch.testing.assert_close(loaded.probability(frames.obs), again.probability(frames.obs))
    for args, expected in (([f"encoder_weights={weights}"], f"backbone weights {weights}: no such file"),
                           ([], "encoder=pretrained needs encoder_weights=<local backbone weights file>")):
        capsys.readouterr()
        assert main(["classifier", f"dataset={dataset[0]}", f"out={tmp_path / 'x'}", "steps=2",
                     "encoder=pretrained", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert expected in err and len(err.splitlines()) == 1, err


def test_a_classifier_on_a_frozen_readout_trains_only_its_head(capsys, dataset, tmp_path: Path) -> None:
    """`encoder=pretrained encoder_readout=true`: each camera's features are the weights file's frozen readout (a
    pose estimator's head, say); only the MLP head trains, and the saved classifier rebuilds with its readout."""
    from robot_rl.policies.encoders import ResNetBackbone

    torch.manual_seed(3)
    weights = tmp_path / "estimator.pt"
    state = {**ResNetBackbone("resnet10").state_dict(), "readout.front.weight": torch.randn(4, 512) * 0.05,
             "readout.front.bias": torch.zeros(4)}
    torch.save(state, weights)
    out = tmp_path / "c"
    assert main(["classifier", f"dataset={dataset[0]}", f"out={out}", "steps=6", "holdout=0.25", "batch_size=8",
                 "feature_dim=4", "encoder=pretrained", f"encoder_weights={weights}", "encoder_readout=true",
                 "shift_pad=0", "cameras=[front]"]) == 0, capsys.readouterr().err
    loaded = load_classifier(out)
    assert loaded.config()["readout"] is True
    readout = loaded.fusion.encoders["pixels__front"].readout
    torch.testing.assert_close(readout.weight, state["readout.front.weight"])
    assert main(["classifier", f"dataset={dataset[0]}", f"out={tmp_path / 'x'}", "steps=2",
                 "encoder_readout=true"]) == 2
    assert "encoder_readout=true needs encoder=pretrained" in capsys.readouterr().err


def test_extra_datasets_train_and_the_held_out_episodes_stay_the_datasets(capsys, dataset, tmp_path: Path) -> None:
    """`extra=[...]` (a second round of labels, e.g. a policy's rollouts): every extra episode trains, the held-out
    episodes are the ones `dataset=` alone would hold out, so figures before and after the round compare."""
    more = tmp_path / "more"
    record(more, episodes=4, seed=5)
    common = ["steps=2", "seed=1", "holdout=0.25", "channels=8", "layers=3", "feature_dim=16", "batch_size=16"]
    assert main(["classifier", f"dataset={dataset[0]}", f"out={tmp_path / 'a'}", *common]) == 0
    assert main(["classifier", f"dataset={dataset[0]}", f"extra=[{more}]", f"out={tmp_path / 'b'}", *common]) == 0
    a, b = load_classifier(tmp_path / "a").metrics, load_classifier(tmp_path / "b").metrics
    assert a["heldout_episodes"] == b["heldout_episodes"] and a["heldout_frames"] == b["heldout_frames"]
    assert b["train_episodes"] == a["train_episodes"] + 4 and b["train_frames"] == a["train_frames"] + 4 * LENGTH
    capsys.readouterr()
    assert main(["classifier", f"dataset={dataset[0]}", "extra=[/nonexistent]", "out=x"]) == 2
    assert "extra dataset /nonexistent does not exist" in capsys.readouterr().err


def test_join_frames_renumbers_episodes_and_refuses_other_cameras() -> None:
    def part(episodes: list[int], size: int = 8) -> LabelledFrames:
        n = len(episodes)
        return LabelledFrames({"pixels/front": torch.zeros(n, size, size, 3, dtype=torch.uint8),
                               "state": torch.zeros(n, 2)}, torch.zeros(n, dtype=torch.bool), torch.tensor(episodes))

    joined, first = join_frames([part([3, 3, 7]), part([0, 1, 1])], ["a", "b"])
    assert joined.episode.tolist() == [0, 0, 1, 2, 3, 3] and first.tolist() == [True] * 3 + [False] * 3
    with pytest.raises(DatasetError, match=r"b: its frames and state are .*16, 16, 3.*record it with the same cameras"):
        join_frames([part([0]), part([0], size=16)], ["a", "b"])


@pytest.mark.parametrize("args, expected", [
    (["dataset=/nonexistent", "out=x"], "dataset /nonexistent does not exist"),
    (["out=x"], "classifier needs dataset=<dataset dir> and out=<dir>"),
    (["dataset=.", "out=x", "holdout=1.5"], "holdout must be in (0, 1), not 1.5"),
    (["dataset=.", "out=x", "stepz=3"], "unknown key 'stepz' for classifier"),
    (["dataset=.", "out=x", "pool=max"], "pool must be one of flatten, spatial_softmax, not 'max'"),
])
def test_classifier_cli_errors_are_one_line(capsys, args, expected) -> None:
    code = main(["classifier", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err


def test_train_learns_from_the_classifier_reward_end_to_end(tmp_path: Path, trained) -> None:
    """`robot-rl train env.reward_classifier=<dir>`: the training envs' rewards are the classifier's (the marker shows
    after the first step, so every training episode is one rewarded step); evaluation keeps the env's own -5."""
    from robot_rl import checkpoint

    if "robot_rl_test/Marker-v0" not in gym.registry:
        gym.register("robot_rl_test/Marker-v0", entry_point=MarkerEnv, max_episode_steps=len(PATTERN) - 1)
    run = tmp_path / "run"
    assert main(["train", "env.spec=gym:robot_rl_test/Marker-v0", f"env.reward_classifier={trained[2]}",
                 "train.steps=40", "train.learning_starts=30", "agent=sac", "agent.network.hidden_dims=[16,16]",
                 "agent.optimiser.batch_size=8", "agent.encoder.channels=4", "agent.encoder.layers=1",
                 "agent.encoder.feature_dim=8", "env.num_eval_envs=1", "train.eval_every=40",
                 "train.replay_capacity=100", "train.video=false", "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    state = checkpoint.load(run / "checkpoints" / "latest.pt")
    replay = state["method"]["replay"] if "method" in state else state["replay"]
    assert torch.equal(replay["reward"], torch.ones(40, 1)) and bool(replay["terminated"].all())


def always_success(path: Path, cameras: dict, logit: float = 20.0) -> Path:
    """A saved classifier that calls every frame a success (its last bias +20), whatever it is shown; with a
    negative `logit`, never a success."""
    model = SuccessClassifier(cameras, **{k: v for k, v in FAST.items() if k != "batch_size"})
    with torch.no_grad():
        model.head[-1].bias.fill_(logit)
    save_classifier(model, path)
    return path


@pytest.mark.parametrize("ends", [True, False])
def test_end_on_task_success_false_lets_training_episodes_go_on_past_the_tasks_success(tmp_path: Path,
                                                                                     ends: bool) -> None:
    """`env.end_on_task_success=false`: a training episode the classifier does not end goes on past the task's
    success (on a robot nothing else knows of it), while evaluation envs still end there. Before, the task's own
    success always ended it, with the classifier's verdict (here 0) as the reward of that success."""
    from robot_rl.envs.arm.experts import make_expert

    from robot_rl.config import compose_train_config
    from robot_rl.trainer import make_env

    clf = always_success(tmp_path / "clf", {"pixels/front": [SIZE, SIZE, 3]}, logit=-20.0)
    cfg = compose_train_config(["env.spec=arm:reach-sparse", f"env.reward_classifier={clf}",
                                f"env.end_on_task_success={str(ends).lower()}"])
    with make_env(cfg, 2, learned_reward=True) as train_env, make_env(cfg, 2) as eval_env:
        for env, learned in ((train_env, True), (eval_env, False)):
            expert, obs = make_expert("arm:reach-sparse", 2, seed=0), env.reset(seed=1)
            task_successes = 0
            for _ in range(25):
                obs, reward, terminated, truncated, info = env.step(expert.act(obs))
                expert.reset(terminated | truncated)
                task = info["env_success"] if learned else info["success"]
                task_successes += int(task.sum())
                assert torch.equal(terminated, task if ends or not learned else torch.zeros_like(task))
                if learned:
                    assert not bool(reward.any())  # the classifier's verdict, never the task's
            assert task_successes >= 2


def test_end_on_task_success_is_refused_where_nothing_reads_it(capsys) -> None:
    assert main(["train", "env.spec=gym:Pendulum-v1", "env.end_on_task_success=false"]) == 2
    err = capsys.readouterr().err.strip()
    assert "env.end_on_task_success=false needs an arm: spec" in err and len(err.splitlines()) == 1, err
    assert main(["finetune", "method=dsrl", "base_policy=x", "env.spec=arm:push", "env.end_on_task_success=false"]) == 2
    assert "env.end_on_task_success is read by robot-rl train" in capsys.readouterr().err


def test_a_state_arm_task_renders_the_classifiers_frames_and_the_learner_reads_the_state(tmp_path: Path) -> None:
    """`train env.spec=arm:push-sparse env.reward_classifier=<dir>`: a state task has no cameras, so the training
    envs are the -pixels variant with the full state, at the classifier's frame size; the learner sees only the
    state (what the state task observes: the same numbers from the same seed), the reward is the classifier's, and
    the mirror symmetry stays (without the hidden cameras). Before, the classifier found no camera to read."""
    from robot_rl import checkpoint
    from robot_rl.config import compose_train_config
    from robot_rl.trainer import make_env

    clf = always_success(tmp_path / "clf", {"pixels/front": [SIZE, SIZE, 3]})
    cfg = compose_train_config(["env.spec=arm:push-sparse", f"env.reward_classifier={clf}"])
    with make_env(cfg, 2, learned_reward=True) as env, envs.make("arm:push-sparse", 2) as plain:
        assert env.observation_spec == plain.observation_spec == {"state": ((29,), torch.float32)}
        assert env.single_observation_space == plain.single_observation_space
        obs, first = env.reset(seed=3), plain.reset(seed=3)
        assert obs.keys() == {"state"} and torch.equal(obs["state"], first["state"])
        _, reward, terminated, _, info = env.step(torch.zeros(2, 4))
        assert torch.equal(reward, torch.ones(2)) and bool(terminated.all()) and not bool(info["env_success"].any())
        assert info["final_obs"].keys() == {"state"}
        reflection, own = env.reflection(), plain.reflection()
        assert reflection.cameras == () and torch.equal(reflection.state, own.state)
    run = tmp_path / "run"
    assert main(["train", "env.spec=arm:push-sparse", f"env.reward_classifier={clf}", "train.steps=30",
                 "train.learning_starts=20", "agent=sac", "agent.network.hidden_dims=[16,16]",
                 "agent.optimiser.batch_size=8",
                 "train.mirror_online=true", "env.num_eval_envs=1", "train.eval_every=30", "train.replay_capacity=100",
                 "train.video=false", "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    state = checkpoint.load(run / "checkpoints" / "latest.pt")
    replay = state["method"]["replay"] if "method" in state else state["replay"]
    assert not any(k.startswith("pixels") for k in replay["obs"])
    assert bool((replay["reward"][:30] == 1).all()) and bool(replay["terminated"][:30].all())
    # each training episode's end judged both ways: the classifier's success, never the task's
    row = next(csv.DictReader((run / "metrics.csv").open()))
    assert float(row["train_success_rate"]) == 1.0 and float(row["train_env_success_rate"]) == 0.0
    assert float(row["train_reward_false_success"]) == 1.0 and float(row["train_reward_missed_success"]) == 0.0


def test_a_classifier_a_state_task_cannot_render_for_is_one_clear_error(tmp_path: Path) -> None:
    from robot_rl.classifier_reward import classifier_view

    mixed = always_success(tmp_path / "mixed", {"pixels/front": [SIZE, SIZE, 3], "pixels/wrist": [16, 16, 3]})
    with pytest.raises(ClassifierError, match=r"different frame sizes \[\(16, 16\), \(32, 32\)\]"):
        classifier_view("arm:push", mixed)
    assert classifier_view("arm:push-pixels", mixed) is None  # observes cameras: checked against them as before
    assert classifier_view("gym:Pendulum-v1", mixed) is None  # nothing to render: ClassifierReward names the camera
    with pytest.raises(ValueError, match="full_state=True: only arm:<task>-pixels specs"):
        envs.make("arm:push", full_state=True)


@pytest.mark.parametrize("args, expected", [
    (["train", "env.reward_classifier_threshold=0"], "env.reward_classifier_threshold must be in (0, 1]"),
    (["train", "env.reward_classifier_consecutive=0"], "env.reward_classifier_consecutive must be >= 1"),
    (["finetune", "method=dsrl", "base_policy=x", "env.spec=arm:push", "env.reward_classifier=x"],
     "env.reward_classifier is read by robot-rl train (and finetune from data), not by method= fine-tuning"),
])
def test_reward_classifier_keys_are_checked(capsys, args, expected) -> None:
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err
