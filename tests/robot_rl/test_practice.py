"""`robot-rl train env.practice=true`: the training envs practise without resets, evaluation keeps the task's own
starts, and the run logs its training episodes, the scenes a person had to put back and the reset controller's steps
(resumable counts)."""

from __future__ import annotations

import csv

import pytest
import torch
from robot_rl.envs.arm import STATE_LAYOUT

from robot_rl.config import ConfigError, compose_train_config
from robot_rl.trainer import Trainer

L = STATE_LAYOUT


def _cfg(steps: int, reset: str = "home") -> list[str]:
    return ["env.spec=arm:push", "env.practice=true", f"env.practice_reset={reset}", "env.num_envs=2", "env.num_eval_envs=1",
            "env.max_episode_steps=10", f"train.steps={steps}", "train.eval_every=40", "train.learning_starts=1000",
            "train.video=false", "quiet=true", "threads=1", "seed=0"]


def test_training_envs_practise_and_the_run_counts_episodes_and_human_resets(tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(compose_train_config(_cfg(40)), run)
    assert all(e.unwrapped.practice for e in trainer.env._envs)
    assert not any(e.unwrapped.practice for e in trainer.eval_env._envs)
    trainer.run()
    # in the replay ([time, env]), an episode's first state has the cube where the last one left it, a new target,
    # and the hand at home (a fresh start pose)
    replay = trainer.replay
    ends = (replay.truncated[:20, 0] | replay.terminated[:20, 0]).nonzero().flatten().tolist()
    assert ends, "episodes of 10 steps must have ended within 20 steps"
    p = ends[0]
    last, first = replay.next_obs["state"][p, 0], replay.obs["state"][p + 1, 0]
    torch.testing.assert_close(first[L["cube_pos"]], last[L["cube_pos"]])
    assert torch.all((first[L["ee_pos"]] >= torch.tensor([0.3, -0.12, 0.1]) - 1e-5)
                     & (first[L["ee_pos"]] <= torch.tensor([0.42, 0.12, 0.2]) + 1e-5))
    assert not torch.allclose(first[L["target_pos"]], last[L["target_pos"]])
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert {"train_episodes", "human_resets", "train_success_rate", "reset_steps"} <= set(rows[0])
    assert int(rows[-1]["train_episodes"]) == 4 and int(rows[-1]["human_resets"]) >= 0
    assert int(rows[-1]["reset_steps"]) == 0  # home: no reset controller ran
    # resumed, the counts go on from the checkpoint's
    resumed = Trainer(compose_train_config(_cfg(60)), run, resume=True)
    resumed.run()
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert int(rows[-1]["train_episodes"]) == 6


def test_the_reset_controller_runs_by_default_and_its_steps_are_logged_and_resumed(tmp_path):
    run = tmp_path / "run"
    cfg = [c for c in _cfg(40) if not c.startswith("env.practice_reset")]
    trainer = Trainer(compose_train_config(cfg), run)
    assert all(e.unwrapped.practice_reset == "expert" for e in trainer.env._envs)
    trainer.run()
    first = int(list(csv.DictReader(open(run / "metrics.csv")))[-1]["reset_steps"])
    # 4 episodes ended; the controller pushed each cube back (random actions leave it near where it was)
    assert first == sum(e.unwrapped.reset_motion_steps for e in trainer.env._envs) > 0
    Trainer(compose_train_config([c for c in _cfg(60) if not c.startswith("env.practice_reset")]), run,
            resume=True).run()
    assert int(list(csv.DictReader(open(run / "metrics.csv")))[-1]["reset_steps"]) > first


def test_practice_needs_an_arm_task_and_a_known_reset():
    with pytest.raises((ConfigError, ValueError), match="env.practice=true needs an arm: spec"):
        compose_train_config(["env.spec=gym:Pendulum-v1", "env.practice=true"]).validate()
    with pytest.raises(ConfigError, match="env.practice_reset must be one of 'expert', 'home', got 'person'"):
        compose_train_config(["env.spec=arm:push", "env.practice=true", "env.practice_reset=person"]).validate()
