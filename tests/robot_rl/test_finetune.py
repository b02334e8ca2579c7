"""`robot-rl collect` and the data-driven recipes of the trainer: RLPD mixing, offline pretraining, WSRL warm-up."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from robot_rl.cli import main
from robot_rl.config import compose_train_config
from robot_rl.datasets import DatasetError, read_dataset
from robot_rl.prior_data import OfflineData
from robot_rl.trainer import Trainer

TINY = ["agent.network.hidden_dims=[32,32]", "agent.network.critic_width=32", "agent.network.actor_width=32",
        "env.num_eval_envs=2", "train.video=false", "quiet=true", "threads=1"]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def reach_data(tmp_path_factory) -> Path:
    """A small mixed dataset: 4 expert and 3 random episodes of the sparse reach task."""
    out = tmp_path_factory.mktemp("data") / "reach"
    assert main(["collect", "env.spec=arm:reach-sparse", "episodes=4", "env.num_envs=3", f"out={out}"]) == 0
    assert main(["collect", "env.spec=arm:reach-sparse", "policy=random", "episodes=3", "env.num_envs=2", f"out={out}",
                 "append=true", "seed=1"]) == 0
    return out


def test_collect_writes_exactly_the_requested_episodes(reach_data: Path, capsys) -> None:
    t = read_dataset(reach_data)
    assert len(t.episodes) == 7  # 4 + 3, though more envs than remaining episodes were running
    per_episode_success = [bool(t.success[t.episode_index == e].any()) for e in range(7)]
    assert per_episode_success[:4] == [True] * 4  # the expert solves reach
    assert not any(per_episode_success[4:]) or sum(per_episode_success[4:]) < 3
    # Episodes end exactly where the env ended them: the last frame of each is terminated or truncated.
    ends = torch.nonzero(t.transitions.terminated | t.transitions.truncated).flatten()
    assert ends.numel() == 7


def test_collect_errors_are_one_line(tmp_path: Path, capsys) -> None:
    assert main(["collect", "env.spec=arm:reach"]) == 2
    assert "out=" in capsys.readouterr().err
    assert main(["collect", "env.spec=arm:reach", f"out={tmp_path}/d", "policy=nope.pt"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["collect", "env.spec=arm:reach", f"out={tmp_path}/d", "bogus=1"]) == 2
    assert "unknown key 'bogus' for collect; valid keys: env, out" in capsys.readouterr().err
    # An existing dataset: the hint names collect's own key (was resume=True/overwrite=True, both rejected).
    out = tmp_path / "one"
    assert main(["collect", "env.spec=arm:reach", "episodes=1", "env.num_envs=1", f"out={out}"]) == 0
    assert main(["collect", "env.spec=arm:reach", "episodes=1", f"out={out}"]) == 2
    assert f"{out}: a dataset already exists; pass append=true" in capsys.readouterr().err
    # Appending another task's episodes is refused (tests/robot_rl/test_collect.py); task= names one on purpose.
    assert main(["collect", "env.spec=arm:push", "episodes=1", "env.num_envs=1", f"out={out}", "append=true",
                 "task=push"]) == 0
    assert "already holds episodes of task(s) reach; adding episodes of 'push'" in capsys.readouterr().out
    # The env keys have train's names (env.num_envs, env.max_episode_steps); the old spelling points there.
    assert main(["collect", "env.spec=arm:reach", f"out={tmp_path}/d", "num_envs=2"]) == 2
    assert "unknown key 'num_envs' for collect (did you mean env.num_envs?)" in capsys.readouterr().err


def test_rlpd_batches_mix_prior_and_online_data(reach_data: Path, tmp_path: Path) -> None:
    cfg = compose_train_config(["env.spec=arm:reach-sparse", f"data.path={reach_data}", "agent.optimiser.utd=2",
                                "agent.optimiser.batch_size=8", "data.prior_fraction=0.25", *TINY])
    trainer = Trainer(cfg, tmp_path / "run")
    prior = trainer.prior
    assert prior is not None and trainer.prior_replay is not None and len(trainer.prior_replay) == len(prior)
    obs = trainer.env.reset(seed=12345)  # initial states the dataset does not hold
    for _ in range(5):
        action = torch.rand(1, trainer.env.action_dim) * 2 - 1
        nxt, r, term, trunc, info = trainer.env.step(action)
        trainer.replay.add(obs, action, r, info["final_obs"], term, trunc)
        obs = nxt
    batch = trainer.agent.sample(trainer.replay, trainer.prior_replay, cfg.data.prior_fraction)  # the agent: utd 2, batch 8
    assert batch.action.shape == (2, 8, trainer.env.action_dim)
    prior_rows = {tuple(row.tolist()) for row in prior.transitions.obs["state"]}
    for i in range(2):  # every one of the utd minibatches: 2 prior rows, then 6 online rows
        from_prior = [tuple(row.tolist()) in prior_rows for row in batch.obs["state"][i]]
        assert from_prior == [True] * 2 + [False] * 6


def test_wsrl_pretrains_warms_up_without_updates_then_learns_online(reach_data: Path, tmp_path: Path) -> None:
    run = tmp_path / "wsrl"
    code = main(["finetune", "env.spec=arm:reach-sparse", f"data.path={reach_data}", "offline.steps=40",
                 "offline.eval_every=20", "data.mix_online=false", "train.learning_starts=100", "train.steps=200",
                 "train.eval_every=100", "agent.optimiser.batch_size=32", f"run_dir={run}", "seed=3", *TINY])
    assert code == 0
    assert (run / "checkpoints" / "pretrained.pt").is_file()
    offline = _rows(run / "offline_metrics.csv")
    assert [int(r["offline_step"]) for r in offline] == [20, 40]
    assert all(r["cql_gap"] for r in offline)
    assert any((run / "tensorboard" / "offline").glob("events.out.tfevents.*"))  # the same logger as metrics.csv
    rows = _rows(run / "metrics.csv")
    assert [int(r["env_step"]) for r in rows] == [0, 100, 200]  # step 0 is the pretrained policy
    # The warm-up made no updates: the first one comes once learning_starts transitions are stored.
    assert [int(r["updates"]) for r in rows] == [0, 1, 101]

    # Naive fine-tuning from the same pretrained agent: updates start at once.
    naive = tmp_path / "naive"
    code = main(["finetune", "env.spec=arm:reach-sparse", f"data.path={reach_data}",
                 f"offline.init={run / 'checkpoints' / 'pretrained.pt'}", "data.mix_online=false",
                 "train.learning_starts=0", "train.steps=100", "train.eval_every=100", "agent.optimiser.batch_size=32",
                 f"run_dir={naive}", *TINY])
    assert code == 0
    rows = _rows(naive / "metrics.csv")
    assert rows[0]["env_step"] == "0" and int(rows[-1]["updates"]) > 50
    assert rows[0]["success_rate"] == _rows(run / "metrics.csv")[0]["success_rate"]  # same starting policy


@pytest.mark.parametrize("algorithm", ["cql", "iql"])
def test_other_offline_algorithms_run(reach_data: Path, tmp_path: Path, algorithm: str) -> None:
    code = main(["finetune", "env.spec=arm:reach-sparse", f"data.path={reach_data}", "offline.steps=10",
                 "offline.eval_every=10", f"offline.algorithm={algorithm}", "train.steps=20", "train.eval_every=20",
                 "train.learning_starts=10", "agent.optimiser.batch_size=16", f"run_dir={tmp_path / algorithm}", *TINY])
    assert code == 0


@pytest.mark.parametrize(
    "args, expected",
    [
        (["offline.steps=10"], "offline.steps > 0 needs a dataset"),
        ([], "finetune starts from data"),
        (["offline.algorithm=bc"], "offline.algorithm must be one of calql, cql, iql"),
        (["data.path=/nonexistent/dataset"], "/nonexistent/dataset"),
    ],
)
def test_finetune_user_errors(tmp_path: Path, capsys, args: list[str], expected: str) -> None:
    code = main(["finetune", "env.spec=arm:reach-sparse", f"run_dir={tmp_path / 'r'}", *args, *TINY])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and len(err.strip().splitlines()) == 1


def test_dataset_of_another_task_is_refused(reach_data: Path, tmp_path: Path, capsys) -> None:
    code = main(["train", "env.spec=gym:Pendulum-v1", f"data.path={reach_data}", f"run_dir={tmp_path / 'r'}", *TINY])
    assert code == 2
    assert "record the dataset on the same task" in capsys.readouterr().err


def test_interrupted_offline_pretraining_resumes_without_duplicate_rows(reach_data: Path, tmp_path: Path,
                                                                         monkeypatch) -> None:
    """Ctrl-C in the offline phase saves latest.pt at the last logged offline step; resuming redoes the steps after
    it once: offline_metrics.csv ends with one row per evaluation, none repeated."""
    from robot_rl.agents.calql import CalQL

    cfg = compose_train_config(["env.spec=arm:reach-sparse", f"data.path={reach_data}", "offline.steps=40",
                                "offline.eval_every=10", "train.steps=20", "train.eval_every=20",
                                "train.learning_starts=10", "agent.optimiser.batch_size=16", *TINY])
    run = tmp_path / "run"
    update, calls = CalQL.update, [0]

    def interrupt_at_25(self, *args):
        calls[0] += 1
        if calls[0] == 25:
            raise KeyboardInterrupt
        return update(self, *args)

    monkeypatch.setattr(CalQL, "update", interrupt_at_25)
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, run).run()
    assert [int(r["offline_step"]) for r in _rows(run / "offline_metrics.csv")] == [10, 20]
    monkeypatch.setattr(CalQL, "update", update)
    Trainer(cfg, run, resume=True).run()
    assert [int(r["offline_step"]) for r in _rows(run / "offline_metrics.csv")] == [10, 20, 30, 40]


def test_mirror_adds_the_reflection_of_every_prior_transition(tmp_path: Path, capsys) -> None:
    """`data.mirror=true` on push: the prior data is the dataset followed by its reflection in y = 0 (the env's
    `reflection()` signs), as new episodes, and RLPD's prior buffer holds both; a task without a symmetry, a
    mirror without data, and camera data the reflection does not cover each stop with one line."""
    out = tmp_path / "push"
    assert main(["collect", "env.spec=arm:push-sparse", "episodes=2", "env.num_envs=1", f"out={out}"]) == 0
    plain = Trainer(compose_train_config(["env.spec=arm:push-sparse", f"data.path={out}", *TINY]), tmp_path / "a")
    cfg = compose_train_config(["env.spec=arm:push-sparse", f"data.path={out}", "data.mirror=true", *TINY])
    trainer = Trainer(cfg, tmp_path / "b")
    original, prior = plain.prior, trainer.prior
    m, o, p = len(original), original.transitions, prior.transitions
    sign = trainer.env.reflection()
    assert len(prior) == 2 * m and prior.num_episodes == 4 and len(trainer.prior_replay) == 2 * m
    state = o.obs["state"]
    assert torch.equal(p.obs["state"][:m], state) and torch.equal(p.obs["state"][m:], state * sign.state)
    assert torch.equal(p.next_obs["state"][m:], o.next_obs["state"] * sign.state)
    assert torch.equal(p.action[m:, 1], -o.action[:, 1])
    assert torch.equal(p.action[m:, 0], o.action[:, 0])
    assert torch.equal(p.obs["state"][m:, 1], -state[:, 1])  # the hand's y
    for name in ("reward", "terminated", "truncated"):
        assert torch.equal(getattr(p, name)[m:], getattr(o, name)), name
    assert torch.equal(prior.mc_return[m:], original.mc_return)
    assert set(prior.episode_index[m:].tolist()).isdisjoint(prior.episode_index[:m].tolist())
    plain.env.close()
    trainer.env.close()

    for args, expected in [
        (["env.spec=arm:reach-sparse", f"data.path={out}"], "arm:reach-sparse declares no mirror symmetry"),
        (["env.spec=arm:push-sparse"], "data.mirror=true needs data.path"),
    ]:
        assert main(["train", *args, "data.mirror=true", f"run_dir={tmp_path / 'r'}", *TINY]) == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    frames = {"pixels/front": torch.zeros(m, 8, 8, 3, dtype=torch.uint8)}
    with_frames = OfflineData(o._replace(obs={**o.obs, **frames}), original.mc_return, 2, 1.0)
    with pytest.raises(DatasetError, match="does not cover camera pixels/front of this dataset"):
        trainer.method.pipeline.prior_data(with_frames)  # the state task's reflection flips no camera


def test_mirror_online_stores_each_transition_and_its_reflection(tmp_path: Path, capsys) -> None:
    """`train.mirror_online=true`: each env step stores 2 transitions per env, the second half of the replay's
    columns the reflections of the first (so a column stays one episode's stream for n-step returns); updates run
    on it; a task without a symmetry stops with one line."""
    cfg = compose_train_config(["env.spec=arm:push-sparse", "train.mirror_online=true", "env.num_envs=2",
                                "agent.critic.n_step=3", "train.learning_starts=20",
                                "agent.optimiser.batch_size=8", *TINY])
    trainer = Trainer(cfg, tmp_path / "run")
    sign = trainer.env.reflection()
    trainer.method.start(0)
    for _ in range(30):
        trainer.method.advance()
    replay = trainer.replay
    assert trainer.method.updates > 0
    assert replay.num_envs == 4 and len(replay) == 2 * 30 * 2
    for name in ("obs", "next_obs"):
        stored = getattr(replay, name)["state"][:30]
        assert torch.equal(stored[:, 2:], stored[:, :2] * sign.state), name
    assert torch.equal(replay.action[:30, 2:], replay.action[:30, :2] * sign.action)
    assert replay.action[:30, :2, 1].abs().sum() > 0  # the y displacement did change sign somewhere
    for name in ("reward", "terminated", "truncated"):
        assert torch.equal(getattr(replay, name)[:30, 2:], getattr(replay, name)[:30, :2]), name
    assert replay.sample(16).action.shape == (16, 4)
    trainer.env.close()
    args = ["train", "env.spec=arm:reach", "train.mirror_online=true", f"run_dir={tmp_path / 'r'}", *TINY]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "train.mirror_online=true: arm:reach declares no mirror symmetry" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("freeze", [True, False])
def test_wsrl_warm_up_keeps_the_pretrained_policy(reach_data: Path, tmp_path: Path, freeze: bool) -> None:
    """With observation normalisation, the warm-up policy (no updates) is the pretrained one: its evaluations equal
    the step-0 evaluation exactly with `offline.freeze_statistics=true`. Updating the statistics with online data
    (false, the default) changes what the same networks do before any update (measured on reach: 70% -> 55%)."""
    run = tmp_path / "wsrl"
    code = main(["finetune", "env.spec=arm:reach", f"data.path={reach_data}", "offline.steps=30",
                 "offline.eval_every=30", "data.mix_online=false", "agent.network.obs_norm=true",
                 "train.learning_starts=200", "train.steps=150", "train.eval_every=75", "agent.optimiser.batch_size=32",
                 f"run_dir={run}", "seed=3",
                 f"offline.freeze_statistics={str(freeze).lower()}", *TINY])
    assert code == 0
    rows = _rows(run / "metrics.csv")
    assert [int(r["updates"]) for r in rows] == [0, 0, 0]
    returns = [float(r["eval_return_mean"]) for r in rows]
    assert (returns[1] == returns[0] and returns[2] == returns[0]) == freeze, returns


def test_critic_warmup_updates_leave_the_actor_alone(reach_data: Path, tmp_path: Path) -> None:
    """`train.critic_warmup_updates`: the first updates after learning starts train the critics only, so the
    policy evaluated after them is still the pretrained one (its return is step 0's exactly), while the critics
    moved; once they are spent the actor moves too."""
    run = tmp_path / "warm"
    code = main(["finetune", "env.spec=arm:reach", f"data.path={reach_data}", "offline.steps=30",
                 "offline.eval_every=30", "data.mix_online=false", "train.learning_starts=50",
                 "train.critic_warmup_updates=100", "offline.freeze_statistics=true", "train.steps=250",
                 "train.eval_every=125", "agent.optimiser.batch_size=32",
                 f"run_dir={run}", "seed=3", *TINY])
    assert code == 0
    rows = _rows(run / "metrics.csv")
    assert [int(r["updates"]) for r in rows] == [0, 76, 201]
    returns = [float(r["eval_return_mean"]) for r in rows]
    assert returns[1] == returns[0] and returns[2] != returns[0], returns
    assert rows[1]["critic_loss"] and not rows[1]["actor_loss"]  # critic-only updates log no actor loss
    pretrained = torch.load(run / "checkpoints" / "pretrained.pt", weights_only=False)["agent"]
    final = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["agent"]
    assert any(not torch.equal(v, final["critic"][k]) for k, v in pretrained["critic"].items())


@pytest.mark.parametrize("algorithm, kept", [("iql", False), ("calql", True)])
def test_offline_init_keeps_a_learned_temperature_and_takes_this_runs_where_none_was_learned(
    reach_data: Path, tmp_path: Path, algorithm: str, kept: bool
) -> None:
    """IQL never trains the temperature, so its checkpoint holds only the pretraining's agent.exploration.init_temperature, and
    that silently replaced the fine-tuning run's own (measured: WSRL runs on reach with agent.exploration.init_temperature=0.001
    and 0.05 identical to the last digit). Cal-QL learns it as SAC does: fine-tuning continues from it."""
    pre = tmp_path / f"pre_{algorithm}"
    assert main(["finetune", "env.spec=arm:reach-sparse", f"data.path={reach_data}", "offline.steps=10",
                 "offline.eval_every=10", f"offline.algorithm={algorithm}", "agent.exploration.init_temperature=0.05",
                 "train.steps=1", "agent.optimiser.batch_size=16", f"run_dir={pre}", *TINY]) == 0
    ckpt = pre / "checkpoints" / "pretrained.pt"
    learned = torch.load(ckpt, weights_only=False)["agent"]["log_alpha"].exp().item()
    cfg = compose_train_config(["env.spec=arm:reach-sparse", f"offline.init={ckpt}",
                                "agent.exploration.init_temperature=0.001",
                                "agent.optimiser.batch_size=16", *TINY])
    temperature = Trainer(cfg, tmp_path / "online").agent.log_alpha.exp().item()
    if kept:
        assert learned != pytest.approx(0.05) and temperature == pytest.approx(learned)
    else:
        assert learned == pytest.approx(0.05) and temperature == pytest.approx(0.001)
