"""JSRL (`robot_rl.jump_start`): the guide's share of each episode, the curriculum, and what the learner's replay
holds in a real training run."""

import pytest
import torch

from robot_rl.config import ConfigError, compose_train_config
from robot_rl.jump_start import JumpStart, JumpStartConfig


def _jump_start(stages=2, window=2, tolerance=0.9, envs=2, length=10):
    resets = []
    js = JumpStart(JumpStartConfig(guide="x", stages=stages, window=window, tolerance=tolerance),
                   guide=lambda obs: torch.ones(envs, 1), guide_reset=resets.append, num_envs=envs,
                   episode_steps=length)
    return js, resets


def _finish(js, done, score, steps=10):
    """`steps` env steps, the last ending the episodes of `done` with `score`."""
    for _ in range(steps - 1):
        js.step(torch.zeros_like(done), torch.zeros_like(score))
    js.step(done, score)


def test_the_guide_acts_within_the_horizon_and_each_env_counts_its_own_episode():
    js, resets = _jump_start(stages=2, length=4)
    assert js.horizons == [4, 2, 0]
    js.stage = 1  # horizon 2
    learner = torch.zeros(2, 1)
    acted = []
    for t in range(4):
        acted.append(js.act({}, learner)[:, 0].tolist())
        done = torch.tensor([t == 0, False])  # env 0's episode ends after its first step
        js.step(done, torch.zeros(2))
    # env 0: guide, (new episode) guide, guide, learner; env 1: guide, guide, learner, learner
    assert acted == [[1, 1], [1, 1], [1, 0], [0, 0]]
    assert len(resets) == 1 and resets[0].tolist() == [True, False]  # the guide's per-episode state is reset


def test_the_handover_moves_earlier_once_the_learner_scores_near_the_guide():
    js, _ = _jump_start(stages=2, window=2, tolerance=0.9)
    both = torch.tensor([True, True])
    _finish(js, both, torch.tensor([1.0, 1.0]))  # stage 0: the guide's own episodes set the reference (1.0)
    assert js.reference == 1.0 and js.horizon == 5
    js.step(both, torch.tensor([1.0, 0.0]))  # 0.5 < 0.9: stays
    assert js.horizon == 5
    js.step(both, torch.tensor([1.0, 1.0]))
    assert js.horizon == 0
    state = js.state_dict()
    fresh, _ = _jump_start(stages=2, window=2)
    fresh.load_state_dict(state)
    assert fresh.horizon == 0 and fresh.reference == 1.0 and fresh.horizons == js.horizons


def test_the_handover_starts_from_the_guides_episode_length_not_the_time_limit():
    # the guide finishes its episodes in 40 of 100 steps: handing over at 90, 80 .. 50 would leave the learner
    # nothing to do; the stages after the guide's own hand over at 32, 24, 16, 8 and 0
    js, _ = _jump_start(stages=5, window=2, envs=2, length=100)
    assert js.horizons == [100, 80, 60, 40, 20, 0]
    _finish(js, torch.tensor([True, True]), torch.tensor([1.0, 1.0]), steps=40)
    assert js.horizons == [100, 32, 24, 16, 8, 0] and js.horizon == 32


def test_negative_returns_are_judged_within_tolerance_below_the_reference():
    js, _ = _jump_start(stages=1, window=1, tolerance=0.9)
    js.step(torch.tensor([True, False]), torch.tensor([-100.0, 0.0]))
    assert js.reference == -100.0 and js.horizon == 0  # the guide's own window always passes its reference
    js, _ = _jump_start(stages=2, window=1, tolerance=0.9)
    _finish(js, torch.tensor([True, False]), torch.tensor([-100.0, 0.0]))
    js.step(torch.tensor([True, False]), torch.tensor([-115.0, 0.0]))  # below -110: stays
    assert js.horizon == 5
    js.step(torch.tensor([True, False]), torch.tensor([-105.0, 0.0]))
    assert js.horizon == 0


def test_bad_keys_are_one_line_errors_naming_the_key(tmp_path):
    from robot_rl.errors import UserError
    from robot_rl.trainer import Trainer

    with pytest.raises(ConfigError, match="jsrl.tolerance must be in"):
        compose_train_config(["jsrl.tolerance=0"]).validate()
    with pytest.raises(UserError, match="jsrl.guide=expert: gym:Pendulum-v1 has no scripted expert"):
        Trainer(compose_train_config(["jsrl.guide=expert", "quiet=true", "train.video=false"]), tmp_path / "a")
    with pytest.raises(UserError, match="jsrl.guide=.*nowhere"):
        Trainer(compose_train_config(["env=reach", "jsrl.guide=" + str(tmp_path / "nowhere"), "quiet=true",
                                      "train.video=false"]), tmp_path / "b")


def test_the_replay_holds_the_guides_actions_while_it_drives(tmp_path):
    """At stage 0 the scripted expert drives whole episodes: the learner's replay holds exactly the actions the
    expert takes from the same initial states, and the run logs the horizon."""
    from robot_rl.envs.arm.experts import make_expert

    from robot_rl.trainer import Trainer, make_env

    cfg = compose_train_config([
        "env.spec=arm:reach", "env.num_envs=2", "env.num_eval_envs=1", "jsrl.guide=expert", "jsrl.window=50",
        "train.steps=40", "train.eval_every=40", "train.learning_starts=1000", "train.video=false", "quiet=true",
        "threads=1", "seed=3"])
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.run()
    env = make_env(cfg, 2)
    expert = make_expert("arm:reach", 2, noise=0.0, seed=3, device=env.device)
    obs = env.reset(seed=3)
    expected = []
    for _ in range(20):
        action = expert.act(obs)
        expected.append(action)
        obs, _, terminated, truncated, _ = env.step(action)
        if (done := terminated | truncated).any():
            expert.reset(done)
    torch.testing.assert_close(trainer.replay.action[:20], torch.stack(expected))
    assert "jsrl_horizon" in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
